// REEF's NVBit tool (REEF §4.6 "Binary instrumentation"), loaded into an
// inference process with LD_PRELOAD=reef_nvbit.so. Two modes, chosen by
// REEF_NVBIT_MODE:
//
//   preempt (default)  injects the preemptor of Fig. 8 (lines 1-3) before
//                      the first instruction of every kernel, closed-source
//                      ones included (cuDNN, TensorRT): a kernel launched
//                      while the preempt flag is set exits at once, and
//                      every kernel records its execution index.
//   trace              records every global-memory access of every kernel,
//                      plus memcpy/memset, into the reef-trace file that
//                      reef-check-idem analyses (§4.4).
//
// Environment:
//   REEF_NVBIT_MODE      preempt | trace
//   REEF_FLAG_ADDR       device address of the 32-bit preempt flag (hex);
//   REEF_INDEX_ADDR      ... and of the 32-bit global execution index. When
//                        unset the tool allocates both per context; the REEF
//                        client finds them with dlsym("reef_nvbit_addresses").
//   REEF_TRACE_FILE      trace output path (trace mode, required)
//   REEF_TRACE_MODEL     model name for the trace header (default "model")
//   REEF_TRACE_CAPACITY  accesses buffered per launch (default 1<<24)
//
// Builds only where NVBit is installed (make NVBIT_PATH=...); see README.md
// for what was and was not verified without a GPU.

#include <cuda.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "nvbit.h"
#include "nvbit_tool.h"
#include "reef_nvbit_abi.h"
#include "reef_trace.hpp"

namespace {

enum class Mode { Preempt, Trace };

struct CtxState {
    CUdeviceptr flag = 0;   // preempt: 32-bit flag
    CUdeviceptr index = 0;  // preempt: 32-bit global execution index
    CUdeviceptr buf = 0;    // trace: reef_access_buffer
};

Mode mode = Mode::Preempt;
uint64_t env_flag = 0, env_index = 0;
uint64_t capacity = 1ull << 24;
std::string trace_path, trace_model = "model";
std::unique_ptr<std::ofstream> trace_file;
std::unique_ptr<reef::TraceWriter> trace;

std::mutex mu;
std::map<CUcontext, CtxState> contexts;
std::set<CUfunction> instrumented;
uint32_t next_exec_idx = 0;  // Fig. 8 lines 6-8: host-side execution index
// Set while the tool itself calls the driver, so its own calls are not
// instrumented or traced. Thread-local and tested before `mu` is taken:
// the driver calls back into nvbit_at_cuda_event on the calling thread,
// which already holds `mu`.
thread_local bool in_tool = false;

[[noreturn]] void die(const char *what, const char *fix) {
    fprintf(stderr, "reef_nvbit: error: %s; %s\n", what, fix);
    exit(1);
}

void check(CUresult r, const char *call) {
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        cuGetErrorName(r, &name);
        fprintf(stderr, "reef_nvbit: error: %s failed with %s\n", call, name);
        exit(1);
    }
}

uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end = nullptr;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || *end) {
        fprintf(stderr, "reef_nvbit: error: %s=%s is not a number (write 0x... or decimal)\n",
                name, v);
        exit(1);
    }
    return x;
}

CtxState &state(CUcontext ctx) {
    auto it = contexts.find(ctx);
    if (it == contexts.end()) die("CUDA context not initialised by the tool", "report a bug");
    return it->second;
}

// Inserts the preemptor before the kernel's first instruction. Device
// functions it calls are left alone: the check belongs at kernel entry.
void instrument_preempt(CUcontext ctx, CUfunction f, const CtxState &st) {
    const std::vector<Instr *> &instrs = nvbit_get_instrs(ctx, f);
    if (instrs.empty()) return;
    Instr *first = instrs[0];
    nvbit_insert_call(first, "reef_preemptor", IPOINT_BEFORE);
    nvbit_add_call_arg_guard_pred_val(first);
    nvbit_add_call_arg_const_val64(first, st.flag);
    nvbit_add_call_arg_const_val64(first, st.index);
    nvbit_add_call_arg_launch_val32(first, 0);  // this launch's execution index
}

// Inserts a recording call before every global (or generic) memory access
// of the kernel and of every device function it may call.
void instrument_trace(CUcontext ctx, CUfunction kernel, const CtxState &st) {
    std::vector<CUfunction> fs = nvbit_get_related_functions(ctx, kernel);
    fs.push_back(kernel);
    for (CUfunction f : fs) {
        if (f != kernel && !instrumented.insert(f).second) continue;
        for (Instr *i : nvbit_get_instrs(ctx, f)) {
            auto space = i->getMemorySpace();
            if (space != InstrType::MemorySpace::GLOBAL &&
                space != InstrType::MemorySpace::GENERIC &&
                space != InstrType::MemorySpace::GLOBAL_TO_SHARED)
                continue;
            uint32_t kind = (i->isLoad() ? REEF_ACCESS_LOAD : 0) |
                            (i->isStore() ? REEF_ACCESS_STORE : 0);
            if (!kind) continue;
            int mref = 0;
            for (int op = 0; op < i->getNumOperands(); ++op) {
                if (i->getOperand(op)->type != InstrType::OperandType::MREF) continue;
                nvbit_insert_call(i, "reef_record_access", IPOINT_BEFORE);
                nvbit_add_call_arg_guard_pred_val(i);
                nvbit_add_call_arg_mref_addr64(i, mref++);
                nvbit_add_call_arg_const_val32(i, (uint32_t)i->getSize());
                nvbit_add_call_arg_const_val32(i, kind);
                nvbit_add_call_arg_const_val64(i, st.buf);
            }
        }
    }
}

void launch(CUcontext ctx, CUfunction f, int is_exit) {
    CtxState &st = state(ctx);
    if (!is_exit) {
        if (instrumented.insert(f).second) {
            if (mode == Mode::Preempt) instrument_preempt(ctx, f, st);
            else instrument_trace(ctx, f, st);
        }
        if (mode == Mode::Preempt) {
            uint32_t idx = next_exec_idx++;
            nvbit_set_at_launch(ctx, f, &idx, sizeof idx);
        } else {
            unsigned long long zero = 0;
            in_tool = true;
            check(cuMemcpyHtoD(st.buf, &zero, sizeof zero), "cuMemcpyHtoD(count)");
            in_tool = false;
        }
        nvbit_enable_instrumented(ctx, f, true);
        return;
    }
    if (mode != Mode::Trace) return;
    in_tool = true;
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    unsigned long long count = 0;
    check(cuMemcpyDtoH(&count, st.buf, sizeof count), "cuMemcpyDtoH(count)");
    if (count > capacity) {
        fprintf(stderr,
                "reef_nvbit: error: kernel %s made %llu global accesses, more than "
                "REEF_TRACE_CAPACITY=%llu; raise REEF_TRACE_CAPACITY and rerun\n",
                nvbit_get_func_name(ctx, f), count, (unsigned long long)capacity);
        exit(1);
    }
    std::vector<reef_access> recs(count);
    if (count)
        check(cuMemcpyDtoH(recs.data(), st.buf + offsetof(reef_access_buffer, records),
                           count * sizeof(reef_access)),
              "cuMemcpyDtoH(records)");
    in_tool = false;
    std::vector<reef::Range> reads, writes;
    for (const reef_access &a : recs) {
        reef::Range r{a.addr, a.size_and_kind & REEF_ACCESS_SIZE_MASK};
        if (a.size_and_kind & REEF_ACCESS_LOAD) reads.push_back(r);
        if (a.size_and_kind & REEF_ACCESS_STORE) writes.push_back(r);
    }
    trace->op("kernel", nvbit_get_func_name(ctx, f, true), std::move(reads), std::move(writes));
}

bool is_device_pointer(CUdeviceptr p) {
    CUmemorytype t;
    in_tool = true;
    CUresult r = cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
    in_tool = false;
    return r == CUDA_SUCCESS && (t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED);
}

void copy(const char *name, CUdeviceptr dst, bool dst_dev, CUdeviceptr src, bool src_dev,
          size_t n) {
    std::vector<reef::Range> reads, writes;
    if (src_dev) reads.push_back({src, n});
    if (dst_dev) writes.push_back({dst, n});
    trace->op("memcpy", name, reads, writes);
}

void set(const char *name, CUdeviceptr dst, size_t bytes) {
    trace->op("memset", name, {}, {{dst, bytes}});
}

// memcpy/memset are operations of the trace too (§4.4): they often make a
// kernel group idempotent by overwriting its inputs.
void record_memory_op(nvbit_api_cuda_t cbid, const char *name, void *params) {
    switch (cbid) {
    case API_CUDA_cuMemcpyHtoD_v2: {
        auto *p = (cuMemcpyHtoD_v2_params *)params;
        copy(name, p->dstDevice, true, 0, false, p->ByteCount);
        break;
    }
    case API_CUDA_cuMemcpyHtoDAsync_v2: {
        auto *p = (cuMemcpyHtoDAsync_v2_params *)params;
        copy(name, p->dstDevice, true, 0, false, p->ByteCount);
        break;
    }
    case API_CUDA_cuMemcpyDtoH_v2: {
        auto *p = (cuMemcpyDtoH_v2_params *)params;
        copy(name, 0, false, p->srcDevice, true, p->ByteCount);
        break;
    }
    case API_CUDA_cuMemcpyDtoHAsync_v2: {
        auto *p = (cuMemcpyDtoHAsync_v2_params *)params;
        copy(name, 0, false, p->srcDevice, true, p->ByteCount);
        break;
    }
    case API_CUDA_cuMemcpyDtoD_v2: {
        auto *p = (cuMemcpyDtoD_v2_params *)params;
        copy(name, p->dstDevice, true, p->srcDevice, true, p->ByteCount);
        break;
    }
    case API_CUDA_cuMemcpyDtoDAsync_v2: {
        auto *p = (cuMemcpyDtoDAsync_v2_params *)params;
        copy(name, p->dstDevice, true, p->srcDevice, true, p->ByteCount);
        break;
    }
    case API_CUDA_cuMemcpy: {  // unified addressing: ask the driver
        auto *p = (cuMemcpy_params *)params;
        copy(name, p->dst, is_device_pointer(p->dst), p->src, is_device_pointer(p->src),
             p->ByteCount);
        break;
    }
    case API_CUDA_cuMemcpyAsync: {
        auto *p = (cuMemcpyAsync_params *)params;
        copy(name, p->dst, is_device_pointer(p->dst), p->src, is_device_pointer(p->src),
             p->ByteCount);
        break;
    }
    case API_CUDA_cuMemsetD8_v2: {
        auto *p = (cuMemsetD8_v2_params *)params;
        set(name, p->dstDevice, p->N);
        break;
    }
    case API_CUDA_cuMemsetD8Async: {
        auto *p = (cuMemsetD8Async_params *)params;
        set(name, p->dstDevice, p->N);
        break;
    }
    case API_CUDA_cuMemsetD32_v2: {
        auto *p = (cuMemsetD32_v2_params *)params;
        set(name, p->dstDevice, 4 * p->N);
        break;
    }
    case API_CUDA_cuMemsetD32Async: {
        auto *p = (cuMemsetD32Async_params *)params;
        set(name, p->dstDevice, 4 * p->N);
        break;
    }
    default:
        break;
    }
}

}  // namespace

// For the REEF client runtime in the same process (dlsym): where the flag
// and the global execution index of the current context live.
extern "C" int reef_nvbit_addresses(uint64_t *flag, uint64_t *index) {
    CUcontext ctx;
    in_tool = true;
    CUresult r = cuCtxGetCurrent(&ctx);
    in_tool = false;
    std::lock_guard<std::mutex> g(mu);
    if (r != CUDA_SUCCESS || !contexts.count(ctx)) return -1;
    *flag = contexts[ctx].flag;
    *index = contexts[ctx].index;
    return 0;
}

// Fig. 8 line 18: a restore relaunches from `start_idx`, so the next kernel
// launched gets that execution index.
extern "C" void reef_nvbit_set_next_exec_index(uint32_t idx) {
    std::lock_guard<std::mutex> g(mu);
    next_exec_idx = idx;
}

void nvbit_at_init() {
    const char *m = getenv("REEF_NVBIT_MODE");
    if (!m || !*m || !strcmp(m, "preempt")) {
        mode = Mode::Preempt;
    } else if (!strcmp(m, "trace")) {
        mode = Mode::Trace;
    } else {
        fprintf(stderr, "reef_nvbit: error: REEF_NVBIT_MODE=%s; use preempt or trace\n", m);
        exit(1);
    }
    env_flag = env_u64("REEF_FLAG_ADDR", 0);
    env_index = env_u64("REEF_INDEX_ADDR", 0);
    if ((env_flag == 0) != (env_index == 0))
        die("only one of REEF_FLAG_ADDR and REEF_INDEX_ADDR is set", "set both or neither");
    capacity = env_u64("REEF_TRACE_CAPACITY", capacity);
    if (mode == Mode::Trace) {
        const char *p = getenv("REEF_TRACE_FILE");
        if (!p || !*p) die("trace mode needs REEF_TRACE_FILE", "set it to the output path");
        trace_path = p;
        if (const char *name = getenv("REEF_TRACE_MODEL")) trace_model = name;
        trace_file.reset(new std::ofstream(trace_path));
        if (!*trace_file) die("cannot open REEF_TRACE_FILE for writing", trace_path.c_str());
        trace.reset(new reef::TraceWriter(*trace_file, trace_model));
    }
}

void nvbit_at_ctx_init(CUcontext ctx) {
    std::lock_guard<std::mutex> g(mu);
    CtxState st;
    in_tool = true;
    if (mode == Mode::Preempt) {
        if (env_flag) {
            st.flag = env_flag;
            st.index = env_index;
        } else {
            check(cuMemAlloc(&st.flag, 2 * sizeof(uint32_t)), "cuMemAlloc(flag)");
            check(cuMemsetD32(st.flag, 0, 2), "cuMemsetD32(flag)");
            st.index = st.flag + sizeof(uint32_t);
        }
    } else {
        size_t bytes = offsetof(reef_access_buffer, records) + capacity * sizeof(reef_access);
        check(cuMemAlloc(&st.buf, bytes), "cuMemAlloc(trace buffer)");
        unsigned long long hdr[2] = {0, capacity};
        check(cuMemcpyHtoD(st.buf, hdr, sizeof hdr), "cuMemcpyHtoD(trace buffer)");
    }
    in_tool = false;
    contexts[ctx] = st;
}

void nvbit_at_cuda_event(CUcontext ctx, int is_exit, nvbit_api_cuda_t cbid, const char *name,
                         void *params, CUresult *pStatus) {
    if (in_tool) return;
    std::lock_guard<std::mutex> g(mu);
    switch (cbid) {
    case API_CUDA_cuLaunchKernel:
    case API_CUDA_cuLaunchKernel_ptsz:
        launch(ctx, ((cuLaunchKernel_params *)params)->f, is_exit);
        return;
    case API_CUDA_cuLaunchKernelEx:
    case API_CUDA_cuLaunchKernelEx_ptsz:
        launch(ctx, ((cuLaunchKernelEx_params *)params)->f, is_exit);
        return;
    default:
        if (mode == Mode::Trace && is_exit && *pStatus == CUDA_SUCCESS)
            record_memory_op(cbid, name, params);
    }
}

void nvbit_at_term() {
    std::lock_guard<std::mutex> g(mu);
    if (trace_file) trace_file->flush();
}
