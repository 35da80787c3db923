//! Gives the cdylib the SONAME `libamdhip64.so`, the name a HIP program
//! links against, so a process that loaded it by path (reefd's
//! `REEF_HIP_LIBRARY`) answers a later `dlopen("libamdhip64.so")` with it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libamdhip64.so");
}
