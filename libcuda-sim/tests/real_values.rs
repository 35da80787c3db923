//! What a compiled kernel computes on the simulated libcuda (issue 30): the
//! two-input model of compile/tests/make_two_io.py, compiled by
//! reef-compile, loaded from its PTX (with the `// reef-sim:` lines reefd's
//! CUDA device writes, reefd/src/device/cuda/module.rs), its weights and
//! inputs copied to device memory and its six kernels launched through the
//! driver API: the outputs copied back equal ONNX Runtime's, each kernel
//! computed by its TIR function's CPU build.

use std::ffi::{c_void, CString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr::null_mut;

use cudarc::driver::sys::{CUdeviceptr, CUresult};
use reef_libcuda_sim::*;

const OK: CUresult = CUresult::CUDA_SUCCESS;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn py(args: &[&std::ffi::OsStr]) {
    let exe = root().join(".venv/bin/python");
    assert!(
        exe.is_file(),
        "run scripts/setup.sh: {} is missing",
        exe.display()
    );
    let out = Command::new(exe)
        .env("PYTHONPATH", root().join("compile"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn a_compiled_model_computes_onnx_runtimes_answer() {
    let work = std::env::temp_dir().join(format!("reef-libcuda-real-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let onnx = work.join("two_io.onnx");
    let dir = work.join("two_io");
    let refs = [work.join("ort0"), work.join("ort1")];
    py(&[
        root().join("compile/tests/make_two_io.py").as_os_str(),
        onnx.as_os_str(),
    ]);
    py(&[
        "-m".as_ref(),
        "reef_compile.cli".as_ref(),
        onnx.as_os_str(),
        "--arch".as_ref(),
        "sm_80".as_ref(),
        "--no-reference".as_ref(),
        "-o".as_ref(),
        dir.as_os_str(),
    ]);
    for (seed, refd) in refs.iter().enumerate() {
        py(&[
            root().join("compile/tests/ort_reference.py").as_os_str(),
            onnx.as_os_str(),
            refd.as_os_str(),
            "--seed".as_ref(),
            seed.to_string().as_ref(),
            "--int-high".as_ref(),
            "10".as_ref(),
        ]);
    }
    let sched: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("two_io.json")).unwrap()).unwrap();
    let kernels = sched["kernels"].as_array().unwrap();
    let idx = |v: &serde_json::Value| -> Vec<usize> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect()
    };

    // The PTX as reefd's CUDA device loads it: its `// reef-sim:` lines
    // (work, reads and writes by parameter position) appended.
    let mut ptx = std::fs::read_to_string(dir.join("kernels.sm_80.ptx")).unwrap();
    assert!(
        ptx.contains("// reef-cpu: library="),
        "reef-compile annotates the PTX"
    );
    for k in kernels {
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

    // One allocation per storage; weights and inputs copied in.
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
    // Two inferences on the same buffers, with different inputs: the
    // second's input copies and kernels follow the first's queued CPU work.
    for (round, refd) in refs.iter().enumerate() {
        for (i, s) in idx(&sched["inputs"]).into_iter().enumerate() {
            let x = std::fs::read(refd.join(format!("input{i}.bin"))).unwrap();
            assert_eq!(x.len(), storages[s].1);
            assert_eq!(
                unsafe { cuMemcpyHtoD_v2(storages[s].0, x.as_ptr() as *const c_void, x.len()) },
                OK
            );
        }

        for k in kernels {
            let name = CString::new(k["name"].as_str().unwrap()).unwrap();
            let mut f = null_mut();
            assert_eq!(
                unsafe { cuModuleGetFunction(&mut f, module, name.as_ptr()) },
                OK
            );
            let mut ptrs: Vec<u64> = idx(&k["args"]).iter().map(|&s| storages[s].0).collect();
            let mut params: Vec<*mut c_void> = ptrs
                .iter_mut()
                .map(|p| p as *mut u64 as *mut c_void)
                .collect();
            let lp = idx(&k["launch_params"]);
            let r = unsafe {
                cuLaunchKernel(
                    f,
                    lp[0] as u32,
                    lp[1] as u32,
                    lp[2] as u32,
                    lp[3] as u32,
                    lp[4] as u32,
                    lp[5] as u32,
                    k["dynamic_shared_bytes"].as_u64().unwrap() as u32,
                    stream,
                    params.as_mut_ptr(),
                    null_mut(),
                )
            };
            assert_eq!(r, OK, "launch {name:?}");
        }
        assert_eq!(cuStreamSynchronize(stream), OK);
        assert_eq!(
            device_stats(0).unwrap().cpu_calls,
            (round + 1) as u64 * kernels.len() as u64,
            "every kernel computed by its CPU build"
        );

        for (i, s) in idx(&sched["outputs"]).into_iter().enumerate() {
            let mut got = vec![0u8; storages[s].1];
            assert_eq!(
                unsafe {
                    cuMemcpyDtoH_v2(got.as_mut_ptr() as *mut c_void, storages[s].0, got.len())
                },
                OK
            );
            let want = f32s(&std::fs::read(refd.join(format!("output{i}.bin"))).unwrap());
            let got = f32s(&got);
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    ((g - w).abs() as f64) <= 1e-4 * w.abs() as f64 + 1e-5,
                    "round {round} output {i}: {got:?} against ONNX Runtime {want:?}"
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}
