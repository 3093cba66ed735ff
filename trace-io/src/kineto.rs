//! Kineto JSON reader (see `read`).

use std::path::Path;

use shardscope_model::Trace;

use crate::Error;

/// Reads an Kineto JSON file (plain or gzipped) into a trace.
pub fn read(path: &Path) -> Result<Trace, Error> {
    Err(Error::format(path, "Kineto reader not built yet"))
}
