//! reef-check-idem's ONNX reader (`reef_idem::onnx::from_bytes`: the
//! protobuf decoding, shape inference and lowering to a trace that
//! `reef-check-idem MODEL.onnx` runs), then the idempotence analysis of
//! the trace it produced.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reef_idem::onnx::{from_bytes, Options};

fuzz_target!(|data: &[u8]| {
    let Ok(trace) = from_bytes(data, "fuzz.onnx", "fuzz", &Options::default()) else {
        return;
    };
    // Keep each execution short: the analysis is linear in the trace, and
    // a model of many ops says nothing a smaller one does not.
    if trace.ops.len() <= 4096 {
        let _ = reef_idem::analyze(&trace);
    }
});
