//! Analyses of shardscope traces.
