; The level-2 probe kernel of the kfd:N launch path (device/hip/mod.rs):
; REEF's preempt-flag check as reef-compile injects it into every kernel
; (compile/reef_compile/amd.py inject_preempt_check), and nothing else.
; Built into probe.gfx906.hsaco and probe.gfx90a.hsaco by build.sh with
; Debian's llc-19 and ld.lld-19; reefd/tests/hip_launch.rs rebuilds them and
; compares the bytes.
target triple = "amdgcn-amd-amdhsa"

@reef_preempt_flag = addrspace(1) externally_initialized global i32 0, align 4
@reef_exec_index = addrspace(1) externally_initialized global i32 0, align 4

define amdgpu_kernel void @reef_probe(i32 %__reef_exec_idx) #0 {
reef.check:
  %reef.flag = load volatile i32, ptr addrspace(1) @reef_preempt_flag, align 4
  %reef.stop = icmp ne i32 %reef.flag, 0
  br i1 %reef.stop, label %reef.exit, label %reef.pass
reef.exit:
  ret void
reef.pass:
  store volatile i32 %__reef_exec_idx, ptr addrspace(1) @reef_exec_index, align 4
  ret void
}

attributes #0 = { "amdgpu-flat-work-group-size"="1,64" "amdgpu-no-implicitarg-ptr" }

!llvm.module.flags = !{!0}
!0 = !{i32 1, !"amdhsa_code_object_version", i32 400}
