//! Kernel identity, task keys and the profiles of FIKIT's measuring stage
//! (FIKIT, Wu et al., §3.2 "Identifying each kernel", Fig. 4; "Measuring the
//! execution and idle time of kernel", Fig. 6; the SK and SG statistics).
//!
//! A kernel ID is the kernel's function name with its grid and block
//! dimensions (Fig. 4). It ignores the arguments, so one ID can stand for
//! kernels of different durations (Fig. 5); the paper keeps the mean over
//! every occurrence of the ID in T runs (SK_j, and SG_j for the idle gap
//! after it). The profile here keeps those per-ID means and, beside them,
//! the same means per position in the task's launch order (the issue's
//! "per kernel ID and position"); [`Predict`] chooses which the scheduler
//! uses (the paper's per-ID means by default). A profile records the
//! fingerprint of the task's kernel-ID sequence, so a profile of a model
//! that changed since is detected as stale ([`Profile::predictions`]).

use std::collections::HashMap;

/// Function name, grid and block dimensions (FIKIT Fig. 4).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelId {
    pub name: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
}

impl KernelId {
    pub fn new(name: impl Into<String>, grid: [u32; 3], block: [u32; 3]) -> Self {
        Self {
            name: name.into(),
            grid,
            block,
        }
    }

    /// The ID of a kernel of a model schedule.
    pub fn of(k: &reef_model::Kernel) -> Self {
        Self::new(k.name.clone(), k.grid, k.block)
    }

    /// The IDs of a model's kernels in launch order.
    pub fn of_model(m: &reef_model::Model) -> Vec<Self> {
        m.kernels.iter().map(Self::of).collect()
    }

    /// A stand-in ID for position `i` of a model whose kernels are not
    /// known to the scheduler (only their number): unique per position.
    pub fn anonymous(i: u32) -> Self {
        Self::new(format!("#{i}"), [0; 3], [0; 3])
    }

    fn hash_into(&self, h: &mut u64) {
        fnv(h, self.name.as_bytes());
        fnv(h, &[0xff]);
        for d in self.grid.iter().chain(&self.block) {
            fnv(h, &d.to_le_bytes());
        }
    }
}

/// FNV-1a, 64 bit: a hash that is the same in every build, for a
/// fingerprint written to disk (std's hasher is not stable across builds).
fn fnv(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

/// Fingerprint of a kernel-ID sequence (stale-profile detection).
pub fn fingerprint(ids: &[KernelId]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325;
    fnv(&mut h, &(ids.len() as u64).to_le_bytes());
    for id in ids {
        id.hash_into(&mut h);
    }
    h
}

/// Which means the scheduler predicts a kernel's time and the gap after it
/// from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Predict {
    /// SK_j / SG_j of the kernel's ID over every occurrence (FIKIT §3.2).
    #[default]
    KernelId,
    /// The means at the kernel's position in the launch order.
    Position,
}

/// Means of one kernel ID or one position over the profiled runs, ns.
#[derive(Debug, Clone, PartialEq)]
pub struct Means {
    /// Mean kernel execution time (SK).
    pub sk_ns: f64,
    /// Mean idle time from the kernel's end to the next kernel's start (SG);
    /// 0 when the kernel was always last.
    pub sg_ns: f64,
    /// Occurrences measured.
    pub count: u64,
}

/// The profile of one task (FIKIT's `TaskKey = (SK, SG)`).
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub task_key: String,
    /// [`fingerprint`] of the kernel-ID sequence measured.
    pub fingerprint: u64,
    /// Runs measured (T).
    pub runs: u32,
    /// Per position in launch order.
    pub positions: Vec<Means>,
    /// Per kernel ID.
    pub by_id: Vec<(KernelId, Means)>,
}

/// Why a profile cannot serve a task: the task goes (back) to measuring.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Stale {
    #[error("profile of {task} was measured on another kernel sequence (the model changed)")]
    Fingerprint { task: String },
    #[error("profile of {task} has {have} positions, the model has {want} kernels")]
    Length {
        task: String,
        have: usize,
        want: usize,
    },
    #[error("profile of {task} has no means for kernel {id}")]
    MissingId { task: String, id: String },
}

/// Per-position predictions the scheduler uses, ns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Predictions {
    /// Predicted execution time of the kernel at each position (SK).
    pub sk: Vec<u64>,
    /// Predicted idle gap after the kernel at each position (SG).
    pub sg: Vec<u64>,
}

impl Profile {
    /// The predictions for a task whose kernels have `ids`, or why the
    /// profile does not fit it.
    pub fn predictions(&self, ids: &[KernelId], by: Predict) -> Result<Predictions, Stale> {
        if self.positions.len() != ids.len() {
            return Err(Stale::Length {
                task: self.task_key.clone(),
                have: self.positions.len(),
                want: ids.len(),
            });
        }
        if self.fingerprint != fingerprint(ids) {
            return Err(Stale::Fingerprint {
                task: self.task_key.clone(),
            });
        }
        let ns = |v: f64| v.max(0.0).round() as u64;
        match by {
            Predict::Position => Ok(Predictions {
                sk: self.positions.iter().map(|m| ns(m.sk_ns)).collect(),
                sg: self.positions.iter().map(|m| ns(m.sg_ns)).collect(),
            }),
            Predict::KernelId => {
                let map: HashMap<&KernelId, &Means> =
                    self.by_id.iter().map(|(k, m)| (k, m)).collect();
                let mut p = Predictions {
                    sk: Vec::with_capacity(ids.len()),
                    sg: Vec::with_capacity(ids.len()),
                };
                for id in ids {
                    let m = map.get(id).ok_or_else(|| Stale::MissingId {
                        task: self.task_key.clone(),
                        id: format!("{id:?}"),
                    })?;
                    p.sk.push(ns(m.sk_ns));
                    p.sg.push(ns(m.sg_ns));
                }
                Ok(p)
            }
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Sums {
    k: f64,
    nk: u64,
    g: f64,
    ng: u64,
}

impl Sums {
    fn add(&mut self, k: f64, g: Option<f64>) {
        self.k += k;
        self.nk += 1;
        if let Some(g) = g {
            self.g += g;
            self.ng += 1;
        }
    }
    fn means(&self) -> Means {
        Means {
            sk_ns: if self.nk > 0 {
                self.k / self.nk as f64
            } else {
                0.0
            },
            sg_ns: if self.ng > 0 {
                self.g / self.ng as f64
            } else {
                0.0
            },
            count: self.nk,
        }
    }
}

/// Accumulates the measured runs of one task (the statistical output of
/// the measuring stage, FIKIT §3.2: SK_j and SG_j as Kronecker-delta means
/// over every kernel of every run).
#[derive(Debug, Clone)]
pub struct ProfileBuilder {
    task_key: String,
    ids: Vec<KernelId>,
    positions: Vec<Sums>,
    by_id: HashMap<KernelId, Sums>,
    runs: u32,
}

impl ProfileBuilder {
    pub fn new(task_key: impl Into<String>, ids: Vec<KernelId>) -> Self {
        Self {
            task_key: task_key.into(),
            positions: vec![Sums::default(); ids.len()],
            ids,
            by_id: HashMap::new(),
            runs: 0,
        }
    }

    /// One measured run: for each kernel in launch order, its execution
    /// time and the idle time after it (`None` after the last kernel).
    /// A run of another length is refused (false).
    pub fn add_run(&mut self, kernels: &[(u64, Option<u64>)]) -> bool {
        if kernels.len() != self.ids.len() {
            return false;
        }
        for (i, &(k, g)) in kernels.iter().enumerate() {
            let (k, g) = (k as f64, g.map(|g| g as f64));
            self.positions[i].add(k, g);
            self.by_id.entry(self.ids[i].clone()).or_default().add(k, g);
        }
        self.runs += 1;
        true
    }

    pub fn runs(&self) -> u32 {
        self.runs
    }

    pub fn finish(&self) -> Profile {
        let mut by_id: Vec<(KernelId, Means)> = self
            .by_id
            .iter()
            .map(|(k, s)| (k.clone(), s.means()))
            .collect();
        by_id.sort_by(|a, b| a.0.cmp(&b.0));
        Profile {
            task_key: self.task_key.clone(),
            fingerprint: fingerprint(&self.ids),
            runs: self.runs,
            positions: self.positions.iter().map(Sums::means).collect(),
            by_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_ids_are_equal_exactly_when_name_grid_and_block_are() {
        let a = KernelId::new("conv", [4, 2, 1], [64, 1, 1]);
        assert_eq!(a, KernelId::new("conv", [4, 2, 1], [64, 1, 1]));
        assert_ne!(a, KernelId::new("conv2", [4, 2, 1], [64, 1, 1]));
        assert_ne!(a, KernelId::new("conv", [4, 2, 2], [64, 1, 1]));
        assert_ne!(a, KernelId::new("conv", [4, 2, 1], [64, 2, 1]));
        // Grid and block are not interchangeable.
        assert_ne!(
            KernelId::new("k", [1, 1, 1], [2, 1, 1]),
            KernelId::new("k", [2, 1, 1], [1, 1, 1])
        );
        let fp = |v: &[KernelId]| fingerprint(v);
        let one = vec![a.clone()];
        assert_eq!(fp(&one), fp(std::slice::from_ref(&a)));
        assert_ne!(
            fp(&one),
            fp(&[KernelId::new("conv", [4, 2, 1], [64, 1, 2])])
        );
        // The name/dimension boundary is part of the hash.
        assert_ne!(
            fp(&[KernelId::new("ab", [1; 3], [1; 3])]),
            fp(&[KernelId::new("a", [1; 3], [1; 3])])
        );
    }

    #[test]
    fn one_id_at_two_positions_is_averaged_as_the_paper_does() {
        // Fig. 5: K2 occurs twice with durations D1 = 10 and D2 = 30.
        let k1 = KernelId::new("k1", [1; 3], [1; 3]);
        let k2 = KernelId::new("k2", [1; 3], [1; 3]);
        let ids = vec![k2.clone(), k1.clone(), k2.clone()];
        let mut b = ProfileBuilder::new("svc", ids.clone());
        assert!(b.add_run(&[(10, Some(100)), (5, Some(7)), (30, None)]));
        assert!(b.add_run(&[(12, Some(110)), (5, Some(9)), (28, None)]));
        assert!(!b.add_run(&[(1, None)]));
        let p = b.finish();
        assert_eq!(p.runs, 2);
        let by_id = p.predictions(&ids, Predict::KernelId).unwrap();
        // SK(k2) = (10+30+12+28)/4 = 20; SG(k2) = (100+110)/2: the gap
        // after the last kernel does not exist (N_t - 1 gaps).
        assert_eq!(by_id.sk, vec![20, 5, 20]);
        assert_eq!(by_id.sg, vec![105, 8, 105]);
        let by_pos = p.predictions(&ids, Predict::Position).unwrap();
        assert_eq!(by_pos.sk, vec![11, 5, 29]);
        assert_eq!(by_pos.sg, vec![105, 8, 0]);
    }

    #[test]
    fn a_profile_of_another_kernel_sequence_is_stale() {
        let ids = vec![KernelId::new("a", [1; 3], [1; 3])];
        let mut b = ProfileBuilder::new("svc", ids.clone());
        b.add_run(&[(1, None)]);
        let p = b.finish();
        assert!(p.predictions(&ids, Predict::KernelId).is_ok());
        let changed = vec![KernelId::new("a", [2, 1, 1], [1; 3])];
        assert!(matches!(
            p.predictions(&changed, Predict::KernelId),
            Err(Stale::Fingerprint { .. })
        ));
        let longer = vec![ids[0].clone(), ids[0].clone()];
        assert!(matches!(
            p.predictions(&longer, Predict::Position),
            Err(Stale::Length { .. })
        ));
    }
}
