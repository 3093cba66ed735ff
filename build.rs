//! Generates the Rust types of the Perfetto trace messages that `src/perfetto/mod.rs` writes.
//!
//! Perfetto traces are protobuf. Rather than depend on a crate that compiles all of Perfetto's
//! several hundred messages, `proto/perfetto_subset.proto` declares the few the exporter needs
//! (with Perfetto's field numbers, so the output is a normal Perfetto trace) and `prost-build`
//! turns them into Rust at build time. The `protoc` compiler comes from the
//! `protoc-bin-vendored` crate, so building needs neither a system `protoc` nor network access.

use std::path::Path;

const PROTO_FILE: &str = "proto/perfetto_subset.proto";

fn main() {
    println!("cargo:rerun-if-changed={PROTO_FILE}");
    println!("cargo:rerun-if-changed=build.rs");
    let protoc = match protoc_bin_vendored::protoc_bin_path() {
        Ok(path) => path,
        Err(error) => panic!("no vendored protoc for this platform: {error}"),
    };
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc);
    if let Err(error) = config.compile_protos(&[Path::new(PROTO_FILE)], &[Path::new("proto")]) {
        panic!("compiling {PROTO_FILE}: {error}");
    }
}
