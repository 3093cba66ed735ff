//! Physical limits of a GPU machine, measured by the `bench` binary and read back by shardscope's analyzer.
//!
//! The library half is only [`results`]: the JSON layout of a measurement run, the nccl-tests bus-bandwidth
//! factors, and the lookup "what bus bandwidth does this machine reach for this collective at this size".
//! It has no CUDA dependency: the measuring code lives in the binary (`src/main.rs` and its modules) behind
//! the default `gpu` feature, so a consumer that depends on this crate with `default-features = false`
//! compiles serde types and nothing else.

pub mod results;
