//! The environment variables through which `capture` configures the injection library.
//!
//! Configuration passes only through these names, so the library also works when a user
//! sets `CUDA_INJECTION64_PATH` by hand.

/// Folder where each process writes its spool file. Without it the library records nothing.
pub const SPOOL_DIR_ENV: &str = "SHARDSCOPE_SPOOL_DIR";
/// Comma-separated activity groups to record (see [`TraceKinds::parse`]); all when unset.
pub const TRACE_ENV: &str = "SHARDSCOPE_TRACE";
/// Path of the `libcupti.so` to load; else the library search path and usual CUDA folders.
pub const CUPTI_LIB_ENV: &str = "SHARDSCOPE_CUPTI_LIB";
/// Comma-separated extra environment variable names to record per process.
pub const ENV_ALLOW_ENV: &str = "SHARDSCOPE_ENV_ALLOW";
/// Milliseconds between periodic `cuptiActivityFlushAll` calls (default 1000).
pub const FLUSH_MS_ENV: &str = "SHARDSCOPE_FLUSH_MS";

/// Environment variables recorded for every process by default: what decides placement and
/// the shape of a distributed job.
pub const DEFAULT_ENV_ALLOW: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_JOB_ID",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_NVLS_ENABLE",
];

/// Which activity groups to record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceKinds {
    /// Kernels (`CONCURRENT_KERNEL`).
    pub kernel: bool,
    /// Memory copies.
    pub memcpy: bool,
    /// Memory sets.
    pub memset: bool,
    /// CUDA runtime and driver API calls (needed to link GPU work to its launch).
    pub api: bool,
    /// NVTX ranges and marks.
    pub nvtx: bool,
    /// Synchronisation calls.
    pub sync: bool,
    /// Every CUDA driver call, not only those that issue or wait for GPU work (costly: the runtime makes
    /// several driver calls for each of its own).
    pub driver_all: bool,
}

impl Default for TraceKinds {
    fn default() -> Self {
        TraceKinds { kernel: true, memcpy: true, memset: true, api: true, nvtx: true, sync: true, driver_all: false }
    }
}

impl TraceKinds {
    /// The group names, as `--trace` accepts them.
    pub const NAMES: &[&str] = &["kernel", "memcpy", "memset", "api", "nvtx", "sync", "driver-all"];

    /// Parses `kernel,memcpy,…`; `all` selects every group but `driver-all`. Errors name the unknown word.
    pub fn parse(text: &str) -> Result<TraceKinds, String> {
        let mut kinds = TraceKinds {
            kernel: false,
            memcpy: false,
            memset: false,
            api: false,
            nvtx: false,
            sync: false,
            driver_all: false,
        };
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "all" => kinds = TraceKinds::default(),
                "kernel" => kinds.kernel = true,
                "memcpy" => kinds.memcpy = true,
                "memset" => kinds.memset = true,
                "api" => kinds.api = true,
                "nvtx" => kinds.nvtx = true,
                "sync" => kinds.sync = true,
                "driver-all" => {
                    kinds.api = true;
                    kinds.driver_all = true;
                }
                other => {
                    return Err(format!("unknown trace kind '{other}' (known: all, {})", Self::NAMES.join(", ")));
                }
            }
        }
        Ok(kinds)
    }

    /// The inverse of [`TraceKinds::parse`].
    pub fn to_list(self) -> String {
        let flags = [self.kernel, self.memcpy, self.memset, self.api, self.nvtx, self.sync, self.driver_all];
        Self::NAMES.iter().zip(flags).filter(|(_, on)| *on).map(|(n, _)| *n).collect::<Vec<_>>().join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_all_is_opt_in_and_implies_api() {
        assert!(!TraceKinds::parse("all").unwrap().driver_all);
        let kinds = TraceKinds::parse("kernel,driver-all").unwrap();
        assert!(kinds.api && kinds.driver_all);
        assert_eq!(TraceKinds::parse(&kinds.to_list()).unwrap(), kinds);
    }

    #[test]
    fn trace_kinds_round_trip_and_reject_unknown() {
        let kinds = TraceKinds::parse("kernel, nvtx").unwrap();
        assert!(kinds.kernel && kinds.nvtx && !kinds.memcpy && !kinds.api);
        assert_eq!(kinds.to_list(), "kernel,nvtx");
        assert_eq!(TraceKinds::parse("all").unwrap(), TraceKinds::default());
        assert!(TraceKinds::parse("kernel,cudnn").unwrap_err().contains("cudnn"));
    }
}
