// Device functions the REEF NVBit tool injects into closed-source kernels
// (REEF §4.6 "Binary instrumentation"; the preemptor of Fig. 8, lines 1-3).
//
// NVBit compiles these once, offline, and calls them from trampolines it
// patches into every kernel at load time: `reef_preemptor` before the first
// instruction of each kernel (preempt mode), `reef_record_access` before
// every global-memory instruction (trace mode, the reef-trace recorder that
// reef-check-idem reads).
//
// Build flags are NVBit's own for injected functions (see Makefile):
//   nvcc -Xptxas -astoolspatch --keep-device-functions -maxrregcount=24 ...
// CI compiles this file for sm_75..sm_90 and checks the SASS with nvdisasm
// (trap-handler/tests/nvbit_tool.rs); it does not need NVBit's headers.

#include <stdint.h>

#include "reef_nvbit_abi.h"

// Fig. 8 lines 1-3: a kernel evicted from the device queue (flag set) ends
// at once; otherwise it records its execution index for restore (§4.4).
// `pred` is the guard predicate of the instrumented instruction, as NVBit
// passes it; the first instruction of a kernel is never predicated off, but
// a thread whose guard is false must not act for it.
extern "C" __device__ __noinline__ void reef_preemptor(int pred, uint64_t flag_addr,
                                                       uint64_t index_addr, uint32_t exec_idx) {
    if (!pred) return;
    uint32_t flag;
    // A volatile global load (LDG.E.STRONG.SYS): sees the host's write of
    // the flag while kernels run, never a cached copy.
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(flag) : "l"(flag_addr) : "memory");
    if (flag != 0) {
        // `exit` ends the thread from inside the injected call: no register
        // or shared-memory state is saved, as for killed kernels (§4.6).
        asm volatile("exit;");
    }
    asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(index_addr), "r"(exec_idx) : "memory");
}

// Trace mode: append one access to the launch's record buffer. `kind` is
// REEF_ACCESS_LOAD and/or REEF_ACCESS_STORE. Generic
// addresses that do not point into global memory (local, shared) are not
// part of the reef-trace (it lists device-memory ranges only).
extern "C" __device__ __noinline__ void reef_record_access(int pred, uint64_t addr, uint32_t size,
                                                           uint32_t kind, uint64_t buf_addr) {
    if (!pred) return;
    if (!__isGlobal(reinterpret_cast<const void *>(addr))) return;
    auto *buf = reinterpret_cast<reef_access_buffer *>(buf_addr);
    unsigned long long slot;
    // The buffer is device (global) memory: a global atomic, no generic
    // shared-memory fallback path.
    asm volatile("atom.global.add.u64 %0, [%1], 1;" : "=l"(slot) : "l"(&buf->count) : "memory");
    if (slot < buf->capacity) {
        reef_access a;
        a.addr = addr;
        a.size_and_kind = (size & REEF_ACCESS_SIZE_MASK) | kind;
        a.pad = 0;
        buf->records[slot] = a;
    }
}
