//! REEF §4.4, Fig. 9: four kernels K0-K3 over six one-byte locations A-F.
//! The figure itself is an image; this reconstructs it from the text: "K3
//! reads C, E and writes E"; (K2, K3) "still treats E as both input and
//! output"; for (K1, K2, K3) "its inputs (C, D) are distinct from its outputs
//! (E, F)"; and (K0, K1, K2, K3) is idempotent too.

use reef_idem::analysis::oracle_starts;
use reef_idem::{analyze, Op, OpKind, Range, Trace};

const A: u64 = 0;
const B: u64 = 1;
const C: u64 = 2;
const D: u64 = 3;
const E: u64 = 4;
const F: u64 = 5;

fn k(name: &str, reads: &[u64], writes: &[u64]) -> Op {
    let bytes = |v: &[u64]| v.iter().map(|&a| Range { addr: a, len: 1 }).collect();
    Op {
        kind: OpKind::Kernel,
        name: name.into(),
        reads: bytes(reads),
        writes: bytes(writes),
    }
}

fn fig9() -> Trace {
    Trace {
        model: "fig9".into(),
        ops: vec![
            k("K0", &[A, B], &[C]),
            k("K1", &[C, D], &[E]),
            k("K2", &[D, E], &[F]),
            k("K3", &[C, E], &[E]),
        ],
    }
}

#[test]
fn minimal_group_of_k3_is_k1_k2_k3() {
    let a = analyze(&fig9()).unwrap();
    let k3 = &a.kernels[3];
    assert!(!k3.idempotent, "K3 reads and writes E");
    assert_eq!(k3.start_kernel, 1, "the group starts at K1");
    assert_eq!(k3.size, 3, "(K1, K2, K3)");
    for k in &a.kernels[..3] {
        assert!(k.idempotent, "{} is idempotent alone", k.name);
    }
    assert_eq!(a.idempotent_count(), 3);
    assert_eq!(a.max_group(), 3);
}

#[test]
fn fig9_groups_agree_with_the_bytewise_definition() {
    use reef_idem::analysis::group_is_idempotent_bytewise as idem;
    let t = fig9();
    assert!(!idem(&t, 3, 3));
    assert!(!idem(&t, 2, 3), "(K2, K3) still reads E before writing it");
    assert!(idem(&t, 1, 3));
    assert!(idem(&t, 0, 3), "the whole model is an idempotent group too");
    assert_eq!(oracle_starts(&t), vec![Some(0), Some(1), Some(2), Some(1)]);
}
