// Writes a small reef-trace to stdout with reef_trace.hpp; the Rust test
// trap-handler/tests/nvbit_tool.rs compiles this with g++, runs it and reads
// the output with reef-check-idem's trace parser.
#include <iostream>
#include <stdexcept>

#include "../reef_trace.hpp"

int main() {
    reef::TraceWriter w(std::cout, "tiny \"net\"");
    // Per-thread 4-byte accesses as the device records them: adjacent and
    // overlapping ones must merge into one range per buffer.
    std::vector<reef::Range> reads, writes;
    for (uint64_t t = 0; t < 64; ++t) reads.push_back({0x7f0000001000ull + 4 * t, 4});
    reads.push_back({0x7f0000001000ull, 16});  // overlaps the first accesses
    reads.push_back({0x7f0000002000ull, 4});   // a second buffer
    for (uint64_t t = 0; t < 32; ++t) writes.push_back({0x7f0000003000ull + 8 * t, 8});
    w.op("memcpy", "cuMemcpyHtoD_v2", {}, {{0x7f0000001000ull, 256}});
    w.op("kernel", "_Z5densePKfS0_Pf", reads, writes);
    w.op("memset", "cuMemsetD32_v2", {}, {{0x7f0000004000ull, 0}, {0x7f0000004000ull, 64}});
    // In-place kernel: reads and writes the same bytes (non-idempotent).
    w.op("kernel", "relu_inplace\tv2", {{0x7f0000003000ull, 256}}, {{0x7f0000003000ull, 256}});
    try {
        reef::coalesce({{~0ull - 3, 8}});
        std::cerr << "overflowing range accepted\n";
        return 1;
    } catch (const std::overflow_error &) {
    }
    return 0;
}
