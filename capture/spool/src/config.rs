//! The environment variables through which `capture` configures the injection library and the
//! NCCL profiler plugin, and the activity groups (`--trace`) they carry.
//!
//! Configuration passes only through these names, so the libraries also work when a user sets
//! `CUDA_INJECTION64_PATH` or `NCCL_PROFILER_PLUGIN` by hand.

/// Folder where each process writes its spool files. Without it neither library records anything.
pub const SPOOL_DIR_ENV: &str = "SHARDSCOPE_SPOOL_DIR";
/// Comma-separated activity groups to record (see [`TraceKinds::parse`]); all when unset.
pub const TRACE_ENV: &str = "SHARDSCOPE_TRACE";
/// Path of the `libcupti.so` to load; else the library search path and usual CUDA folders.
pub const CUPTI_LIB_ENV: &str = "SHARDSCOPE_CUPTI_LIB";
/// Comma-separated extra environment variable names to record per process.
pub const ENV_ALLOW_ENV: &str = "SHARDSCOPE_ENV_ALLOW";
/// Milliseconds between periodic `cuptiActivityFlushAll` calls (default 1000).
pub const FLUSH_MS_ENV: &str = "SHARDSCOPE_FLUSH_MS";
/// `1` asks the NCCL profiler plugin for kernel-channel events (per-channel GPU timers). Off by default:
/// NCCL then has to post proxy work for every collective, which lengthens the launch path.
pub const NCCL_KERNEL_TIMERS_ENV: &str = "SHARDSCOPE_NCCL_KERNEL_TIMERS";

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
    /// The CUDA runtime and driver calls that launch, copy, set, synchronise or launch graphs (see
    /// [`is_work_api`]): what links GPU work to its launching thread and time.
    pub api: bool,
    /// NVTX ranges and marks.
    pub nvtx: bool,
    /// CUPTI's synchronisation records. Opt-in: on a tensor-parallel decode they lengthened the run by
    /// about 15 %, and the synchronising calls' own API records already hold the host's waits (the merge
    /// derives the synchronisation table from them when these records are off).
    pub sync: bool,
    /// Every CUDA runtime and driver call, not only those of [`is_work_api`]. Costly: PyTorch makes about
    /// fifteen runtime and driver calls per kernel it launches, and each recorded call lengthens the
    /// workload's launch path.
    pub api_all: bool,
    /// The NCCL profiler plugin's kernel-channel events (per-channel GPU timers); see
    /// [`NCCL_KERNEL_TIMERS_ENV`].
    pub nccl_timers: bool,
    /// NCCL's own NVTX ranges (one per collective call). While the NCCL plugin records every collective
    /// they say nothing more, yet under a recorder each one becomes two marker records on the launch
    /// path; without this kind `capture` sets `NCCL_NVTX_DISABLE=1` when it loads the plugin.
    pub nccl_nvtx: bool,
}

impl Default for TraceKinds {
    fn default() -> Self {
        TraceKinds {
            kernel: true,
            memcpy: true,
            memset: true,
            api: true,
            nvtx: true,
            sync: false,
            api_all: false,
            nccl_timers: false,
            nccl_nvtx: false,
        }
    }
}

impl TraceKinds {
    /// The group names, as `--trace` accepts them.
    pub const NAMES: &[&str] =
        &["kernel", "memcpy", "memset", "api", "nvtx", "sync", "api-all", "nccl-timers", "nccl-nvtx"];

    /// Parses `kernel,memcpy,…`; `all` selects the default groups, every group but the costly `sync`, `api-all`,
    /// `nccl-timers` and `nccl-nvtx`
    /// (`driver-all`, the older name of `api-all`, is accepted). Errors name the unknown word.
    pub fn parse(text: &str) -> Result<TraceKinds, String> {
        let mut kinds = TraceKinds {
            kernel: false,
            memcpy: false,
            memset: false,
            api: false,
            nvtx: false,
            sync: false,
            api_all: false,
            nccl_timers: false,
            nccl_nvtx: false,
        };
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "all" => {
                    let (sync, api_all) = (kinds.sync, kinds.api_all);
                    let (nccl_timers, nccl_nvtx) = (kinds.nccl_timers, kinds.nccl_nvtx);
                    kinds = TraceKinds { sync, api_all, nccl_timers, nccl_nvtx, ..TraceKinds::default() };
                }
                "kernel" => kinds.kernel = true,
                "memcpy" => kinds.memcpy = true,
                "memset" => kinds.memset = true,
                "api" => kinds.api = true,
                "nvtx" => kinds.nvtx = true,
                "sync" => kinds.sync = true,
                "api-all" | "driver-all" => {
                    kinds.api = true;
                    kinds.api_all = true;
                }
                "nccl-timers" => kinds.nccl_timers = true,
                "nccl-nvtx" => kinds.nccl_nvtx = true,
                other => {
                    return Err(format!("unknown trace kind '{other}' (known: all, {})", Self::NAMES.join(", ")));
                }
            }
        }
        Ok(kinds)
    }

    /// The inverse of [`TraceKinds::parse`].
    pub fn to_list(self) -> String {
        let flags = [
            self.kernel,
            self.memcpy,
            self.memset,
            self.api,
            self.nvtx,
            self.sync,
            self.api_all,
            self.nccl_timers,
            self.nccl_nvtx,
        ];
        Self::NAMES.iter().zip(flags).filter(|(_, on)| *on).map(|(n, _)| *n).collect::<Vec<_>>().join(",")
    }

    /// How API calls are recorded, in words (for the capture file and its summary).
    pub fn api_mode(self) -> &'static str {
        match (self.api, self.api_all) {
            (false, _) => "none",
            (true, false) => {
                "work calls (launch, copy, set, synchronise, event record/wait, graph launch, profiler range)"
            }
            (true, true) => "every runtime and driver call",
        }
    }
}

/// Runtime and driver calls that launch GPU work, copy, set, synchronise, order streams, launch graphs or
/// open and close a profiler range: the calls the analysis links GPU work to (launch thread and time,
/// synchronisation waits, stream dependencies, `--cuda-profiler-api` ranges). Everything else PyTorch and
/// the libraries call per kernel (`cudaGetDevice`, `cudaGetLastError`, `cudaStreamIsCapturing`,
/// `cuCtxGetCurrent`, …) is left out by default. `name` is CUPTI's callback name (`cudaLaunchKernel_v7000`).
pub fn is_work_api(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        // Runtime API.
        "cudaLaunch",
        "cudaGraphLaunch",
        "cudaMemcpy",
        "cudaMemset",
        "cudaMemPrefetch",
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaStreamWaitEvent",
        "cudaEventRecord",
        "cudaProfilerStart",
        "cudaProfilerStop",
        // Driver API (NCCL, Triton and cuBLAS launch through it).
        "cuLaunch",
        "cuGraphLaunch",
        "cuMemcpy",
        "cuMemset",
        "cuMemPrefetch",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "cuStreamWaitEvent",
        "cuEventRecord",
        "cuProfilerStart",
        "cuProfilerStop",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costly_kinds_are_opt_in() {
        let all = TraceKinds::parse("all").unwrap();
        assert!(!all.sync && !all.api_all && !all.nccl_timers);
        assert!(TraceKinds::parse("sync,all").unwrap().sync);
        let kinds = TraceKinds::parse("kernel,api-all").unwrap();
        assert!(kinds.api && kinds.api_all);
        assert_eq!(TraceKinds::parse(&kinds.to_list()).unwrap(), kinds);
        assert_eq!(TraceKinds::parse("kernel,driver-all").unwrap(), kinds);
        assert!(!all.nccl_nvtx);
        let kinds = TraceKinds::parse("nccl-timers,nccl-nvtx,all").unwrap();
        assert!(kinds.nccl_timers && kinds.nccl_nvtx && kinds.kernel && !kinds.api_all);
        assert_eq!(TraceKinds::parse(&kinds.to_list()).unwrap(), kinds);
    }

    #[test]
    fn only_calls_that_issue_order_or_wait_for_gpu_work_are_work_calls() {
        for name in [
            "cudaLaunchKernel_v7000",
            "cudaLaunchKernelExC_v11060",
            "cudaGraphLaunch_v10000",
            "cudaMemcpyAsync_v3020",
            "cudaMemsetAsync_v3020",
            "cudaStreamSynchronize_v3020",
            "cudaEventRecord_v3020",
            "cudaStreamWaitEvent_v3020",
            "cudaProfilerStart_v4000",
            "cuLaunchKernel",
            "cuLaunchKernelEx",
            "cuGraphLaunch",
            "cuMemcpyAsync",
            "cuMemsetD32Async",
            "cuStreamSynchronize",
        ] {
            assert!(is_work_api(name), "{name}");
        }
        for name in [
            "cudaGetDevice_v3020",
            "cudaGetLastError_v3020",
            "cudaPeekAtLastError_v3020",
            "cudaStreamIsCapturing_v10000",
            "cudaSetDevice_v3020",
            "cudaEventQuery_v3020",
            "cuCtxGetCurrent",
            "cuGetProcAddress_v2",
            "cuDeviceGetAttribute",
            "cuModuleGetFunction",
            "cuMemGetInfo",
        ] {
            assert!(!is_work_api(name), "{name}");
        }
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
