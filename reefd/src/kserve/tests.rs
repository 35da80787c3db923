use super::*;

#[test]
fn priority_maps_as_the_schedule_policy_extension_says() {
    let be = Priority::Be;
    assert_eq!(level_of_priority(None, be).unwrap(), be);
    assert_eq!(
        level_of_priority(Some(0), Priority::Rt).unwrap(),
        Priority::Rt
    );
    assert_eq!(level_of_priority(Some(1), be).unwrap(), Priority::Rt);
    assert_eq!(level_of_priority(Some(2), be).unwrap().get(), 1);
    assert_eq!(level_of_priority(Some(10), be).unwrap(), Priority::Be);
    assert!(level_of_priority(Some(11), be).is_err());
    assert!(level_of_priority(Some(-1), be).is_err());
}

#[test]
fn access_needs_the_token_off_loopback_and_for_admin() {
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    let far: IpAddr = "10.1.2.3".parse().unwrap();
    let open = Access::default();
    assert_eq!(open.check(Some(lo), false, None, false), Ok(()));
    assert_eq!(
        open.check(Some(lo), false, None, true),
        Err(Denied::Unauthenticated)
    );
    assert_eq!(
        open.check(Some(far), false, None, false),
        Err(Denied::Unauthenticated)
    );
    let tok = Access {
        token: Some("s3cret".into()),
    };
    assert_eq!(tok.check(Some(lo), false, None, false), Ok(()));
    assert_eq!(tok.check(Some(lo), false, Some("s3cret"), true), Ok(()));
    assert_eq!(
        tok.check(Some(lo), false, Some("wrong"), false),
        Err(Denied::Unauthenticated)
    );
    assert_eq!(
        tok.check(Some(far), false, None, false),
        Err(Denied::Unauthenticated)
    );
    assert_eq!(tok.check(Some(far), false, Some("s3cret"), false), Ok(()));
    assert_eq!(
        tok.check(Some(far), false, Some("s3cre"), false),
        Err(Denied::Unauthenticated)
    );
    // Mutual TLS: a verified client certificate stands for the token,
    // but not for load and unload, and not beside a wrong token.
    for a in [&open, &tok] {
        assert_eq!(a.check(Some(far), true, None, false), Ok(()));
        assert_eq!(
            a.check(Some(far), true, None, true),
            Err(Denied::Unauthenticated)
        );
    }
    assert_eq!(
        tok.check(Some(far), true, Some("wrong"), false),
        Err(Denied::Unauthenticated)
    );
    assert_eq!(tok.check(Some(far), true, Some("s3cret"), true), Ok(()));
}
