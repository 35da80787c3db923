//! Property test: the interval algorithm (REEF §4.4 minimal idempotent
//! groups, computed over ranges) agrees with the paper's definition applied
//! byte by byte with the paper's backward search, on random traces.

use proptest::prelude::*;
use reef_idem::analysis::oracle_starts;
use reef_idem::{analyze, Op, OpKind, Range, Trace};

/// Arbitrary ranges, and whole "buffers" from a small pool (accessed again
/// exactly, as real traces do, which takes the analysis' fast path).
fn range() -> impl Strategy<Value = Range> {
    prop_oneof![
        (0u64..40, 0u64..10).prop_map(|(addr, len)| Range { addr, len }),
        prop::sample::select(vec![(0u64, 8u64), (8, 8), (16, 8), (4, 8), (24, 16)])
            .prop_map(|(addr, len)| Range { addr, len }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    (
        prop_oneof![
            6 => Just(OpKind::Kernel),
            1 => Just(OpKind::Memcpy),
            1 => Just(OpKind::Memset),
        ],
        prop::collection::vec(range(), 0..4),
        prop::collection::vec(range(), 0..3),
    )
        .prop_map(|(kind, reads, writes)| Op {
            kind,
            name: String::new(),
            reads: if kind == OpKind::Memset {
                vec![]
            } else {
                reads
            },
            writes,
        })
}

fn trace() -> impl Strategy<Value = Trace> {
    prop::collection::vec(op(), 1..16).prop_map(|ops| Trace {
        model: "random".into(),
        ops,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn interval_algorithm_matches_bytewise_oracle(t in trace()) {
        let a = analyze(&t).unwrap();
        let oracle = oracle_starts(&t);
        prop_assert_eq!(a.kernels.len(), oracle.len());
        for (k, want) in a.kernels.iter().zip(oracle) {
            prop_assert_eq!(k.start_op, want, "kernel {} (op {})", k.index, k.op);
            prop_assert_eq!(k.idempotent, want == Some(k.op));
            let kernels_from = |s: usize| {
                t.ops[s..=k.op].iter().filter(|o| o.kind == OpKind::Kernel).count()
            };
            prop_assert_eq!(k.size, want.map(kernels_from).unwrap_or(k.index + 1));
        }
    }
}
