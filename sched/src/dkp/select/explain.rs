//! Why a best-effort kernel cannot pad a real-time kernel
//! (`reef-bench dkp --explain`): the checks of [`Selector::select`]
//! (REEF §5.2 rules 1 and 2, §5.1 proxy kernels) taken one at a time.

use super::{Candidate, Padding, Selector};
use crate::dkp::profile::KernelChar;

/// Why a best-effort kernel cannot pad a real-time kernel (the first check
/// that fails, in the order the selection applies them). Diagnostics only
/// (`reef-bench dkp --explain`): it allocates, unlike [`Selector::select`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// Some version can pad it.
    Padded,
    /// The real-time kernel needs every CU to run as fast as alone (its
    /// blocks fill all CUs equally): no CU is left over (Fig. 12 lines
    /// 1–3), nothing is padded to it.
    RtWholeGpu,
    /// No proxy kernel can host the real-time blocks on their CUs as fast
    /// as alone (§5.1).
    RtProxy,
    /// Rule 2: under the proxy allocation every version needs, the
    /// real-time kernel would lose the co-residency it runs at alone.
    Rule2,
    /// Rule 1: every version passing rule 2 has blocks at least as long as
    /// the real-time kernel, even one per CU.
    Rule1,
    /// Both rules hold for a version, but the proxy kernel it needs (more
    /// registers or shared memory) would not fit the real-time block.
    Resources,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Padded => "padded",
            Verdict::RtWholeGpu => "rt-whole-gpu",
            Verdict::RtProxy => "rt-proxy",
            Verdict::Rule2 => "rule2",
            Verdict::Rule1 => "rule1",
            Verdict::Resources => "resources",
        }
    }
}

impl Selector {
    /// Whether the first blocks of a best-effort kernel (all `versions`,
    /// none started) can pad real-time kernel `rt` on an otherwise idle
    /// GPU, and if not, which check stops it.
    pub fn explain(&self, rt: &KernelChar, versions: &[KernelChar]) -> Verdict {
        let c = [Candidate {
            versions,
            locked: None,
            next_block: 0,
            following: &[],
            rule1_floor: 0,
        }];
        let mut out = Padding::default();
        if self.select(rt, &c, 0, &mut out) {
            return Verdict::Padded;
        }
        let cus = rt.rt_cus.min(self.limits.compute_units);
        if cus >= self.limits.compute_units {
            return Verdict::RtWholeGpu;
        }
        let fits = self
            .proxies
            .pick(rt.regs_per_thread)
            .is_some_and(|l| self.rt_keeps_its_time(rt, cus, rt.lds, self.proxies.alloc(l)));
        if !fits {
            return Verdict::RtProxy;
        }
        let rule2: Vec<&KernelChar> = versions
            .iter()
            .filter(|k| {
                self.proxies
                    .pick(rt.regs_per_thread.max(k.regs_per_thread))
                    .is_some_and(|l| {
                        self.rt_keeps_its_time(rt, cus, rt.lds.max(k.lds), self.proxies.alloc(l))
                    })
            })
            .collect();
        if rule2.is_empty() {
            return Verdict::Rule2;
        }
        if rule2.iter().all(|k| k.block_ns(1) >= rt.kernel_ns) {
            return Verdict::Rule1;
        }
        Verdict::Resources
    }
}
