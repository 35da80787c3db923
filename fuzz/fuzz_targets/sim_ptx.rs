//! The PTX parser of reef-libcuda-sim (`reef_libcuda_sim::ptx::parse`,
//! what the simulated driver runs at `cuModuleLoadData`): entries, their
//! parameter sizes, `.global`s and `// reef-sim:` annotations.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let _ = reef_libcuda_sim::ptx::parse(src);
});
