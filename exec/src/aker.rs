//! Aker's fused kernels on the simulated device (Aker §5.3 PTB versions,
//! §5.4 flexible-ratio fusion, Fig. 7; §8.2 kernel split, Fig. 12).
//!
//! A fused kernel of two components at ratio `a:b` is one launch whose
//! blocks each hold `a` persistent blocks of component 1 and `b` of
//! component 2, one fused block per CU. On reef-sim it is executed like a
//! padded launch ([`Sim::launch_padded`]: one queue slot, one fetch, one
//! dispatch, parts started together) but both parts run on the same CUs,
//! each capped at its persistent blocks per CU
//! ([`KernelLaunch::with_persistent`]): a freed persistent slot takes the
//! component's next block, as the PTB loop of Fig. 12 does. It is queued
//! with [`Sim::launch_fused`], not as a padded launch: a fused kernel calls
//! its components' code directly, so it pays none of REEF's dkp-kernel cost
//! (REEF §6.5 Fig. 25, function pointers). Each part keeps
//! its kernel's shape (identity, buffers, tags, block range), so value
//! tracking sees each component's computation intact, and the resource mix
//! (reef-sim `mix.rs`) decides how much the two slow each other.
//!
//! Kernel split (§8.2): a component's block range is any sub-range of its
//! grid (`start_block_id..=end_block_id` of Fig. 12); the rest runs later
//! as an ordinary launch with the complementary range.
//!
//! Not modelled: the PTB loop's own overhead (recomputing the block id per
//! iteration) and the fused block's single register/LDS allocation (each
//! part is placed with its own shape's per-block resources).

use crate::parts::PartGroup;
use reef_sched::aker::{
    split_blocks, FusedLaunch, Fusion, KClass, KernelModel, KernelPred, Predictor, TwoStage,
    TRAINING_RATIOS,
};
use reef_sched::ModelId;
use reef_sim::resources::{class_of_demand, class_of_name, Class};
use reef_sim::{
    DeviceEvent, DeviceSpec, EventKind, KernelLaunch, KernelShape, LaunchId, Sim, SimError,
    StreamId, Tags,
};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// One component of a fused launch.
#[derive(Debug, Clone)]
pub struct Component {
    pub launch: KernelLaunch,
    /// Persistent blocks per CU (the fusion ratio's share).
    pub per_cu: u32,
}

/// Persistent blocks of `shape` that fit on an empty CU of `spec` (its
/// PTB version's largest useful ratio share).
pub fn max_per_cu(spec: &DeviceSpec, s: &KernelShape) -> u32 {
    let mut cap = spec.max_threads_per_cu / s.threads_per_block.max(1);
    cap = cap.min(spec.max_waves_per_cu / s.waves_per_block.max(1));
    cap = cap.min(spec.max_blocks_per_cu);
    if let Some(c) = spec.lds_bytes_per_cu.checked_div(s.lds_per_block) {
        cap = cap.min(c);
    }
    if let Some(c) = spec.registers_per_cu.checked_div(s.regs_per_block) {
        cap = cap.min(c);
    }
    cap
}

/// The fusion ratios `a:b` (a, b ≥ 1) whose fused block fits on one CU of
/// `spec` (§5.4: "the SM could support the possible 4:2, 3:3, 2:4 fusion
/// ratios, but not 4:4"), each side at most what its kernel can use alone.
pub fn ratios(spec: &DeviceSpec, k1: &KernelShape, k2: &KernelShape) -> Vec<(u32, u32)> {
    let (m1, m2) = (max_per_cu(spec, k1), max_per_cu(spec, k2));
    let fits = |a: u32, b: u32| {
        let t = a as u64 * k1.threads_per_block as u64 + b as u64 * k2.threads_per_block as u64;
        let w = a as u64 * k1.waves_per_block as u64 + b as u64 * k2.waves_per_block as u64;
        let l = a as u64 * k1.lds_per_block as u64 + b as u64 * k2.lds_per_block as u64;
        let r = a as u64 * k1.regs_per_block as u64 + b as u64 * k2.regs_per_block as u64;
        t <= spec.max_threads_per_cu as u64
            && w <= spec.max_waves_per_cu as u64
            && l <= spec.lds_bytes_per_cu as u64
            && r <= spec.registers_per_cu as u64
            && a + b <= spec.max_blocks_per_cu
    };
    let mut v = Vec::new();
    for a in 1..=m1 {
        for b in 1..=m2 {
            if fits(a, b) {
                v.push((a, b));
            }
        }
    }
    v
}

/// Enqueues a fused launch of two components on stream `s` (see the module
/// doc). Returns the two parts' launch ids, component 1 first.
pub fn launch_fused(
    sim: &mut Sim,
    s: StreamId,
    c1: Component,
    c2: Component,
) -> Result<[LaunchId; 2], SimError> {
    let ids = sim.launch_fused(s, fused_parts(c1, c2))?;
    Ok([ids[0], ids[1]])
}

/// The two parts of a fused launch of `c1` and `c2`: each component's
/// blocks persistent on every compute unit, `per_cu` at a time.
fn fused_parts(c1: Component, c2: Component) -> Vec<KernelLaunch> {
    vec![
        c1.launch.with_persistent(c1.per_cu),
        c2.launch.with_persistent(c2.per_cu),
    ]
}

/// Device time of one launch run alone on an idle device, from dispatch
/// (the launch path excluded) to the last block's completion.
pub fn time_alone(
    spec: &DeviceSpec,
    shape: &Arc<KernelShape>,
    blocks: Range<u32>,
) -> Result<u64, SimError> {
    let mut sim = Sim::new(spec.clone(), Default::default());
    let s = sim.create_stream(0, 4)?;
    sim.launch(
        s,
        KernelLaunch::new(shape.clone(), Default::default()).with_blocks(blocks),
    )?;
    Ok(run_out(&mut sim) - spec.launch_path_ns())
}

/// Device time of a fused launch run alone on an idle device, and the
/// time each component finished (both from dispatch).
pub fn time_fused(
    spec: &DeviceSpec,
    c1: (&Arc<KernelShape>, Range<u32>, u32),
    c2: (&Arc<KernelShape>, Range<u32>, u32),
) -> Result<(u64, [u64; 2]), SimError> {
    let mut sim = Sim::new(spec.clone(), Default::default());
    let s = sim.create_stream(0, 4)?;
    let ids = launch_fused(
        &mut sim,
        s,
        Component {
            launch: KernelLaunch::new(c1.0.clone(), Default::default()).with_blocks(c1.1),
            per_cu: c1.2,
        },
        Component {
            launch: KernelLaunch::new(c2.0.clone(), Default::default()).with_blocks(c2.1),
            per_cu: c2.2,
        },
    )?;
    let lp = spec.launch_path_ns();
    let mut ends = [0u64; 2];
    while let Some((t, evs)) = sim.step() {
        for e in evs {
            if e.kind == EventKind::Completed {
                for (i, id) in ids.iter().enumerate() {
                    if e.launch == *id {
                        ends[i] = t - lp;
                    }
                }
            }
        }
    }
    Ok((ends[0].max(ends[1]), ends))
}

/// The kernel class the manager sees (Aker §5.1): from the shape's declared
/// demand (a compiled kernel's work, `reef_sim::costmodel`: matrix-pipe
/// work makes a TC kernel, else the 50 % rule of
/// `reef_sim::resources::class_of_demand`); for a kernel without one the
/// MI50 resource table's class from the operator in its name.
pub fn kclass(name: &str, shape: &KernelShape) -> KClass {
    let c = match class_of_demand(&shape.demand) {
        Class::Unknown => class_of_name(name),
        c => c,
    };
    match c {
        Class::Tensor => KClass::Tensor,
        Class::ComputePrefer => KClass::ComputePrefer,
        Class::MemoryPrefer => KClass::MemoryPrefer,
        Class::Neutral => KClass::Neutral,
        Class::Unknown => KClass::Unknown,
    }
}

/// The best fused version of `k1` (LC, predicted `x1` ns) with `k2` (BE,
/// block model `be`) on `spec` (Aker §6.3, §7): every ratio `a:b` that fits
/// one CU with `a` at least half of `k1`'s own occupancy (the LC kernel
/// keeps most of its slots), each profiled at the four training load
/// ratios on a scratch device, the version with the largest predicted
/// makespan reduction at its opportune ratio. Returns it with the number
/// of profiled runs.
pub fn train_fusion(
    spec: &DeviceSpec,
    k1: &Arc<KernelShape>,
    x1: f64,
    k2: &Arc<KernelShape>,
    be: &KernelModel,
) -> Result<(Option<Fusion>, u64), SimError> {
    let half = max_per_cu(spec, k1).div_ceil(2);
    let mut best: Option<Fusion> = None;
    let mut runs = 0;
    for (a, b) in ratios(spec, k1, k2) {
        if a < half {
            continue;
        }
        let mut s = Vec::new();
        for r in TRAINING_RATIOS {
            let n = split_blocks(be, k2.blocks, x1, r);
            let (f, _) = time_fused(spec, (k1, 0..k1.blocks, a), (k2, 0..n, b))?;
            runs += 1;
            s.push((be.predict(n) / x1, f as f64 / x1));
        }
        if let Some(m) = TwoStage::fit(&s) {
            if m.reduction() > 0.0
                && best
                    .as_ref()
                    .is_none_or(|f| m.reduction() > f.model.reduction())
            {
                best = Some(Fusion {
                    ratio: (a, b),
                    model: m,
                });
            }
        }
    }
    Ok((best, runs))
}

type ShapeKey = (String, u32, u32);
/// Fusion profiles by (LC shape, BE shape).
type FusionCache = Arc<Mutex<HashMap<(ShapeKey, ShapeKey), Option<Fusion>>>>;

fn key(s: &KernelShape) -> ShapeKey {
    (s.name.clone(), s.blocks, s.threads_per_block)
}

/// Figures of a [`SimPredictor`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PredictorStats {
    /// Kernels profiled alone (§6.3 step 1).
    pub kernels: u64,
    /// Kernel pairs whose fused versions were profiled (§6.3, §7).
    pub pairs: u64,
    /// Fused runs profiled.
    pub fused_runs: u64,
}

/// Aker's offline profiles on the simulated device (§6.3): each kernel run
/// alone once on a scratch device (its time plus the dispatch, since the
/// manager issues ahead and the host path overlaps the previous kernel;
/// the block count is fixed by the model's input, so §6.3's block-count
/// line goes through that point and the origin), and each (LC kernel, BE
/// kernel) pair the manager asks about trained on first use
/// ([`train_fusion`]) and remembered by the two kernels' shapes (name,
/// grid, block), so repeated layers share one profile. Never the
/// simulator's formula: every figure is a profiled run.
pub struct SimPredictor {
    spec: DeviceSpec,
    shapes: Vec<Vec<Arc<KernelShape>>>,
    kernels: Vec<Vec<KernelPred>>,
    cache: FusionCache,
    stats: Arc<Mutex<PredictorStats>>,
}

impl std::fmt::Debug for SimPredictor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimPredictor")
            .field("device", &self.spec.name)
            .field("stats", &self.stats())
            .finish()
    }
}

impl SimPredictor {
    /// Profiles every kernel of `models` alone on `spec`.
    pub fn new<M: crate::ModelShapes>(spec: &DeviceSpec, models: &[M]) -> anyhow::Result<Self> {
        let times = models
            .iter()
            .map(|m| Self::solo_times(spec, m.shapes()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Self::with_times(spec, models, &times)
    }

    /// The stand-alone time (ns) of each of a model's kernels on `spec`:
    /// the profile [`SimPredictor::new`] takes, one scratch simulation per
    /// kernel. A caller that builds predictors again for the same models
    /// (the daemon, at each scheduler rebuild) keeps these and passes them
    /// to [`SimPredictor::with_times`].
    pub fn solo_times(spec: &DeviceSpec, shapes: &[Arc<KernelShape>]) -> anyhow::Result<Vec<f64>> {
        shapes
            .iter()
            .map(|sh| Ok((time_alone(spec, sh, 0..sh.blocks)? + spec.cp_dispatch_ns) as f64))
            .collect()
    }

    /// A predictor whose kernels' stand-alone times are `times[m][k]` (ns,
    /// [`SimPredictor::solo_times`] or measured), without profiling.
    pub fn with_times<M: crate::ModelShapes>(
        spec: &DeviceSpec,
        models: &[M],
        times: &[Vec<f64>],
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            times.len() == models.len(),
            "kernel times for {} models, {} given",
            times.len(),
            models.len()
        );
        let mut kernels = Vec::new();
        let mut shapes = Vec::new();
        let mut n = 0;
        for (mi, (m, t)) in models.iter().zip(times).enumerate() {
            anyhow::ensure!(
                t.len() == m.shapes().len(),
                "model {mi}: {} kernel times for {} kernels",
                t.len(),
                m.shapes().len()
            );
            let mut ks = Vec::new();
            for (k, (sh, &solo)) in m.shapes().iter().zip(t).enumerate() {
                anyhow::ensure!(solo > 0.0, "model {mi}: a kernel's time is 0 ns");
                let name = m
                    .model()
                    .kernels
                    .get(k)
                    .map_or(sh.name.as_str(), |k| &k.name);
                ks.push(KernelPred {
                    blocks: sh.blocks,
                    solo_ns: solo,
                    class: kclass(name, sh),
                });
                n += 1;
            }
            kernels.push(ks);
            shapes.push(m.shapes().to_vec());
        }
        Ok(Self {
            spec: spec.clone(),
            shapes,
            kernels,
            cache: Default::default(),
            stats: Arc::new(Mutex::new(PredictorStats {
                kernels: n,
                ..Default::default()
            })),
        })
    }

    /// Replaces the stand-alone times with ones measured on the device
    /// that serves the models (`solo_ns[m][k]`, ns per kernel `k` of model
    /// `m`, in this predictor's model order): Aker §5 trains its predictor
    /// on the GPU it serves, so a GPU's policy must not predict from a
    /// simulated preset of another GPU (issue 26 item 6). The block-count
    /// model stays a line through the origin and the measured whole kernel
    /// ([`KernelPred::model`]); classes stay those of the kernels' names.
    pub fn with_solo_ns(mut self, solo_ns: &[Vec<u64>]) -> anyhow::Result<Self> {
        anyhow::ensure!(
            solo_ns.len() == self.kernels.len(),
            "measured kernel times for {} models, the predictor has {}",
            solo_ns.len(),
            self.kernels.len()
        );
        for (m, (ks, measured)) in self.kernels.iter_mut().zip(solo_ns).enumerate() {
            anyhow::ensure!(
                measured.len() == ks.len(),
                "model {m}: {} measured kernel times for {} kernels",
                measured.len(),
                ks.len()
            );
            for (k, &ns) in ks.iter_mut().zip(measured) {
                anyhow::ensure!(ns > 0, "model {m}: a kernel measured at 0 ns");
                k.solo_ns = ns as f64;
            }
        }
        Ok(self)
    }

    /// The predicted stand-alone time of kernel `k` of model `m` (ns).
    pub fn solo_ns(&self, m: usize, k: usize) -> Option<f64> {
        self.kernels.get(m)?.get(k).map(|p| p.solo_ns)
    }

    /// A predictor sharing this one's fusion profiles (a later run on the
    /// same device and models need not profile pairs again).
    pub fn share(&self) -> Self {
        Self {
            spec: self.spec.clone(),
            shapes: self.shapes.clone(),
            kernels: self.kernels.clone(),
            cache: self.cache.clone(),
            stats: self.stats.clone(),
        }
    }

    /// A predictor for the models `idx` of this one, in that order,
    /// sharing its fusion profiles.
    pub fn select(&self, idx: &[usize]) -> Self {
        Self {
            spec: self.spec.clone(),
            shapes: idx.iter().map(|&i| self.shapes[i].clone()).collect(),
            kernels: idx.iter().map(|&i| self.kernels[i].clone()).collect(),
            cache: self.cache.clone(),
            stats: self.stats.clone(),
        }
    }

    /// Whether it was profiled for exactly these models (names of the
    /// kernel shapes, in order).
    pub fn matches<M: crate::ModelShapes>(&self, models: &[M]) -> bool {
        self.shapes.len() == models.len()
            && self.shapes.iter().zip(models).all(|(a, m)| {
                a.len() == m.shapes().len()
                    && a.iter().zip(m.shapes()).all(|(x, y)| x.name == y.name)
            })
    }

    pub fn stats(&self) -> PredictorStats {
        *self.stats.lock().expect("stats")
    }
}

impl Predictor for SimPredictor {
    fn kernel(&self, m: ModelId, k: u32) -> KernelPred {
        self.kernels[m.0 as usize][k as usize]
    }
    fn fusion(&mut self, lc: (ModelId, u32), be: (ModelId, u32)) -> Option<Fusion> {
        let s1 = &self.shapes[lc.0 .0 as usize][lc.1 as usize];
        let s2 = &self.shapes[be.0 .0 as usize][be.1 as usize];
        let k = (key(s1), key(s2));
        if let Some(f) = self.cache.lock().expect("cache").get(&k) {
            return *f;
        }
        let x1 = self.kernel(lc.0, lc.1).solo_ns;
        let bm = self.kernel(be.0, be.1).model();
        // A pair that cannot be profiled (a shape the device refuses) is
        // never fused.
        let (f, runs) = train_fusion(&self.spec, s1, x1, s2, &bm).unwrap_or((None, 0));
        {
            let mut st = self.stats.lock().expect("stats");
            st.pairs += 1;
            st.fused_runs += runs;
        }
        self.cache.lock().expect("cache").insert(k, f);
        f
    }
}

/// Executes the managers' fused launches ([`FusedLaunch`], `aker`,
/// `tacker`) on a device that places blocks ([`crate::Device::launch_fused`],
/// the parts [`launch_fused`] makes) and reports each
/// as its LC kernel: started when the LC part starts, completed (or
/// evicted, or killed) once both parts have finished.
#[derive(Default)]
pub struct FuseExec {
    pending: HashMap<LaunchId, PartGroup<()>>,
    part_of: HashMap<LaunchId, LaunchId>,
    /// Fused launches completed.
    pub completed: u64,
}

impl FuseExec {
    /// Launches `f` on device stream `s0`; `lc` / `be` are the two
    /// components' shapes and buffers (reads, writes).
    pub fn launch(
        &mut self,
        dev: &mut dyn crate::Device,
        s0: StreamId,
        f: &FusedLaunch,
        lc: (&Arc<KernelShape>, crate::Buffers),
        be: (&Arc<KernelShape>, crate::Buffers),
    ) -> Result<(), String> {
        let c1 = KernelLaunch::new(
            lc.0.clone(),
            Tags {
                task: f.lc.req.0,
                kernel: f.lc.kernel,
                user: 0,
            },
        )
        .with_buffers(lc.1 .0, lc.1 .1);
        let c2 = KernelLaunch::new(
            be.0.clone(),
            Tags {
                task: f.be.req.0,
                kernel: f.be.kernel,
                user: 1,
            },
        )
        .with_buffers(be.1 .0, be.1 .1)
        .with_blocks(f.be_blocks.clone());
        let ids = crate::device::launch_fused_parts(
            dev,
            s0,
            fused_parts(
                Component {
                    launch: c1,
                    per_cu: f.ratio.0,
                },
                Component {
                    launch: c2,
                    per_cu: f.ratio.1,
                },
            ),
        )?;
        PartGroup::track(&mut self.pending, &mut self.part_of, &ids, 0, f.lc, s0, ());
        Ok(())
    }

    /// Filters a device event: plain launches pass; of a fused launch the
    /// LC part's start passes and the launch is reported once, as the LC
    /// kernel, when both parts have finished (killed if one was, else
    /// evicted if one was, else completed).
    pub fn filter(&mut self, ev: &DeviceEvent) -> Option<DeviceEvent> {
        let completed = &mut self.completed;
        PartGroup::filter(
            &mut self.pending,
            &mut self.part_of,
            ev,
            |_, _, _| {},
            |_, e| {
                if e.kind == EventKind::Completed {
                    *completed += 1;
                }
            },
        )
    }
}

fn run_out(sim: &mut Sim) -> u64 {
    let mut last = 0;
    while let Some((t, _)) = sim.step() {
        last = t;
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ModelShapes;
    use reef_sim::{BufferId, SimConfig, Tags, ValueTracker};

    fn spec() -> DeviceSpec {
        DeviceSpec::preset("mi50").unwrap()
    }

    /// A GPU's measured kernel times replace the preset's predictions
    /// (issue 26 item 6); counts that do not match the models are refused.
    #[test]
    fn measured_kernel_times_replace_the_presets() {
        let sp = spec();
        let dir = reef_model::default_models_dir();
        let m =
            crate::PreparedModel::new(reef_model::load_named(&dir, "vgg").unwrap(), &sp).unwrap();
        let n = m.shapes().len();
        let p = SimPredictor::new(&sp, std::slice::from_ref(&m)).unwrap();
        let preset: Vec<f64> = (0..n).map(|k| p.solo_ns(0, k).unwrap()).collect();
        let measured: Vec<u64> = (0..n as u64).map(|k| 1_000 + 7 * k).collect();
        let q = p
            .share()
            .with_solo_ns(std::slice::from_ref(&measured))
            .unwrap();
        for (k, &ns) in measured.iter().enumerate() {
            let got = Predictor::kernel(&q, ModelId(0), k as u32);
            assert_eq!(got.solo_ns, ns as f64);
            assert_ne!(got.solo_ns, preset[k]);
            // The block-count line goes through the measured whole kernel.
            assert!((got.of_blocks(got.blocks) - ns as f64).abs() < 1e-6);
        }
        assert!(p.share().with_solo_ns(&[measured[1..].to_vec()]).is_err());
        assert!(p.share().with_solo_ns(&[]).is_err());
        assert!(p.with_solo_ns(&[vec![0; n]]).is_err());
    }

    #[test]
    fn ratios_respect_the_cu() {
        let sp = spec();
        // 512 threads: 5 blocks of 256 + ... at most 2560 threads per CU.
        let k1 = KernelShape::synthetic("a", 100, 512, 0, 0, vec![1000], &sp).unwrap();
        let k2 = KernelShape::synthetic("b", 100, 256, 0, 0, vec![1000], &sp).unwrap();
        let r = ratios(&sp, &k1, &k2);
        assert!(!r.is_empty());
        for (a, b) in &r {
            assert!(a * 512 + b * 256 <= sp.max_threads_per_cu);
        }
        assert!(!r.contains(&(max_per_cu(&sp, &k1), max_per_cu(&sp, &k2))));
    }

    #[test]
    fn persistent_blocks_stretch_a_kernel() {
        let sp = spec();
        // Flat curve: a block takes 10 us whatever the co-residency, so a
        // kernel of 60 x 8 blocks takes 1 wave at 8 per CU, 4 at 2 per CU.
        let k = Arc::new(KernelShape::synthetic("k", 480, 64, 0, 0, vec![10_000; 8], &sp).unwrap());
        assert_eq!(time_alone(&sp, &k, 0..480).unwrap(), 10_000);
        let mut sim = Sim::new(sp.clone(), SimConfig::default());
        let s = sim.create_stream(0, 4).unwrap();
        sim.launch(
            s,
            KernelLaunch::new(k.clone(), Tags::default()).with_persistent(2),
        )
        .unwrap();
        assert_eq!(run_out(&mut sim) - sp.launch_path_ns(), 40_000);
    }

    #[test]
    fn fused_components_keep_their_values() {
        let sp = spec();
        let k1 = Arc::new(
            KernelShape::synthetic("c", 300, 256, 0, 0, vec![8_000, 9_000, 12_000, 16_000], &sp)
                .unwrap(),
        );
        let k2 = Arc::new(
            KernelShape::synthetic("m", 500, 256, 0, 0, vec![5_000, 9_000, 13_000, 17_000], &sp)
                .unwrap(),
        );
        let run = |fused: bool| -> ValueTracker {
            let mut sim = Sim::new(sp.clone(), SimConfig::default());
            let s = sim.create_stream(0, 4).unwrap();
            let l1 = KernelLaunch::new(k1.clone(), Tags::default())
                .with_buffers(vec![BufferId(1)], vec![BufferId(2)]);
            let l2 = KernelLaunch::new(k2.clone(), Tags::default())
                .with_buffers(vec![BufferId(3)], vec![BufferId(4)]);
            if fused {
                launch_fused(
                    &mut sim,
                    s,
                    Component {
                        launch: l1,
                        per_cu: 2,
                    },
                    Component {
                        launch: l2,
                        per_cu: 1,
                    },
                )
                .unwrap();
            } else {
                sim.launch(s, l1).unwrap();
                sim.launch(s, l2).unwrap();
            }
            run_out(&mut sim);
            sim.values().clone()
        };
        let (a, b) = (run(false), run(true));
        let bufs = [BufferId(2), BufferId(4)];
        let d = b.diff(&a, &bufs);
        assert!(d.is_empty(), "{d:?}");
        // The check can fail: half of component 2 is not its output.
        let mut sim = Sim::new(sp.clone(), SimConfig::default());
        let s = sim.create_stream(0, 4).unwrap();
        sim.launch(
            s,
            KernelLaunch::new(k2.clone(), Tags::default())
                .with_buffers(vec![BufferId(3)], vec![BufferId(4)])
                .with_blocks(0..250),
        )
        .unwrap();
        run_out(&mut sim);
        assert!(!sim.values().diff(&a, &[BufferId(4)]).is_empty());
    }

    #[test]
    fn fuse_exec_reports_a_fused_launch_once_as_its_lc_kernel() {
        use reef_sched::{KernelTag, RequestId};
        let sp = spec();
        let k1 =
            Arc::new(KernelShape::synthetic("c", 120, 256, 0, 0, vec![8_000; 4], &sp).unwrap());
        let k2 =
            Arc::new(KernelShape::synthetic("m", 300, 256, 0, 0, vec![5_000; 4], &sp).unwrap());
        let mut sim = Sim::new(sp.clone(), SimConfig::default());
        let s = sim.create_stream(0, 4).unwrap();
        let mut fx = FuseExec::default();
        let f = FusedLaunch {
            stream: reef_sched::StreamId(0),
            lc: KernelTag {
                req: RequestId(1),
                kernel: 3,
            },
            lc_model: reef_sched::ModelId(0),
            be: KernelTag {
                req: RequestId(9),
                kernel: 5,
            },
            be_model: reef_sched::ModelId(1),
            be_blocks: 0..100,
            ratio: (2, 1),
            predicted_ns: 0,
            lc_ns: 0,
            headroom_ns: 0,
        };
        fx.launch(
            &mut sim,
            s,
            &f,
            (&k1, Default::default()),
            (&k2, Default::default()),
        )
        .unwrap();
        let mut seen = Vec::new();
        while let Some((_, evs)) = sim.step() {
            for e in evs {
                if let Some(e) = fx.filter(&e) {
                    seen.push((e.kind, e.tags.task, e.tags.kernel));
                }
            }
        }
        assert_eq!(
            seen,
            vec![(EventKind::Started, 1, 3), (EventKind::Completed, 1, 3)]
        );
        assert_eq!(fx.completed, 1);
    }
}
