//! reef-model's schedule reader (`Model::parse`, what `Model::load` runs on
//! a model directory's `NAME.json` and `NAME.profile.json`): the measured
//! REEF schedules of `../shared/models` and reef-compile's
//! `format: reef-compile/1`.
//!
//! Input: the schedule text, then optionally a NUL byte and the profile
//! text. A model that loads is then asked what the simulator asks of it
//! (block counts, block durations for 1..=64 co-resident blocks).
#![no_main]

use libfuzzer_sys::fuzz_target;
use reef_model::Model;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (schedule, profile) = match text.split_once('\0') {
        Some((s, p)) => (s, Some((Path::new("models/fuzz/fuzz.profile.json"), p))),
        None => (text, None),
    };
    let Ok(m) = Model::parse(
        "fuzz",
        Path::new("models/fuzz/fuzz.json"),
        schedule,
        profile,
    ) else {
        return;
    };
    let _ = m.total_blocks();
    let _ = m.measured_latency_ns();
    for k in &m.kernels {
        let _ = (k.num_blocks(), k.threads_per_block());
        if let Some(p) = &k.profile {
            for resident in 0..=64 {
                let _ = p.block_ns(resident);
            }
        }
    }
});
