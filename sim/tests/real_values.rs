//! Real values on the simulated device (issue 30, DESIGN.md "The simulator"
//! values): a model compiled by reef-compile (`compile/tests/make_two_io.py`:
//! two inputs, one int64, two outputs) runs on `h100` with its kernels'
//! CPU build computing every buffer's bytes, and
//! - an unpreempted run's outputs equal ONNX Runtime's;
//! - a run killed mid-model and restored from the interrupted kernel gives
//!   the same outputs, and one restored from the kernel after it (a wrong
//!   restore point) gives a wrong answer;
//! - computing values does not change simulated time (same events, same
//!   times, with and without the CPU build registered);
//! - a kernel that accumulates into its output in global memory
//!   (`compile/tests/make_pool.py`'s max pooling), killed and restored
//!   from itself, gives ONNX Runtime's answer, and the version tracker
//!   agrees (its output is not an input of it).

use reef_sim::{
    BufferId, DeviceSpec, EventKind, KernelLaunch, KernelShape, Sim, SimConfig, StreamId, Tags,
};
#[path = "../../cpu-kernels/tests/support/ort.rs"]
mod ort;

use ort::f32s;
use std::path::PathBuf;
use std::sync::Arc;

struct Fixture {
    work: PathBuf,
    model: reef_model::Model,
    inputs: Vec<Vec<u8>>,
    want: Vec<Vec<f32>>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

fn fixture(tag: &str) -> Fixture {
    fixture_of(tag, "two_io", ort::two_io_onnx)
}

fn fixture_of(tag: &str, name: &str, make: fn(&std::path::Path) -> PathBuf) -> Fixture {
    let work = ort::tmp(&format!("sim-real-{tag}"));
    let onnx = make(&work);
    let dir = work.join(name);
    ort::compile(&onnx, &dir);
    let m = ort::ort(&onnx, &work.join("ort"), 5, 10);
    let model = reef_model::Model::load(&dir).unwrap();
    let inputs = m.inputs.iter().map(|t| m.read(t)).collect();
    let want = m.outputs.iter().map(|t| f32s(&m.read(t))).collect();
    Fixture {
        work,
        model,
        inputs,
        want,
    }
}

/// Within the tolerance everywhere (cpu-kernels/tests/support/ort.rs).
fn matches(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len() && ort::compare(got, want).1 == 0
}

const NS: u64 = 3 << 32;

fn buf(s: usize) -> BufferId {
    BufferId(NS | s as u64)
}

struct Device {
    sim: Sim,
    stream: StreamId,
    shapes: Vec<Arc<KernelShape>>,
}

fn device(f: &Fixture, real: bool) -> Device {
    let spec = DeviceSpec::preset("h100").unwrap();
    let shapes = KernelShape::for_model(&f.model, &spec).unwrap();
    let mut sim = Sim::new(spec, SimConfig::default());
    let stream = sim.create_stream(0, 64).unwrap();
    if real {
        assert!(sim.values_mut().load_compiled(&f.model, &shapes).unwrap());
        let c = f.model.compiled.as_ref().unwrap();
        for (&s, bytes) in c.inputs.iter().zip(&f.inputs) {
            sim.values_mut().set_bytes(buf(s), bytes.clone());
        }
    }
    Device {
        sim,
        stream,
        shapes,
    }
}

impl Device {
    fn launch(&mut self, f: &Fixture, k: usize) {
        let kern = &f.model.kernels[k];
        let l = KernelLaunch::new(
            self.shapes[k].clone(),
            Tags {
                task: 1,
                kernel: k as u32,
                user: 0,
            },
        )
        .with_buffers(
            kern.reads.iter().map(|&s| buf(s)).collect(),
            kern.writes.iter().map(|&s| buf(s)).collect(),
        );
        self.sim.launch(self.stream, l).unwrap();
    }

    /// Runs kernels `from..` one at a time (the next launched when the
    /// previous completes). With `kill_at = Some(t)`, every running launch
    /// is killed by a kill issued at simulated time `t` (it lands the
    /// preset's kill latency later), the device queue is then cleared (as
    /// REEF's reset does) and the run stops. Returns the kernels completed,
    /// whether a launch was killed, and the events (time, kind, kernel).
    fn run(
        &mut self,
        f: &Fixture,
        from: usize,
        kill_at: Option<u64>,
    ) -> (Vec<usize>, bool, Vec<(u64, String, u32)>) {
        let n = f.model.kernels.len();
        let mut done = Vec::new();
        let mut events = Vec::new();
        let mut killed = false;
        let mut issued = false;
        if from < n {
            self.launch(f, from);
        }
        loop {
            let next = self.sim.next_event_time();
            let evs = match kill_at {
                Some(ka) if !issued && next.is_none_or(|t| t > ka) => {
                    let evs = self.sim.advance_to(ka);
                    self.sim.kill_all().unwrap();
                    issued = true;
                    (ka, evs)
                }
                _ => match self.sim.step() {
                    Some(x) => x,
                    None => break,
                },
            };
            let (t, evs) = evs;
            for e in evs {
                events.push((t, format!("{:?}", e.kind), e.tags.kernel));
                match e.kind {
                    EventKind::Completed => {
                        let k = e.tags.kernel as usize;
                        done.push(k);
                        if k + 1 < n && !killed {
                            self.launch(f, k + 1);
                        }
                    }
                    EventKind::Killed { .. } => {
                        killed = true;
                        self.sim.clear_queue(self.stream).unwrap();
                    }
                    _ => {}
                }
            }
        }
        (done, killed, events)
    }

    fn outputs(&self, f: &Fixture) -> Vec<Vec<f32>> {
        let c = f.model.compiled.as_ref().unwrap();
        c.outputs
            .iter()
            .zip(&f.want)
            .map(|(&s, w)| {
                // A buffer no kernel has written yet holds no bytes here
                // (device memory never written: zeros).
                self.sim
                    .values()
                    .bytes(buf(s))
                    .map(|b| f32s(&b))
                    .unwrap_or_else(|| vec![0.0; w.len()])
            })
            .collect()
    }
}

#[test]
fn outputs_are_real_numbers_and_a_wrong_restore_point_gives_a_wrong_answer() {
    let f = fixture("restore");
    let n = f.model.kernels.len();

    // Unpreempted: ONNX Runtime's answer.
    let mut clean = device(&f, true);
    let (done, killed, clean_events) = clean.run(&f, 0, None);
    assert_eq!(done, (0..n).collect::<Vec<_>>());
    assert!(!killed);
    let got = clean.outputs(&f);
    for (g, w) in got.iter().zip(&f.want) {
        assert!(matches(g, w), "clean run: {g:?} against ONNX Runtime {w:?}");
    }
    let real = clean.sim.values().real().unwrap();
    assert!(real.errors().is_empty(), "{:?}", real.errors());
    assert_eq!(
        real.calls(),
        n as u64,
        "one CPU call per kernel of this model"
    );

    // Computing values does not move simulated time.
    let mut plain = device(&f, false);
    let (_, _, plain_events) = plain.run(&f, 0, None);
    assert_eq!(clean_events, plain_events);
    assert!(plain.sim.values().real().is_none());

    // Killed in the middle of kernel 3 (fused_matmul_add2_relu, which
    // writes the output feat:0): the kill is issued so that it lands
    // during the kernel in the clean timeline.
    let started = |k: u32| {
        clean_events
            .iter()
            .find(|e| e.1 == "Started" && e.2 == k)
            .unwrap()
            .0
    };
    let target = 3;
    // 1/20 of the kernel-to-kernel gap: inside the kernel (1 us of 11).
    let into = (started(target + 1) - started(target)) / 20;
    let kill_latency = DeviceSpec::preset("h100").unwrap().kill_latency_ns;
    let kill_at = started(target) + into - kill_latency;
    let mut d = device(&f, true);
    let (done, killed, events) = d.run(&f, 0, Some(kill_at));
    assert!(killed, "the kill lands on a running kernel: {events:?}");
    let interrupted = (0..n).find(|k| !done.contains(k)).unwrap();
    assert_eq!(interrupted, target as usize, "{events:?}");
    println!("kill at {kill_at} ns: kernel {interrupted} interrupted; {events:?}");
    // The killed kernel's outputs are not the clean ones.
    assert_ne!(d.outputs(&f)[0], clean.outputs(&f)[0]);

    // Restored from the interrupted kernel: the clean answer.
    let mut right = device(&f, true);
    right.run(&f, 0, Some(kill_at));
    right.run(&f, interrupted, None);
    let got = right.outputs(&f);
    for (g, w) in got.iter().zip(&f.want) {
        assert!(matches(g, w), "correct restore: {g:?} against {w:?}");
    }

    // Restored from the kernel after it: the interrupted kernel's outputs
    // keep their stale bytes, and the answer is wrong.
    let mut wrong = device(&f, true);
    wrong.run(&f, 0, Some(kill_at));
    wrong.run(&f, interrupted + 1, None);
    let got = wrong.outputs(&f);
    let mismatched = got
        .iter()
        .zip(&f.want)
        .filter(|(g, w)| !matches(g, w))
        .count();
    println!(
        "wrong restore: {mismatched} of {} outputs differ from ONNX Runtime",
        got.len()
    );
    assert!(
        mismatched > 0,
        "a wrong restore point went unnoticed: {got:?}"
    );
    // The version tracker agrees with the bytes here.
    let outs: Vec<BufferId> = f
        .model
        .compiled
        .as_ref()
        .unwrap()
        .outputs
        .iter()
        .map(|&s| buf(s))
        .collect();
    assert!(!wrong
        .sim
        .values()
        .diff(clean.sim.values(), &outs)
        .is_empty());
    assert!(right
        .sim
        .values()
        .diff(clean.sim.values(), &outs)
        .is_empty());
}

/// light_shufflenet's "stale" restored requests (reefd's `onnx_values` on
/// sim:h100; with `REEF_VALUES_TRACE`, each one's first stale read was such
/// a kernel, kernel 51, 55 or 95, re-executed by its restore and reading
/// its own output): 39 of its 132 kernels (max pooling, grouped convolutions,
/// the channel-shuffle sums) initialise their output element and then
/// accumulate into it in global memory. reef-compile listed the output
/// among the kernel's reads, so after a kill the version tracker made the
/// re-run's output a function of the killed run's corrupted output and
/// called the restore stale, while the bytes (and a GPU's) were right: the
/// kernel loads only what it stored itself (REEF §4.4: the first access
/// to each location is a write, so the kernel is idempotent and restoring
/// from it is correct).
#[test]
fn a_kernel_accumulating_into_its_output_is_restored_from_itself() {
    let f = fixture_of("accumulate", "pool", ort::pool_onnx);
    let n = f.model.kernels.len();
    let target = f
        .model
        .kernels
        .iter()
        .position(|k| k.name.starts_with("max_pool2d"))
        .expect("a max pooling kernel");
    let kern = &f.model.kernels[target];
    assert!(
        kern.reads.iter().all(|r| !kern.writes.contains(r)),
        "{}: reads {:?}, writes {:?}: the output it accumulates into is not an input",
        kern.name,
        kern.reads,
        kern.writes
    );

    let mut clean = device(&f, true);
    let (done, _, clean_events) = clean.run(&f, 0, None);
    assert_eq!(done, (0..n).collect::<Vec<_>>());
    let started = |k: usize| {
        clean_events
            .iter()
            .find(|e| e.1 == "Started" && e.2 == k as u32)
            .unwrap()
            .0
    };
    let completed = clean_events
        .iter()
        .find(|e| e.1 == "Completed" && e.2 == target as u32)
        .unwrap()
        .0;
    // Halfway through the kernel.
    let into = (completed - started(target)) / 2;
    let kill_latency = DeviceSpec::preset("h100").unwrap().kill_latency_ns;
    let kill_at = started(target) + into - kill_latency;
    let mut d = device(&f, true);
    let (done, killed, events) = d.run(&f, 0, Some(kill_at));
    assert!(killed, "the kill lands on a running kernel: {events:?}");
    let interrupted = (0..n).find(|k| !done.contains(k)).unwrap();
    assert_eq!(interrupted, target, "{events:?}");
    // Restored from the interrupted kernel (every kernel of a TVM model is
    // idempotent, REEF §2.1 Table 1): ONNX Runtime's answer, and the
    // version tracker calls it so.
    d.run(&f, interrupted, None);
    let got = d.outputs(&f);
    for (g, w) in got.iter().zip(&f.want) {
        assert!(matches(g, w), "restored: {g:?} against ONNX Runtime {w:?}");
    }
    let outs: Vec<BufferId> = f
        .model
        .compiled
        .as_ref()
        .unwrap()
        .outputs
        .iter()
        .map(|&s| buf(s))
        .collect();
    let all: Vec<BufferId> = (0..f.model.buffers.len()).map(buf).collect();
    assert!(
        d.sim.values().diff(clean.sim.values(), &outs).is_empty(),
        "the version tracker calls a correct restore stale: {:?}",
        d.sim.values().diff(clean.sim.values(), &all)
    );

    // The path onnx_values hit (REEF_VALUES_TRACE): the kernel completed
    // while the preempt flag was set, so its completion was not counted
    // (it may be a partial run, REEF §4.3-4.4) and the restore re-executed
    // it over its own complete output: still the clean answer.
    let mut again = device(&f, true);
    again.run(&f, 0, None);
    again.run(&f, target, None);
    let got = again.outputs(&f);
    for (g, w) in got.iter().zip(&f.want) {
        assert!(
            matches(g, w),
            "re-executed: {g:?} against ONNX Runtime {w:?}"
        );
    }
    assert!(
        again
            .sim
            .values()
            .diff(clean.sim.values(), &outs)
            .is_empty(),
        "the version tracker calls a re-execution stale: {:?}",
        again.sim.values().diff(clean.sim.values(), &all)
    );
}

#[test]
fn a_schedule_without_code_keeps_version_tracking() {
    // The measured MI50 schedules (../shared/models) carry no CPU build.
    let dir = reef_model::default_models_dir().join("vgg");
    let model = reef_model::Model::load(&dir).unwrap();
    let spec = DeviceSpec::preset("mi50").unwrap();
    let shapes = KernelShape::for_model(&model, &spec).unwrap();
    let mut sim = Sim::new(spec, SimConfig::default());
    assert!(!sim.values_mut().load_compiled(&model, &shapes).unwrap());
    assert!(sim.values().real().is_none());
    assert_eq!(sim.values().bytes(BufferId(1)), None);
}

#[test]
fn a_partly_run_kernel_writes_only_its_blocks_part() {
    // softmax_kernel (the last, 2 blocks) writes probs/out: run as blocks
    // 0..1 the first half of the output is the answer and the second keeps
    // what was there (zeros: never written); blocks 1..2 complete it. The
    // same through `blocks_ran`, the hook for an engine that runs a killed
    // launch's blocks partly.
    let f = fixture("partial");
    let n = f.model.kernels.len();
    let last = n - 1;
    assert_eq!(f.model.kernels[last].num_blocks(), 2);
    let probs = f.model.compiled.as_ref().unwrap().outputs[1];
    let want = &f.want[1];
    let half = want.len() / 2;
    let run_all_but_last = |d: &mut Device| {
        for k in 0..last {
            d.launch(&f, k);
        }
        while d.sim.step().is_some() {}
    };
    let probs_now = |d: &Device| f32s(&d.sim.values().bytes(buf(probs)).unwrap_or(vec![0; 24]));

    let mut d = device(&f, true);
    run_all_but_last(&mut d);
    let kern = &f.model.kernels[last];
    let launch = |d: &mut Device, blocks: std::ops::Range<u32>| {
        let l = KernelLaunch::new(d.shapes[last].clone(), Tags::default())
            .with_buffers(
                kern.reads.iter().map(|&s| buf(s)).collect(),
                kern.writes.iter().map(|&s| buf(s)).collect(),
            )
            .with_blocks(blocks);
        d.sim.launch(d.stream, l).unwrap();
        while d.sim.step().is_some() {}
    };
    launch(&mut d, 0..1);
    let got = probs_now(&d);
    assert!(matches(&got[..half], &want[..half]), "{got:?} {want:?}");
    assert!(got[half..].iter().all(|&v| v == 0.0), "{got:?}");
    launch(&mut d, 1..2);
    assert!(matches(&probs_now(&d), want));

    let mut h = device(&f, true);
    run_all_but_last(&mut h);
    let writes: Vec<BufferId> = kern.writes.iter().map(|&s| buf(s)).collect();
    let id = h.shapes[last].identity;
    h.sim.values_mut().blocks_ran(id, &writes, 1..2, 2);
    let got = probs_now(&h);
    assert!(got[..half].iter().all(|&v| v == 0.0), "{got:?}");
    assert!(matches(&got[half..], &want[half..]), "{got:?} {want:?}");
}
