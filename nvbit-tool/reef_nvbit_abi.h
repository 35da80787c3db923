// Layout shared by the device functions (inject_funcs.cu) and the host tool
// (reef_nvbit.cu): the per-launch access buffer of trace mode.
#pragma once
#include <stdint.h>

#define REEF_ACCESS_STORE 0x80000000u
#define REEF_ACCESS_LOAD 0x40000000u
#define REEF_ACCESS_SIZE_MASK 0x3fffffffu

// One global-memory access of one thread: address and size in bytes, with
// REEF_ACCESS_LOAD and/or REEF_ACCESS_STORE (atomics set both).
struct reef_access {
    uint64_t addr;
    uint32_t size_and_kind;
    uint32_t pad;
};

// Lives in device memory; `count` may exceed `capacity`, which tells the
// host that records were dropped (it then fails instead of writing a
// trace that misses accesses).
struct reef_access_buffer {
    unsigned long long count;
    unsigned long long capacity;
    reef_access records[1];  // `capacity` entries follow
};
