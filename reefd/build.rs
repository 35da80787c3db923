//! Compiles proto/kserve_v2.proto (the Open Inference Protocol's gRPC
//! service) with protox, a protobuf compiler written in Rust, so building
//! reefd needs no protoc.
fn main() {
    println!("cargo:rerun-if-changed=proto/kserve_v2.proto");
    let fds = protox::compile(["proto/kserve_v2.proto"], ["proto"])
        .expect("proto/kserve_v2.proto compiles");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)
        .expect("tonic-prost-build generates the service");
}
