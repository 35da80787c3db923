//! The reef-compile extensions of the schedule format (docs/compile.md):
//! recorded read/write sets, per-kernel work and per-architecture resources.

use reef_model::{KernelResources, KernelWork, Model};
use std::path::Path;

fn schedule(kernel_extra: &str, top_extra: &str) -> String {
    format!(
        r#"{{
  "storage": [
    {{"name": "x", "size": 4, "stype": "float32"}},
    {{"name": "w", "size": 4, "stype": "float32"}},
    {{"name": "y", "size": 4, "stype": "float32"}}
  ],
  "kernels": [
    {{"name": "k", "launch_params": [1,1,1,32,1,1], "args": [2, 0, 1]{kernel_extra}}}
  ],
  "args": [0, 1]{top_extra}
}}"#
    )
}

const COMPILED_TOP: &str = r#",
  "format": "reef-compile/1", "archs": ["sm_80"], "ptx": {"sm_80": "kernels.sm_80.ptx"},
  "inputs": [0], "params": [1], "outputs": [2],
  "resources": {"sm_80": {"k": {"registers": 40, "shared_static": 512, "stack": 0,
                                "spill_stores": 0, "spill_loads": 0, "constant": 368}}}"#;

fn parse(text: &str) -> Result<Model, String> {
    Model::parse("m", Path::new("/d/m/m.json"), text, None).map_err(|e| e.to_string())
}

#[test]
fn recorded_read_write_sets_replace_the_tvm_convention() {
    // The written buffer is the first argument: the TVM convention (last arg
    // written) would get this wrong.
    let m = parse(&schedule(
        r#", "reads": [0, 1], "writes": [2], "flops": 96, "bytes_read": 32, "bytes_written": 16"#,
        COMPILED_TOP,
    ))
    .unwrap();
    let k = &m.kernels[0];
    assert_eq!(k.reads, vec![0, 1]);
    assert_eq!(k.writes, vec![2]);
    assert_eq!(
        k.work,
        Some(KernelWork {
            flops: 96,
            bytes_read: 32,
            bytes_written: 16
        })
    );
    assert_eq!(
        k.resources["sm_80"],
        KernelResources {
            registers: 40,
            shared_static: 512,
            stack: 0,
            spill_stores: 0,
            spill_loads: 0,
            mma: 0
        }
    );
    let c = m.compiled.as_ref().unwrap();
    assert_eq!(c.archs, vec!["sm_80".to_string()]);
    assert_eq!(c.ptx["sm_80"], Path::new("/d/m/kernels.sm_80.ptx"));
    assert_eq!(
        (c.inputs.clone(), c.params.clone(), c.outputs.clone()),
        (vec![0], vec![1], vec![2])
    );
}

#[test]
fn without_recorded_sets_the_last_argument_is_written() {
    let m = parse(&schedule("", "")).unwrap();
    assert_eq!(m.kernels[0].reads, vec![2, 0]);
    assert_eq!(m.kernels[0].writes, vec![1]);
    assert!(m.compiled.is_none() && m.kernels[0].work.is_none());
}

#[test]
fn bad_compiled_schedules_are_refused_with_the_item() {
    let e = parse(&schedule(r#", "reads": [0], "writes": [5]"#, "")).unwrap_err();
    assert!(
        e.contains("writes[0] storage index 5 is out of range"),
        "{e}"
    );
    let e = parse(&schedule(r#", "reads": [0], "writes": []"#, "")).unwrap_err();
    assert!(e.contains("writes is empty"), "{e}");
    let e = parse(&schedule(r#", "reads": [0]"#, "")).unwrap_err();
    assert!(e.contains("only one of reads/writes"), "{e}");
    let e = parse(&schedule(
        r#", "reads": [0], "writes": [2], "flops": 1"#,
        "",
    ))
    .unwrap_err();
    assert!(e.contains("work needs"), "{e}");
    // A buffer the kernel does not take as an argument.
    let e = parse(
        &schedule(r#", "reads": [0], "writes": [2]"#, "")
            .replace(r#""args": [2, 0, 1]"#, r#""args": [2, 1]"#),
    )
    .unwrap_err();
    assert!(e.contains("is not one of the kernel's args"), "{e}");
    let e = parse(&schedule(
        "",
        &COMPILED_TOP.replace(r#""k": {"#, r#""other": {"#),
    ))
    .unwrap_err();
    assert!(e.contains("has no entry in resources[sm_80]"), "{e}");
    let e = parse(&schedule(
        "",
        &COMPILED_TOP.replace("reef-compile/1", "reef-compile/9"),
    ))
    .unwrap_err();
    assert!(e.contains("reef-compile/1"), "{e}");
}

#[test]
fn amd_resources_load_beside_the_ptx_architectures() {
    // reef-compile --arch sm_80 --arch gfx906: the AMD architecture has a
    // code object, not PTX, so it is not in `archs`; its resources (the
    // AMDHSA metadata plus registers/shared_static/stack) load like ptxas's.
    let top = COMPILED_TOP.replace(
        r#""constant": 368}}}"#,
        r#""constant": 368}},
        "gfx906": {"k": {"vgpr_count": 24, "sgpr_count": 10, "agpr_count": 0,
                         "group_segment_fixed_size": 640, "private_segment_fixed_size": 0,
                         "wavefront_size": 64, "kernarg_segment_size": 24,
                         "max_flat_workgroup_size": 32, "vgpr_spill_count": 0,
                         "sgpr_spill_count": 0, "symbol": "k.kd",
                         "registers": 24, "shared_static": 640, "stack": 0}}},
  "amd_archs": ["gfx906"],
  "code_objects": {"gfx906": {"file": "kernels.gfx906.hsaco",
                              "target_id": "amdgcn-amd-amdhsa--gfx906"}}"#,
    );
    let m = parse(&schedule(
        r#", "reads": [0, 1], "writes": [2], "flops": 96, "bytes_read": 32, "bytes_written": 16"#,
        &top,
    ))
    .unwrap();
    let k = &m.kernels[0];
    assert_eq!(
        k.resources["gfx906"],
        KernelResources {
            registers: 24,
            shared_static: 640,
            stack: 0,
            spill_stores: 0,
            spill_loads: 0,
            mma: 0
        }
    );
    assert_eq!(k.resources["sm_80"].registers, 40);
    assert_eq!(m.compiled.unwrap().archs, vec!["sm_80".to_string()]);
}
