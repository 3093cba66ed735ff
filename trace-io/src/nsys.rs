//! Nsight Systems SQLite export reader (see `read`).

use std::path::Path;

use shardscope_model::Trace;

use crate::Error;

/// Reads an nsys SQLite export (or a capture) into a trace.
pub fn read(path: &Path) -> Result<Trace, Error> {
    Err(Error::format(path, "nsys reader not built yet"))
}
