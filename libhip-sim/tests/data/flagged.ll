; A two-kernel module for the simulated libamdhip64's tests, compiled by
; tests/hip_api.rs with Debian's llc-19 and ld.lld-19 into a real gfx906
; code object (code object v4, as reef-compile writes). Each kernel begins
; with REEF's preempt-flag check (REEF §4.3 Fig. 8 lines 1-2): a block that
; finds reef_preempt_flag set returns before touching memory.
target triple = "amdgcn-amd-amdhsa"

@reef_preempt_flag = addrspace(1) externally_initialized global i32 0, align 4

declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()

; b[i] = a[i] + 1
define amdgpu_kernel void @k_add(ptr addrspace(1) %a, ptr addrspace(1) %b, i32 %n) #0 {
entry:
  %f = load volatile i32, ptr addrspace(1) @reef_preempt_flag, align 4
  %stop = icmp ne i32 %f, 0
  br i1 %stop, label %exit, label %body
body:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = shl i32 %g, 6
  %i = add i32 %base, %t
  %in = icmp slt i32 %i, %n
  br i1 %in, label %work, label %exit
work:
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %v = load float, ptr addrspace(1) %pa, align 4
  %w = fadd float %v, 1.0
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %i
  store float %w, ptr addrspace(1) %pb, align 4
  br label %exit
exit:
  ret void
}

; b[i] = a[i] * 2
define amdgpu_kernel void @k_mul(ptr addrspace(1) %a, ptr addrspace(1) %b, i32 %n) #0 {
entry:
  %f = load volatile i32, ptr addrspace(1) @reef_preempt_flag, align 4
  %stop = icmp ne i32 %f, 0
  br i1 %stop, label %exit, label %body
body:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = shl i32 %g, 6
  %i = add i32 %base, %t
  %in = icmp slt i32 %i, %n
  br i1 %in, label %work, label %exit
work:
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %v = load float, ptr addrspace(1) %pa, align 4
  %w = fmul float %v, 2.0
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %i
  store float %w, ptr addrspace(1) %pb, align 4
  br label %exit
exit:
  ret void
}

attributes #0 = { "amdgpu-flat-work-group-size"="1,64" "amdgpu-no-implicitarg-ptr" }

!llvm.module.flags = !{!0}
!0 = !{i32 1, !"amdhsa_code_object_version", i32 400}
