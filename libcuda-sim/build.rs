//! Gives the cdylib the SONAME `libcuda.so`, the first name cudarc 0.19
//! asks the dynamic loader for (`get_lib_name_candidates("cuda")`). With it,
//! a process that has loaded this file by its path (reefd's
//! `REEF_CUDA_LIBRARY`) answers cudarc's later `dlopen("libcuda.so")` with
//! this object: glibc matches a requested name against the SONAMEs of the
//! objects already loaded before searching the disk.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so");
}
