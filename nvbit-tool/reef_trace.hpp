// Writer for the reef-trace file (JSON lines) that reef-check-idem reads
// (REEF §4.4 "Checking multi-kernel idempotence": a trace of the memory
// addresses each GPU operation accesses; format in docs/idempotence.md):
//
//   {"format":"reef-trace","version":1,"model":"NAME"}
//   {"op":"kernel","name":"...","reads":[[addr,len],...],"writes":[[addr,len],...]}
//
// Header-only and independent of NVBit, so CI compiles and tests it with
// g++ (trap-handler/tests/nvbit_tool.rs) and parses the output with
// reef-check-idem's own reader.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace reef {

struct Range {
    uint64_t addr;
    uint64_t len;
};

// Sorts byte ranges and merges overlapping or adjacent ones; drops empty
// ranges. Throws std::overflow_error for a range past the 64-bit space.
inline std::vector<Range> coalesce(std::vector<Range> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](const Range &r) { return r.len == 0; }),
            v.end());
    for (const Range &r : v) {
        if (r.addr + r.len < r.addr) {
            throw std::overflow_error("reef-trace: range wraps past the 64-bit address space");
        }
    }
    std::sort(v.begin(), v.end(),
              [](const Range &a, const Range &b) { return a.addr < b.addr; });
    std::vector<Range> out;
    for (const Range &r : v) {
        if (!out.empty() && r.addr <= out.back().addr + out.back().len) {
            uint64_t end = std::max(out.back().addr + out.back().len, r.addr + r.len);
            out.back().len = end - out.back().addr;
        } else {
            out.push_back(r);
        }
    }
    return out;
}

// A JSON string literal for `s` (quotes, backslashes and control
// characters escaped; kernel names are ASCII but may hold anything).
inline std::string json_string(const std::string &s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
        }
    }
    return out + "\"";
}

class TraceWriter {
  public:
    // Writes the header line.
    TraceWriter(std::ostream &out, const std::string &model) : out_(out) {
        out_ << "{\"format\":\"reef-trace\",\"version\":1,\"model\":" << json_string(model)
             << "}\n";
    }

    // One operation: `kind` is "kernel", "memcpy" or "memset". Ranges are
    // coalesced first; within an operation reads count before writes.
    void op(const char *kind, const std::string &name, std::vector<Range> reads,
            std::vector<Range> writes) {
        out_ << "{\"op\":" << json_string(kind) << ",\"name\":" << json_string(name)
             << ",\"reads\":";
        ranges(coalesce(std::move(reads)));
        out_ << ",\"writes\":";
        ranges(coalesce(std::move(writes)));
        out_ << "}\n";
        out_.flush();
    }

  private:
    void ranges(const std::vector<Range> &v) {
        out_ << '[';
        for (size_t i = 0; i < v.size(); ++i) {
            out_ << (i ? "," : "") << '[' << v[i].addr << ',' << v[i].len << ']';
        }
        out_ << ']';
    }
    std::ostream &out_;
};

}  // namespace reef
