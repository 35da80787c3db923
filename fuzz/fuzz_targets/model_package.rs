//! reef-model's package reader (`Package::read`, what a GPU device loads a
//! model directory with) on a hand-written `model.toml`: the manifest's
//! storages, roles, kernels and arguments, its weights file and code file
//! checked against each other.
//!
//! Input: the manifest text. The directory holds it as `model.toml`, a
//! one-line `k.ptx` and a 64-byte `w.bin`, so a manifest naming those
//! reaches the weight and argument checks; one naming other files meets
//! the bounded reads' refusals.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reef_model::package::{Limits, Package};
use std::sync::OnceLock;

fn dir() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("reef-fuzz-package-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("k.ptx"), ".version 7.0\n").unwrap();
        std::fs::write(d.join("w.bin"), [1u8; 64]).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let d = dir();
    std::fs::write(d.join("model.toml"), data).unwrap();
    let limits = Limits {
        weight_bytes: 1 << 20,
    };
    let first = |a: &[String]| {
        a.first()
            .cloned()
            .ok_or_else(|| "no architecture".to_string())
    };
    if let Ok(p) = Package::read(d, &first, &limits) {
        let _ = (p.input_bytes(), p.weight_bytes(), p.stream_bytes());
        assert!(p
            .inputs
            .iter()
            .chain(&p.outputs)
            .all(|&i| i < p.storages.len()));
    }
    let _ = Package::files(d);
});
