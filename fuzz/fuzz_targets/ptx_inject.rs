//! reef-ptx-inject's transformer (`reef_trap::ptx::inject`): tokenizes a
//! PTX module and inserts the preemptor into every `.entry`. Besides not
//! panicking: the output holds each entry it reports, and a module with
//! injected entries is refused when injected again (its entries already
//! have the index parameter).
#![no_main]

use libfuzzer_sys::fuzz_target;
use reef_trap::ptx::{inject, InjectOptions};

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let opts = InjectOptions::default();
    let Ok(out) = inject(src, "fuzz.ptx", &opts) else {
        return;
    };
    for e in &out.entries {
        assert!(
            out.ptx.contains(e.as_str()),
            "entry {e} missing from the output"
        );
    }
    if !out.entries.is_empty() {
        assert!(inject(&out.ptx, "fuzz.ptx", &opts).is_err());
    }
});
