//! The structure of an LLM run read from its trace: phases (recorded ranges or inferred prefill/decode), steps
//! (also through CUDA-graph replays), generate calls with TTFT and TPOT, decoder layers and model modules.

pub mod generate_calls;
pub mod inferred_phases;
pub mod layers;
pub mod modules;
pub mod phases;
pub mod steps;
