//! The docs check on the real docs (README.md, docs/*.md), and on a scratch
//! copy with stale command lines added, to show it fails on them.
//!
//! The binaries are the ones in this test's target directory
//! (target/debug): `cargo test --workspace`, as CI runs it, builds them
//! before any test runs; alone, `cargo test -p reef-docscheck` needs
//! `cargo build -p reefd --bins -p reef-bench -p reef-idem` first, and says so.

use reef_docscheck::{check_docs, doc_files, Binaries, Failure, Workspace};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn binaries() -> Binaries {
    let bins = Binaries::beside_current_exe();
    if let Err(e) = bins.verify() {
        panic!("the docs check needs the four binaries:\n{e}");
    }
    bins
}

fn list(failures: &[Failure]) -> String {
    failures
        .iter()
        .map(|f| format!("  {f}\n"))
        .collect::<String>()
}

#[test]
fn every_command_line_in_the_docs_parses_and_every_named_test_exists() {
    let ws = Workspace::load(&root()).unwrap();
    let bins = binaries();
    let docs = doc_files(&root());
    assert!(docs.len() > 10, "docs found: {docs:?}");
    let r = check_docs(&ws, &docs, &bins);
    eprintln!(
        "docs check: {} distinct command lines in {} files",
        r.commands,
        docs.len()
    );
    assert!(r.commands > 100, "only {} command lines found", r.commands);
    assert!(
        r.failures.is_empty(),
        "{} stale command lines or test paths in the docs (fix the doc, or mark a \
         deliberate exception with a `<!-- docscheck: skip -->` line before it):\n{}",
        r.failures.len(),
        list(&r.failures)
    );
}

#[test]
fn a_scratch_copy_with_stale_commands_fails() {
    let ws = Workspace::load(&root()).unwrap();
    let bins = binaries();
    let dir = std::env::temp_dir().join(format!("reef-docscheck-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let original = fs::read_to_string(root().join("README.md")).unwrap();
    let stale = "\n```sh\n\
$B/reef-bench disb A --no-such-flag\n\
$B/reef-bench disb A --policy reef,no-such-policy\n\
cargo test -p reefd --test no_such_test\n\
sudo target/release/reefd start --foreground --device sim:mi50 --sockets /tmp/x.sock &\n\
```\n\n\
Also `reefctl infer vgg --no-such-option 3`, `reef-check-idem` on\n\
`reef-bench nosuchcmd`, and reefd/tests/no_such_file.rs.\n";
    let before = dir.join("before.md");
    let after = dir.join("README.md");
    fs::write(&before, &original).unwrap();
    fs::write(&after, format!("{original}{stale}")).unwrap();
    let what = |p: &Path| -> BTreeSet<String> {
        check_docs(&ws, &[p.to_path_buf()], &bins)
            .failures
            .into_iter()
            .map(|f| f.what)
            .collect()
    };
    let (b, a) = (what(&before), what(&after));
    fs::remove_dir_all(&dir).unwrap();
    let expected = [
        "cargo test -p reefd --test no_such_test",
        "reef-bench disb A --no-such-flag",
        "reef-bench disb A --policy reef,no-such-policy",
        "reef-bench nosuchcmd",
        "reefctl infer vgg --no-such-option 3",
        "reefd start --foreground --device sim:mi50 --sockets /tmp/x.sock",
        "reefd/tests/no_such_file.rs",
    ];
    for e in expected {
        assert!(a.contains(e), "the check missed `{e}` in the scratch copy");
    }
    // Nothing else the addition brought is a failure: the inline
    // `reef-check-idem` alone is a name, not a command line.
    let new: Vec<&String> = a.difference(&b).collect();
    assert!(
        new.iter().all(|n| expected.contains(&n.as_str())),
        "unexpected failures in the scratch copy: {new:?}"
    );
}

#[test]
fn a_missing_binary_is_named_with_how_to_build_it() {
    let dir = std::env::temp_dir().join(format!("reef-docscheck-empty-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let e = Binaries { dir: dir.clone() }.verify().unwrap_err();
    fs::remove_dir_all(&dir).unwrap();
    for b in ["reefd", "reefctl", "reef-bench", "reef-check-idem"] {
        assert!(
            e.contains(&format!("{} is missing: build it", dir.join(b).display())),
            "{e}"
        );
    }
    assert!(e.contains("cargo build -p reefd --bins -p reef-bench -p reef-idem"));
}
