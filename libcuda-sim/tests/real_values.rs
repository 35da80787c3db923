//! What a compiled kernel computes on the simulated libcuda (issue 30): a
//! model compiled by reef-compile, loaded from its PTX (with the
//! `// reef-sim:` lines reefd's CUDA device writes,
//! reefd/src/device/cuda/module.rs), its weights and inputs copied to
//! device memory and its kernels launched through the driver API: the
//! outputs copied back equal ONNX Runtime's, each TIR function computed by
//! its CPU build.
//!
//! - the two-input model of compile/tests/make_two_io.py, six kernels;
//! - compile/tests/make_pool.py `--split`, whose pooling function TVM
//!   splits into three kernels (as light_inception_v1's): its arguments are
//!   spread over them, and the function gives real values only when every
//!   earlier kernel ran whole (a kernel evicted by the preempt flag and not
//!   run again leaves the last one reading a stale workspace on a GPU).

#[path = "../../cpu-kernels/tests/support/ort.rs"]
mod ort;

use ort::f32s;
use std::ffi::{c_void, CString};
use std::path::Path;
use std::ptr::null_mut;

use cudarc::driver::sys::{CUdeviceptr, CUfunction, CUmodule, CUresult, CUstream};
use reef_libcuda_sim::*;

const OK: CUresult = CUresult::CUDA_SUCCESS;

/// The tests count the process-wide driver's CPU calls: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn idx(v: &serde_json::Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

/// A compiled model loaded on a fresh context: one allocation per
/// storage, the weights copied in.
struct Loaded {
    sched: serde_json::Value,
    module: CUmodule,
    stream: CUstream,
    storages: Vec<(CUdeviceptr, usize)>,
    functions: Vec<CUfunction>,
    /// The PTX carries REEF's preempt flag (reef-trap's injection, as
    /// reefd loads it): kernels take a trailing execution index.
    flagged: bool,
}

impl Loaded {
    fn new(dir: &Path, name: &str, flagged: bool) -> Loaded {
        let sched: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(format!("{name}.json"))).unwrap())
                .unwrap();
        // The PTX as reefd's CUDA device loads it: its `// reef-sim:` lines
        // (work, reads and writes by parameter position) appended.
        let mut ptx = std::fs::read_to_string(dir.join("kernels.sm_80.ptx")).unwrap();
        assert!(
            ptx.contains("// reef-cpu: library="),
            "reef-compile annotates the PTX"
        );
        if flagged {
            ptx = reef_trap::ptx::inject(&ptx, "kernels.sm_80.ptx", &Default::default())
                .unwrap()
                .ptx;
        }
        for k in sched["kernels"].as_array().unwrap() {
            let args = idx(&k["args"]);
            let pos = |set: &[usize]| -> String {
                (0..args.len())
                    .filter(|&p| set.contains(&args[p]))
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let (reads, writes) = (idx(&k["reads"]), idx(&k["writes"]));
            let inputs: Vec<usize> = reads.into_iter().filter(|r| !writes.contains(r)).collect();
            ptx += &format!(
                "// reef-sim: kernel={} flops={} bytes={} reads={} writes={}\n",
                k["name"].as_str().unwrap(),
                k["flops"],
                k["bytes_read"].as_u64().unwrap() + k["bytes_written"].as_u64().unwrap(),
                pos(&inputs),
                pos(&writes)
            );
        }
        assert_eq!(cuInit(0), OK);
        let mut ctx = null_mut();
        assert_eq!(unsafe { cuCtxCreate_v2(&mut ctx, 0, 0) }, OK);
        let mut module = null_mut();
        let image = CString::new(ptx).unwrap();
        assert_eq!(
            unsafe { cuModuleLoadData(&mut module, image.as_ptr() as *const c_void) },
            OK
        );
        let mut stream = null_mut();
        assert_eq!(unsafe { cuStreamCreate(&mut stream, 1) }, OK);
        let elem = |t: &str| match t {
            "float32" => 4,
            "int64" => 8,
            other => panic!("storage type {other}"),
        };
        let storages: Vec<(CUdeviceptr, usize)> = sched["storage"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let n = s["size"].as_u64().unwrap() as usize * elem(s["stype"].as_str().unwrap());
                let mut p = 0;
                assert_eq!(unsafe { cuMemAlloc_v2(&mut p, n) }, OK);
                (p, n)
            })
            .collect();
        let weights = std::fs::read(dir.join("weights.bin")).unwrap();
        for e in sched["weights"]["entries"].as_array().unwrap() {
            let (s, off, n) = (
                e["storage"].as_u64().unwrap() as usize,
                e["offset"].as_u64().unwrap() as usize,
                e["bytes"].as_u64().unwrap() as usize,
            );
            let w = &weights[off..off + n];
            assert_eq!(
                unsafe { cuMemcpyHtoD_v2(storages[s].0, w.as_ptr() as *const c_void, n) },
                OK
            );
        }
        let functions = sched["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                let name = CString::new(k["name"].as_str().unwrap()).unwrap();
                let mut f = null_mut();
                assert_eq!(
                    unsafe { cuModuleGetFunction(&mut f, module, name.as_ptr()) },
                    OK
                );
                f
            })
            .collect();
        Loaded {
            sched,
            module,
            stream,
            storages,
            functions,
            flagged,
        }
    }

    fn kernels(&self) -> &Vec<serde_json::Value> {
        self.sched["kernels"].as_array().unwrap()
    }

    fn htod(&self, p: CUdeviceptr, b: &[u8]) {
        assert_eq!(
            unsafe { cuMemcpyHtoD_v2(p, b.as_ptr() as *const c_void, b.len()) },
            OK
        );
    }

    /// ONNX Runtime's inputs of `m` copied to the input storages.
    fn set_inputs(&self, m: &ort::Manifest) {
        for (i, s) in idx(&self.sched["inputs"]).into_iter().enumerate() {
            let x = m.read(&m.inputs[i]);
            assert_eq!(x.len(), self.storages[s].1);
            self.htod(self.storages[s].0, &x);
        }
    }

    /// Launches schedule kernel `i` on the stream (execution index `i`).
    fn launch(&self, i: usize) {
        let k = &self.kernels()[i];
        let mut ptrs: Vec<u64> = idx(&k["args"])
            .iter()
            .map(|&s| self.storages[s].0)
            .collect();
        let mut index = i as u32;
        let mut params: Vec<*mut c_void> = ptrs
            .iter_mut()
            .map(|p| p as *mut u64 as *mut c_void)
            .collect();
        if self.flagged {
            params.push(&mut index as *mut u32 as *mut c_void);
        }
        let lp = idx(&k["launch_params"]);
        let r = unsafe {
            cuLaunchKernel(
                self.functions[i],
                lp[0] as u32,
                lp[1] as u32,
                lp[2] as u32,
                lp[3] as u32,
                lp[4] as u32,
                lp[5] as u32,
                k["dynamic_shared_bytes"].as_u64().unwrap() as u32,
                self.stream,
                params.as_mut_ptr(),
                null_mut(),
            )
        };
        assert_eq!(r, OK, "launch {}", k["name"]);
    }

    fn sync(&self) {
        assert_eq!(cuStreamSynchronize(self.stream), OK);
    }

    /// Sets the module's preempt flag (reef-trap's global).
    fn set_flag(&self, on: bool) {
        let (mut p, mut n) = (0, 0);
        assert_eq!(
            unsafe {
                cuModuleGetGlobal_v2(&mut p, &mut n, self.module, c"reef_preempt_flag".as_ptr())
            },
            OK
        );
        self.htod(p, &(on as u32).to_le_bytes());
    }

    /// Output `i` as floats.
    fn output(&self, i: usize) -> Vec<f32> {
        let s = idx(&self.sched["outputs"])[i];
        let mut got = vec![0u8; self.storages[s].1];
        assert_eq!(
            unsafe {
                cuMemcpyDtoH_v2(
                    got.as_mut_ptr() as *mut c_void,
                    self.storages[s].0,
                    got.len(),
                )
            },
            OK
        );
        f32s(&got)
    }

    /// Whether every output equals ONNX Runtime's in `m` (the tolerance of
    /// cpu-kernels/tests/support/ort.rs).
    fn equals(&self, m: &ort::Manifest) -> bool {
        (0..m.outputs.len()).all(|i| {
            let want = f32s(&m.read(&m.outputs[i]));
            let got = self.output(i);
            got.len() == want.len()
                && got
                    .iter()
                    .zip(&want)
                    .all(|(g, w)| ((g - w).abs() as f64) <= 1e-4 * w.abs() as f64 + 1e-5)
        })
    }
}

#[test]
fn a_compiled_model_computes_onnx_runtimes_answer() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // The other test's allocations may still hold their slots (the tests
    // share the process-wide driver and run in either order).
    let held_before = cpu_slots_held();
    let work = ort::tmp("libcuda-real");
    let onnx = ort::two_io_onnx(&work);
    let dir = work.join("two_io");
    ort::compile(&onnx, &dir);
    let refs: Vec<ort::Manifest> = (0..2)
        .map(|seed| ort::ort(&onnx, &work.join(format!("ort{seed}")), seed, 10))
        .collect();
    let l = Loaded::new(&dir, "two_io", false);
    let n = l.kernels().len();
    let calls0 = device_stats(0).unwrap().cpu_calls;
    // Two inferences on the same buffers, with different inputs: the
    // second's input copies and kernels follow the first's queued CPU work.
    for (round, m) in refs.iter().enumerate() {
        l.set_inputs(m);
        for i in 0..n {
            l.launch(i);
        }
        l.sync();
        assert_eq!(
            device_stats(0).unwrap().cpu_calls - calls0,
            (round + 1) as u64 * n as u64,
            "every kernel computed by its CPU build"
        );
        for i in 0..m.outputs.len() {
            let (got, want) = (l.output(i), f32s(&m.read(&m.outputs[i])));
            assert!(
                l.equals(m),
                "round {round} output {i}: {got:?} against ONNX Runtime {want:?}"
            );
        }
    }
    // The allocations hold at most one inference's slots: a slot wholly
    // overwritten by a later one is dropped (an activation no host copy
    // reads kept every inference's bytes before: 2 rounds' worth here).
    let per_round: usize = l.kernels().iter().map(|k| idx(&k["writes"]).len()).sum();
    let held = cpu_slots_held().saturating_sub(held_before);
    assert!(
        held <= per_round,
        "{held} slots held after {} rounds of {per_round} written arguments",
        refs.len()
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// A TIR function split into three kernels (compile/tests/make_pool.py
/// `--split`): computed from arguments spread over its kernels when its
/// last kernel completes, equal to ONNX Runtime's answer; not computed,
/// its outputs marked stale, when the first of them was evicted by the
/// preempt flag and not run again (on a GPU the last kernel then reads the
/// stale partial sums); right again once the call is re-run from the
/// evicted kernel, as REEF's restore does (§4.3).
#[test]
fn a_split_function_computes_only_after_all_its_kernels_ran_whole() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let work = ort::tmp("libcuda-split");
    let onnx = ort::split_onnx(&work);
    let dir = work.join("split");
    ort::compile(&onnx, &dir);
    let refs: Vec<ort::Manifest> = (0..2)
        .map(|seed| ort::ort(&onnx, &work.join(format!("ort{seed}")), seed, 10))
        .collect();
    let l = Loaded::new(&dir, "split", true);
    let split = l.sched["cpu"]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| idx(&c["kernels"]))
        .find(|k| k.len() > 1)
        .expect("TVM splits the pooling function into several kernels");
    let ptx = std::fs::read_to_string(dir.join("kernels.sm_80.ptx")).unwrap();
    assert!(ptx.contains(" after="), "the split call is annotated");
    let n = l.kernels().len();
    let stale0 = stats().unwrap().split_stale;

    // Whole: the real function.
    l.set_inputs(&refs[0]);
    (0..n).for_each(|i| l.launch(i));
    l.sync();
    assert!(
        l.equals(&refs[0]),
        "a whole run gives ONNX Runtime's answer"
    );

    // The split call's first kernel evicted, the rest run: stale.
    l.set_inputs(&refs[1]);
    for i in 0..n {
        l.set_flag(i == split[0]);
        l.launch(i);
        l.sync();
    }
    l.set_flag(false);
    assert_eq!(stats().unwrap().split_stale - stale0, 1);
    assert!(
        !l.equals(&refs[1]),
        "the last kernel computed although the first did not run"
    );

    // Restored from the evicted kernel: right again.
    (split[0]..n).for_each(|i| l.launch(i));
    l.sync();
    assert!(
        l.equals(&refs[1]),
        "the restore gives ONNX Runtime's answer"
    );
    assert_eq!(stats().unwrap().split_stale - stale0, 1);
    let _ = std::fs::remove_dir_all(&work);
}
