//! Per-kernel resource table for models without work data (the MI50 REEF
//! models): the kernel's class and pipe demand from the operator in its
//! name (Aker §3.1 Fig. 3 for the class prototypes, §5.1 for the classes;
//! docs/aker.md "The MI50 resource table").
//!
//! Why a table and not a measurement: the MI50 profiles record neither
//! operations nor memory traffic, and buffer sizes are no substitute (bytes
//! over stand-alone time exceed the MI50's peak bandwidth up to 10x for
//! bert, because storage is reused; issue 19). So each kernel is assigned a
//! class from the TVM operator names in its kernel name, and the class's
//! demand is the mean utilisation Aker §3.1 measured for that class:
//!
//! | class          | operators in the name                         | vector | memory |
//! |----------------|-----------------------------------------------|--------|--------|
//! | compute-prefer | conv2d, dense, matmul, batch_matmul, winograd | 80.5 % | 3.15 % |
//! | memory-prefer  | elementwise, reductions, layout (see [`MEMORY_OPS`]) | 26.1 % | 85.6 % |
//! | unknown        | anything else                                 | (legacy) |      |
//!
//! Assumptions (stated, not measured): (1) a GEMM-like kernel's epilogue
//! (add, relu fused behind a conv) does not change its class; (2) TVM's
//! conv/dense schedules stage tiles in LDS so that their DRAM traffic per
//! operation is that of Parboil's compute-prefer kernels (sgemm, cutcp) in
//! Aker Fig. 3; (3) elementwise, reduction and layout kernels do a few
//! operations per element moved, like Parboil's memory-prefer kernels
//! (stencil, lbm). Neither utilisation has been measured on an MI50.

use crate::mix::Demand;

/// Aker §5.1 kernel classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// Uses the matrix (tensor-core) pipe: a TC kernel.
    Tensor,
    /// CUDA-core, compute utilisation > 50 % and memory < 50 %.
    ComputePrefer,
    /// CUDA-core, memory bandwidth utilisation > 50 %.
    MemoryPrefer,
    /// CUDA-core, both below 50 %.
    Neutral,
    /// Not declared (resource mix: [`Demand::UNKNOWN`]).
    Unknown,
}

/// Operators that make a kernel GEMM-like (compute-prefer).
pub const COMPUTE_OPS: &[&str] = &["conv2d", "dense", "matmul", "winograd"];

/// Operators of elementwise, reduction and layout kernels (memory-prefer).
pub const MEMORY_OPS: &[&str] = &[
    "add",
    "relu",
    "reshape",
    "transpose",
    "copy",
    "concatenate",
    "pool",
    "mean",
    "variance",
    "softmax",
    "subtract",
    "sqrt",
    "divide",
    "multiply",
    "erf",
    "cast",
    "flatten",
    "where",
    "tanh",
    "take",
    "slice",
    "split",
    "pad",
    "sum",
    "max",
    "exp",
    "power",
    "broadcast",
    "squeeze",
    "expand_dims",
    "clip",
    "sigmoid",
    "layout_transform",
    "one_hot",
    "less",
];

/// Aker §3.1: compute-prefer kernels average 80.5 % compute and 3.15 %
/// memory bandwidth utilisation.
pub const COMPUTE_PREFER_UTIL: [f64; 3] = [0.0, 0.805, 0.0315];
/// Aker §3.1: memory-prefer kernels average 85.6 % memory bandwidth and
/// 26.1 % compute utilisation.
pub const MEMORY_PREFER_UTIL: [f64; 3] = [0.0, 0.261, 0.856];

/// Aker §5.1: the class of a kernel from its utilisation of each pipe at
/// full occupancy (`[matrix, vector, memory]`, fractions of peak): a kernel
/// that uses the matrix pipe is a TC kernel; a CUDA-core kernel above 50 %
/// memory bandwidth is memory-prefer, above 50 % compute (and below 50 %
/// memory) compute-prefer, else neutral.
pub fn classify(util: [f64; 3]) -> Class {
    let [matrix, vector, memory] = util;
    if matrix > 0.0 {
        Class::Tensor
    } else if memory > 0.5 {
        Class::MemoryPrefer
    } else if vector > 0.5 {
        Class::ComputePrefer
    } else {
        Class::Neutral
    }
}

/// The class of a kernel from the operators in its (TVM) name.
///
/// TVM names a fused kernel by its operators joined with `_`
/// (`fused_nn_conv2d_add_nn_relu_3_kernel0`), so an operator matches
/// whole `_`-separated words, a multi-word operator (`layout_transform`)
/// consecutive words, and a word may carry a dimension suffix (`pool`
/// matches `pool2d`, `conv2d` matches `conv2d`). A substring match made
/// non-TVM names classify by accident: Parboil lbm's
/// `performStreamCollide` contains `erf` (docs/results-aker.md).
pub fn class_of_name(name: &str) -> Class {
    let n = name.to_ascii_lowercase();
    let words: Vec<&str> = n.split('_').collect();
    let has = |op: &str| {
        let parts: Vec<&str> = op.split('_').collect();
        let k = parts.len();
        words.windows(k).any(|w| {
            w.iter().zip(&parts).enumerate().all(|(i, (word, part))| {
                // Only the operator's last word may carry a suffix.
                *word == *part
                    || (i == k - 1
                        && word
                            .strip_prefix(part)
                            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit())))
            })
        })
    };
    if COMPUTE_OPS.iter().any(|op| has(op)) {
        Class::ComputePrefer
    } else if MEMORY_OPS.iter().any(|op| has(op)) {
        Class::MemoryPrefer
    } else {
        Class::Unknown
    }
}

/// A class's mean DRAM bandwidth utilisation at full occupancy, a
/// fraction of the device's peak (Aker §3.1: compute-prefer 3.15 %,
/// memory-prefer 85.6 %); `None` for classes the paper gives no figure
/// for here (unknown, neutral, tensor).
pub fn memory_utilisation(c: Class) -> Option<f64> {
    match c {
        Class::ComputePrefer => Some(COMPUTE_PREFER_UTIL[2]),
        Class::MemoryPrefer => Some(MEMORY_PREFER_UTIL[2]),
        _ => None,
    }
}

/// The class of a declared demand by Aker §5.1's rule, reading each pipe's
/// share of the busiest (`u / 1024`) as its utilisation at full occupancy:
/// any matrix-pipe work makes a TC kernel; else memory above 50 % is
/// memory-prefer, compute above 50 % (memory not) compute-prefer, both
/// below neutral. [`Demand::UNKNOWN`] is [`Class::Unknown`]. The table's
/// prototypes keep their classes (compute-prefer: vector 1024, memory 40;
/// memory-prefer: memory 1024).
pub fn class_of_demand(d: &Demand) -> Class {
    use crate::mix::{MATRIX, MEMORY, ONE, VECTOR};
    if *d == Demand::UNKNOWN {
        Class::Unknown
    } else if d.u[MATRIX] > 0 {
        Class::Tensor
    } else if d.u[MEMORY] > ONE / 2 {
        Class::MemoryPrefer
    } else if d.u[VECTOR] > ONE / 2 {
        Class::ComputePrefer
    } else {
        Class::Neutral
    }
}

/// The demand table entry for a kernel name: the class prototype's demand
/// (see the module doc), [`Demand::UNKNOWN`] for an unknown class.
pub fn demand_of_name(name: &str) -> (Class, Demand) {
    let c = class_of_name(name);
    let d = match c {
        Class::ComputePrefer => Demand::from_times(COMPUTE_PREFER_UTIL),
        Class::MemoryPrefer => Demand::from_times(MEMORY_PREFER_UTIL),
        _ => None,
    };
    (c, d.unwrap_or(Demand::UNKNOWN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demands_classify_by_the_fifty_percent_rule() {
        for name in ["fused_conv2d_add_relu", "fused_add_relu", "zzz"] {
            let (c, d) = demand_of_name(name);
            assert_eq!(class_of_demand(&d), c, "{name}");
        }
        let d = |u| Demand { u };
        assert_eq!(class_of_demand(&d([1024, 0, 300])), Class::Tensor);
        assert_eq!(class_of_demand(&d([0, 1024, 745])), Class::MemoryPrefer);
        assert_eq!(class_of_demand(&d([0, 1024, 512])), Class::ComputePrefer);
        assert_eq!(class_of_demand(&d([0, 14, 1024])), Class::MemoryPrefer);
    }

    #[test]
    fn names_classify_by_operator() {
        for (n, c) in [
            (
                "fused_nn_conv2d_add_nn_relu_3_kernel0",
                Class::ComputePrefer,
            ),
            ("fused_nn_batch_matmul_3_kernel0", Class::ComputePrefer),
            (
                "fused_nn_contrib_conv2d_winograd_without_weight_transform_kernel0",
                Class::ComputePrefer,
            ),
            ("fused_nn_dense_add_kernel0", Class::ComputePrefer),
            ("fused_add_nn_relu_1_kernel0", Class::MemoryPrefer),
            ("fused_nn_softmax_1_kernel0", Class::MemoryPrefer),
            ("fused_mean_1_kernel0", Class::MemoryPrefer),
            (
                "fused_nn_max_pool2d_add_nn_relu_kernel0",
                Class::MemoryPrefer,
            ),
            ("mystery_kernel", Class::Unknown),
            ("fused_nn_global_avg_pool2d_kernel0", Class::MemoryPrefer),
            (
                "tvmgen_default_fused_layout_transform_kernel0",
                Class::MemoryPrefer,
            ),
            // Not TVM names: operators inside other words do not count.
            ("_Z27performStreamCollide_kernelPfS_", Class::Unknown),
            ("_Z9mysgemmNTPKfiS0_iPfiiff", Class::Unknown),
            ("fused_addmm_kernel0", Class::Unknown),
        ] {
            assert_eq!(class_of_name(n), c, "{n}");
        }
    }

    #[test]
    fn classes_by_the_paper_criteria() {
        // Hand-built kernels: utilisations at full occupancy.
        assert_eq!(classify([0.7, 0.2, 0.1]), Class::Tensor);
        assert_eq!(classify([0.0, 0.805, 0.0315]), Class::ComputePrefer);
        assert_eq!(classify([0.0, 0.261, 0.856]), Class::MemoryPrefer);
        // Memory above 50 % wins even with high compute (§5.1).
        assert_eq!(classify([0.0, 0.9, 0.6]), Class::MemoryPrefer);
        assert_eq!(classify([0.0, 0.4, 0.3]), Class::Neutral);
        // Boundaries: "exceeding 50 %" is strict.
        assert_eq!(classify([0.0, 0.5, 0.5]), Class::Neutral);
        assert_eq!(classify([0.0, 0.51, 0.5]), Class::ComputePrefer);
        // The table's prototypes classify as their classes.
        assert_eq!(classify(COMPUTE_PREFER_UTIL), Class::ComputePrefer);
        assert_eq!(classify(MEMORY_PREFER_UTIL), Class::MemoryPrefer);
    }

    #[test]
    fn prototypes_follow_the_paper() {
        let (_, c) = demand_of_name("conv2d");
        let (_, m) = demand_of_name("relu");
        // 3.15 / 80.5 = 0.039 -> 40/1024; 26.1 / 85.6 = 0.305 -> 312/1024.
        assert_eq!(c.u, [0, 1024, 40]);
        assert_eq!(m.u, [0, 312, 1024]);
        assert_eq!(demand_of_name("zzz").1, Demand::UNKNOWN);
    }
}
