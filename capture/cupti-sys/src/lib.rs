//! Raw CUPTI bindings for the two CUPTI majors in use, loaded at run time.
//!
//! The files under `src/generated/` are bindgen's output over the CUPTI headers of CUDA 12.9
//! (`CUPTI_API_VERSION` 28) and CUDA 13.0 (`CUPTI_API_VERSION` 130001), restricted to the
//! functions and activity records shardscope reads. They are committed so that building needs
//! neither libclang nor CUDA; `build.rs` explains how to regenerate them.
//!
//! Why bindgen rather than `cudarc`'s CUPTI module: cudarc picks one CUDA version at compile
//! time through a cargo feature, while one `capture` binary must decode records written by
//! whichever CUPTI the workload loads (12.x from a wheel, 13.x from the toolkit). Two small
//! generated modules side by side give both layouts in one build without pulling in cudarc.
//!
//! The record layouts of the two majors differ only where CUDA 13 appended fields
//! (`CUpti_ActivityKernel10` adds `isDeviceLaunched`; memcpy and memset reuse a padding byte),
//! so the decoder can read the shared prefix through either module; it still picks the module
//! by the version the loaded library reports, never by what was compiled.
//!
//! Functions are reached through [`v13::Cupti`], a table of function pointers filled by
//! `libloading`; the signatures of the functions listed there are the same in both majors.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, missing_docs, clippy::all)]

/// CUDA 12.x CUPTI types (from the 12.9 headers).
pub mod v12 {
    include!("generated/cupti_12.rs");
}

/// CUDA 13.x CUPTI types and the run-time loaded function table.
pub mod v13 {
    include!("generated/cupti_13.rs");
}
