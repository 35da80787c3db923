//! `reef-max` (issue 28): one policy that uses the seed papers'
//! mechanisms together, each switchable so that its share can be measured.
//! The papers' policies (`reef`, `reef-dkp-mv`, `fikit`, `aker`) stay as
//! they are.
//!
//! Mechanisms, by the token that switches them:
//! - `preempt`: reset-based preemption for real-time arrivals (REEF §4,
//!   Figs. 7–8: host-queue reset, lazy eviction, CU kill); off: wait-based
//!   preemption with lazy eviction (REEF §6.4, Fig. 4b), the real-time
//!   task waiting for the running best-effort blocks.
//! - `pad`: dynamic kernel padding beside real-time kernels (REEF §5.1–5.2,
//!   Fig. 12).
//! - `mv`: multi-version kernel selection for the padded best-effort
//!   kernels (REEF §5.3); needs `pad`.
//! - `waves`: several best-effort blocks run one after the other in each
//!   slot a padded launch gives them, as long as their sum stays within the
//!   real-time kernel's time (REEF's implementation: `be_iters =
//!   rt_latency / be_latency_per_iter` best-effort blocks per slot in
//!   `dynamic_kernel_padding`, SJTU-IPADS/reef
//!   `src/reef/server/scheduler.cpp`; the paper's rule 1 is stated for one
//!   block, §5.2); needs `pad`. Executed as persistent slots (the dkp
//!   kernel's best-effort threads loop over their blocks).
//! - `tail`: FIKIT's filling after the high-priority task's last kernel
//!   (fikit.txt §3.2, Algorithm 1: the idle time after each
//!   high-priority kernel, SG(k), the last one's included): normal mode,
//!   in which every best-effort stream runs as on `streams` (REEF §3.1), resumes once the real-time
//!   request's last kernel has started rather than once it has completed,
//!   with reset-based preemption as the safety net for the next arrival.
//!   The last kernel is not padded, so no padded block of a task is in
//!   flight when its stream resumes.
//! - `share`: best-effort blocks also beside the real-time kernel's own
//!   blocks on its reserved CUs, where the padding table's co-residency
//!   curves predict its slowdown within half the target's 2 % (Aker §3,
//!   §4 and §8.3.1: co-run within the predicted QoS headroom; REEF §5.2
//!   reserves those CUs whole); needs `pad` ([`super::share`]).
//! - `chain`: a padded part that ends at its kernel's last block is
//!   followed in the same launch by the task's next kernels, behind a grid
//!   barrier, on its CUs and the ones the selection left over, within the
//!   real-time kernel's time (a persistent launch's grid synchronisation,
//!   CUDA C++ Programming Guide "Grid Synchronization"; REEF §5.2 pads a
//!   task's next kernel only); needs `pad` ([`super::chain`]).
//! - `most`: with `waves`, each padded part runs at the co-residency whose
//!   slots fit the most blocks within the real-time kernel's time rather
//!   than the highest one rule 1 admits (REEF §5.2's rule 1 over the
//!   block-time curves of Fig. 13, with the implementation's `be_iters`);
//!   needs `waves` ([`super::most`]).
//! - `spread`: after the greedy pass, a padded part that ends its kernel
//!   takes CUs no part was given, at the co-residency that ends it
//!   soonest, so that `chain`'s next kernels start sooner (REEF §5.2,
//!   Fig. 12: best-effort parts on the CUs the real-time kernel leaves);
//!   needs `pad` ([`super::spread`]).
//! - `rate`: with `mv`, among the versions the rules admit, the one
//!   whose slots complete the most of its kernel per CU within the
//!   real-time kernel's time rather than the shortest kernel alone (REEF
//!   §5.3's choice, over Fig. 13's block-time curves and the
//!   implementation's `be_iters`); needs `mv` ([`super::rate`]).
//! - `guard`: padding only as far as the real-time requests' measured mean
//!   latency stays within 1.02 of their latency alone: a controller that
//!   pads only the real-time kernels leaving enough CUs free, raising that
//!   share while the mean is above the target (REEF §6.5, Fig. 25: every
//!   padded block, the real-time kernel's own included, pays 0.8 %; §6.3:
//!   with several real-time clients a late request delays the ones queued
//!   behind it); needs `pad` ([`super::guard`]).
//!
//! Aker-style fusion (Aker §5) is not part of it (docs/results-max.md says
//! why).
//!
//! Names: `reef-max` (every mechanism); `reef-max:-pad-tail` (all but
//! those); `reef-max:+pad+mv` (reset-based preemption and only those):
//! see [`MaxConfig::parse`]. No commas, so that names go in the
//! comma-separated `--policy` lists of `reef-bench`.

use std::collections::HashMap;
use std::sync::Mutex;

/// The mechanisms, in the order names list them.
pub const MECHANISMS: &[&str] = &[
    "preempt", "pad", "mv", "waves", "tail", "share", "chain", "most", "spread", "rate", "guard",
];

/// Mechanisms that are a form of another (`most` of `waves`' slots,
/// `rate` of `mv`'s choice among versions, `guard` of how far `pad`
/// pads): off, and not named, where that one is off.
const FORM_OF: &[(&str, &str)] = &[("most", "waves"), ("rate", "mv"), ("guard", "pad")];

/// Which mechanisms a `reef-max` policy uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MaxConfig {
    pub preempt: bool,
    pub pad: bool,
    pub mv: bool,
    pub waves: bool,
    pub tail: bool,
    pub share: bool,
    pub chain: bool,
    pub most: bool,
    pub spread: bool,
    pub rate: bool,
    pub guard: bool,
}

impl Default for MaxConfig {
    fn default() -> Self {
        Self::all()
    }
}

impl MaxConfig {
    /// Every mechanism.
    pub fn all() -> Self {
        Self {
            preempt: true,
            pad: true,
            mv: true,
            waves: true,
            tail: true,
            share: true,
            chain: true,
            most: true,
            spread: true,
            rate: true,
            guard: true,
        }
    }

    /// Reset-based preemption only (what `reef-nodkp` does).
    pub fn base() -> Self {
        Self {
            preempt: true,
            pad: false,
            mv: false,
            waves: false,
            tail: false,
            share: false,
            chain: false,
            most: false,
            spread: false,
            rate: false,
            guard: false,
        }
    }

    fn flag(&mut self, m: &str) -> Option<&mut bool> {
        Some(match m {
            "preempt" => &mut self.preempt,
            "pad" => &mut self.pad,
            "mv" => &mut self.mv,
            "waves" => &mut self.waves,
            "tail" => &mut self.tail,
            "share" => &mut self.share,
            "chain" => &mut self.chain,
            "most" => &mut self.most,
            "spread" => &mut self.spread,
            "rate" => &mut self.rate,
            "guard" => &mut self.guard,
            _ => return None,
        })
    }

    /// Parses `reef-max` or `reef-max:TOKENS`, TOKENS a sequence of
    /// `-mechanism` (switch off, starting from all) or `+mechanism`
    /// (switch on, starting from [`Self::base`] when the first token is
    /// one), e.g. `reef-max:-waves-tail`, `reef-max:+pad+mv`. `mv` and `waves` shape padded launches: `-pad` switches them
    /// off too, and `+mv` or `+waves` without `pad` is an error. `None`:
    /// not a `reef-max` name, or a bad one.
    pub fn parse(name: &str) -> Option<Self> {
        let rest = name.strip_prefix("reef-max")?;
        if rest.is_empty() {
            return Some(Self::all());
        }
        let spec = rest.strip_prefix(':')?;
        // Split before every sign: "-a+b" -> ["-a", "+b"].
        let mut tokens: Vec<&str> = Vec::new();
        let mut start = 0;
        for (i, ch) in spec.char_indices().skip(1) {
            if ch == '+' || ch == '-' {
                tokens.push(&spec[start..i]);
                start = i;
            }
        }
        tokens.push(&spec[start..]);
        let mut c = if tokens.first()?.starts_with('+') {
            Self::base()
        } else {
            Self::all()
        };
        let mut asked_shape = false;
        let mut asked_form: Vec<&str> = Vec::new();
        for t in tokens {
            let (on, m) = match t.split_at_checked(1)? {
                ("+", m) => (true, m),
                ("-", m) => (false, m),
                _ => return None,
            };
            *c.flag(m)? = on;
            if on && FORM_OF.iter().any(|&(f, _)| f == m) {
                asked_form.push(m);
            }
            asked_shape |= on
                && matches!(
                    m,
                    "mv" | "waves" | "share" | "chain" | "most" | "spread" | "rate" | "guard"
                );
        }
        // A form of a mechanism that is off is off too; asking for it then
        // is an error.
        for &(form, of) in FORM_OF {
            if !*c.flag(of)? && *c.flag(form)? {
                if asked_form.contains(&form) {
                    return None;
                }
                *c.flag(form)? = false;
            }
        }
        if !c.pad {
            if asked_shape {
                return None;
            }
            c = c.without_padding();
        }
        Some(c)
    }

    /// The canonical name: `reef-max`, or `reef-max:` with the mechanisms
    /// switched off (`-x`) listed in [`MECHANISMS`] order; a form of a
    /// mechanism that is off (`FORM_OF`) is not listed.
    pub fn name(&self) -> String {
        let mut me = *self;
        let mut parent_off = |m: &str| {
            FORM_OF
                .iter()
                .any(|&(f, of)| f == m && !*me.flag(of).expect("known mechanism"))
        };
        let hidden: Vec<bool> = MECHANISMS.iter().map(|m| parent_off(m)).collect();
        let off: Vec<String> = MECHANISMS
            .iter()
            .zip(hidden)
            .filter(|&(_, h)| !h)
            .map(|(m, _)| m)
            .filter(|m| !*me.flag(m).expect("known mechanism"))
            .map(|m| format!("-{m}"))
            .collect();
        if off.is_empty() {
            "reef-max".into()
        } else {
            format!("reef-max:{}", off.concat())
        }
    }

    /// [`Self::name`] as a `&'static str` (policy names are static; the
    /// 2^10 configurations are interned once each).
    pub fn static_name(&self) -> &'static str {
        static NAMES: Mutex<Option<HashMap<MaxConfig, &'static str>>> = Mutex::new(None);
        let mut g = NAMES.lock().unwrap_or_else(|e| e.into_inner());
        g.get_or_insert_with(HashMap::new)
            .entry(*self)
            .or_insert_with(|| Box::leak(self.name().into_boxed_str()))
    }

    /// The configuration where a mechanism does not exist on the device
    /// (padding needs block placement, REEF §5.5: not on the CUDA or HIP
    /// launch paths here): `pad`, `mv`, `waves`, `share`, `chain`, `most`,
    /// `spread`, `rate` and `guard` off.
    pub fn without_padding(mut self) -> Self {
        self.pad = false;
        self.mv = false;
        self.waves = false;
        self.share = false;
        self.chain = false;
        self.most = false;
        self.spread = false;
        self.rate = false;
        self.guard = false;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_back() {
        assert_eq!(MaxConfig::parse("reef-max"), Some(MaxConfig::all()));
        let c = MaxConfig::parse("reef-max:-tail-waves").unwrap();
        assert!(!c.tail && !c.waves && c.pad && c.mv && c.preempt);
        assert_eq!(c.name(), "reef-max:-waves-tail");
        assert_eq!(MaxConfig::parse(&c.name()), Some(c));
        let c = MaxConfig::parse("reef-max:+pad").unwrap();
        assert_eq!(
            c,
            MaxConfig {
                pad: true,
                ..MaxConfig::base()
            }
        );
        assert_eq!(
            c.static_name(),
            "reef-max:-mv-waves-tail-share-chain-spread-guard"
        );
        assert_eq!(
            MaxConfig::base().name(),
            "reef-max:-pad-mv-waves-tail-share-chain-spread"
        );
        assert_eq!(
            MaxConfig::parse("reef-max:+pad+waves"),
            Some(MaxConfig {
                pad: true,
                waves: true,
                ..MaxConfig::base()
            })
        );
        for bad in [
            "reef-maxi",
            "reef-max:",
            "reef-max:pad",
            "reef-max:-fuse",
            "reef-max:+waves",
            "reef-max:+share",
            "reef-max:+chain",
            "reef-max:+spread",
            "reef-max:-pad+chain",
            "reef-max:-pad+mv",
            "reef-max:-pad,-tail",
            "reef-max:--pad",
            "reef",
        ] {
            assert_eq!(MaxConfig::parse(bad), None, "{bad}");
        }
        assert_eq!(
            MaxConfig::all().without_padding().name(),
            "reef-max:-pad-mv-waves-share-chain-spread"
        );
        let c = MaxConfig::parse("reef-max:-chain").unwrap();
        assert!(!c.chain && c.pad && c.mv && c.waves && c.tail && c.share);
        assert_eq!(c.name(), "reef-max:-chain");
        let c = MaxConfig::parse("reef-max:-share").unwrap();
        assert!(!c.share && c.pad && c.mv && c.waves && c.tail);
        let c = MaxConfig::parse("reef-max:-spread").unwrap();
        assert!(!c.spread && c.chain && c.most && c.pad);
        assert_eq!(c.name(), "reef-max:-spread");
        let c = MaxConfig::parse("reef-max:-most").unwrap();
        assert!(!c.most && c.waves && c.share);
        assert_eq!(c.name(), "reef-max:-most");
        let c = MaxConfig::parse("reef-max:-waves").unwrap();
        assert!(!c.most && !c.waves);
        assert_eq!(c.name(), "reef-max:-waves");
        assert_eq!(
            MaxConfig::parse("reef-max:+pad+waves+most").map(|c| c.name()),
            Some("reef-max:-mv-tail-share-chain-spread-guard".into())
        );
        let c = MaxConfig::parse("reef-max:-rate").unwrap();
        assert!(!c.rate && c.mv && c.most && c.spread);
        assert_eq!(c.name(), "reef-max:-rate");
        let c = MaxConfig::parse("reef-max:-mv").unwrap();
        assert!(!c.rate && !c.mv && c.waves);
        assert_eq!(c.name(), "reef-max:-mv");
        assert_eq!(
            MaxConfig::parse("reef-max:+pad+mv").map(|c| c.name()),
            Some("reef-max:-waves-tail-share-chain-spread-rate-guard".into())
        );
        let c = MaxConfig::parse("reef-max:-guard").unwrap();
        assert!(!c.guard && c.pad && c.rate && c.share);
        assert_eq!(c.name(), "reef-max:-guard");
        assert!(MaxConfig::parse("reef-max:+pad+guard").is_some_and(|c| c.guard && !c.mv));
        assert!(MaxConfig::parse("reef-max:+pad+mv+rate").is_some_and(|c| c.rate));
        for bad in [
            "reef-max:+pad+most",
            "reef-max:-waves+most",
            "reef-max:+pad+rate",
            "reef-max:-mv+rate",
            "reef-max:+guard",
            "reef-max:-pad+guard",
        ] {
            assert_eq!(MaxConfig::parse(bad), None, "{bad}");
        }
        assert_eq!(
            MaxConfig::parse("reef-max:+pad+share"),
            Some(MaxConfig {
                pad: true,
                share: true,
                ..MaxConfig::base()
            })
        );
        // A form of pad: not named where pad is off.
        assert_eq!(
            MaxConfig::parse("reef-max:-pad-guard").map(|c| c.name()),
            Some("reef-max:-pad-mv-waves-share-chain-spread".into())
        );
        assert_eq!(
            MaxConfig::parse("reef-max:-pad"),
            Some(MaxConfig::all().without_padding())
        );
    }
}
