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

/// The NCCL kernel sample of `capture --comm-only` (see [`NcclKernelSample`]); unset: none.
pub const NCCL_KERNEL_SAMPLE_ENV: &str = "SHARDSCOPE_NCCL_KERNEL_SAMPLE";

/// The capture window plan (see [`WindowPlan`]); unset: record the whole life of every process.
pub const WINDOW_ENV: &str = "SHARDSCOPE_WINDOW";
/// Wall-clock start of the capture session, ns since the Unix epoch: what `--delay` counts from in every
/// process, so that all processes of a job switch together.
pub const SESSION_START_ENV: &str = "SHARDSCOPE_SESSION_START_NS";
/// `graph` or `node` (see [`GraphTrace`]); unset: `node`.
pub const GRAPH_TRACE_ENV: &str = "SHARDSCOPE_CUDA_GRAPH_TRACE";
/// `auto`, `attached` or `detached` (see [`OutsideWindows`]); unset: `auto`.
pub const OUTSIDE_WINDOWS_ENV: &str = "SHARDSCOPE_OUTSIDE_WINDOWS";
/// The control file in the spool folder through which `capture start`/`capture stop` switch recording in
/// every process of a running capture (see [`ControlCommand`]).
pub const CONTROL_FILE_NAME: &str = "control";

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
    /// CUDA memory allocations and releases (`MEMORY2`) and stream-ordered pool changes (`MEMORY_POOL`). Opt-in:
    /// every `cudaMalloc`/`cudaFree` becomes a record; PyTorch's caching allocator makes few once it is warm.
    pub memory: bool,
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
            memory: false,
        }
    }
}

impl TraceKinds {
    /// The group names, as `--trace` accepts them.
    pub const NAMES: &[&str] =
        &["kernel", "memcpy", "memset", "api", "nvtx", "sync", "api-all", "nccl-timers", "nccl-nvtx", "memory"];

    /// Parses `kernel,memcpy,…`; `all` selects the default groups, every group but the costly `sync`, `api-all`,
    /// `nccl-timers`, `nccl-nvtx` and `memory`
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
            memory: false,
        };
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "all" => {
                    let (sync, api_all) = (kinds.sync, kinds.api_all);
                    let (nccl_timers, nccl_nvtx, memory) = (kinds.nccl_timers, kinds.nccl_nvtx, kinds.memory);
                    kinds = TraceKinds { sync, api_all, nccl_timers, nccl_nvtx, memory, ..TraceKinds::default() };
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
                "memory" => kinds.memory = true,
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
            self.memory,
        ];
        Self::NAMES.iter().zip(flags).filter(|(_, on)| *on).map(|(n, _)| *n).collect::<Vec<_>>().join(",")
    }

    /// What `capture --comm-only` records: NVTX ranges (phases and steps) and the NCCL plugin's
    /// kernel-channel GPU timers; no kernels, copies, sets or CUDA calls, so CUPTI times nothing on the
    /// workload's launch path.
    pub fn comm_only() -> TraceKinds {
        TraceKinds {
            kernel: false,
            memcpy: false,
            memset: false,
            api: false,
            nvtx: true,
            sync: false,
            api_all: false,
            nccl_timers: true,
            nccl_nvtx: false,
            memory: false,
        }
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

/// How CUDA graphs are recorded (`--cuda-graph-trace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GraphTrace {
    /// Every kernel, copy and set of a replayed graph as its own record (CUPTI times each node on the GPU).
    #[default]
    Node,
    /// One record per graph launch (`CUPTI_ACTIVITY_KIND_GRAPH_TRACE`): nearly free, but nothing of what ran
    /// inside the graph.
    Graph,
}

impl GraphTrace {
    /// Parses `graph` or `node`.
    pub fn parse(text: &str) -> Result<GraphTrace, String> {
        match text.trim() {
            "node" => Ok(GraphTrace::Node),
            "graph" => Ok(GraphTrace::Graph),
            other => Err(format!("unknown CUDA graph trace level '{other}' (known: graph, node)")),
        }
    }

    /// The inverse of [`GraphTrace::parse`].
    pub fn as_str(self) -> &'static str {
        match self {
            GraphTrace::Node => "node",
            GraphTrace::Graph => "graph",
        }
    }
}

/// What CUPTI does in a process while no capture window is open (`--outside-windows`).
///
/// Attached, CUPTI costs every CUDA call something even with nothing switched on (on an H200: 2.7–3.4 % of a bare
/// kernel launch, timed in one process; 1.7 % of a replay of 400 tiny kernels); detached (`cuptiFinalize`), the
/// graph replay and a bare launch run as uncaptured (1.000× and 1.001×, once NVTX reaches CUPTI only while it is
/// attached), but CUPTI sees no trigger: the profiler API trigger is then seen by the library's own
/// `cudaProfilerStart`/`Stop` and `cuProfilerStart`/`Stop`, which only calls through the shared CUDA runtime or
/// driver reach, and graph nodes made while detached are not attributed to module ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutsideWindows {
    /// Detached where every trigger of the plan is seen without CUPTI (time, `capture start`, the profiler API
    /// through a shared CUDA runtime); else attached.
    #[default]
    Auto,
    /// Always attached: every trigger works, graph nodes made outside windows keep their module ranges.
    Attached,
    /// Detached whatever the triggers (an NVTX trigger still keeps CUPTI attached: NVTX reaches it only; so does
    /// a CUDA graph call while a window records, from then on).
    Detached,
}

impl OutsideWindows {
    /// Parses `auto`, `attached` or `detached`.
    pub fn parse(text: &str) -> Result<OutsideWindows, String> {
        match text.trim() {
            "auto" => Ok(OutsideWindows::Auto),
            "attached" => Ok(OutsideWindows::Attached),
            "detached" => Ok(OutsideWindows::Detached),
            other => Err(format!("unknown --outside-windows '{other}' (known: auto, attached, detached)")),
        }
    }

    /// The inverse of [`OutsideWindows::parse`].
    pub fn as_str(self) -> &'static str {
        match self {
            OutsideWindows::Auto => "auto",
            OutsideWindows::Attached => "attached",
            OutsideWindows::Detached => "detached",
        }
    }
}

/// What opens and closes a capture window inside a process; the numbers are those of the spool's window
/// records (append, never renumber).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WindowTrigger {
    /// Recording was on from the process's start (no trigger asked for, or not yet switched off).
    ProcessStart = 0,
    /// `cudaProfilerStart` / `cudaProfilerStop` (also `cuProfilerStart`/`Stop`).
    CudaProfilerApi = 1,
    /// The push and pop of the named NVTX range.
    Nvtx = 2,
    /// `--delay` / `--duration` / `--every`.
    Time = 3,
    /// `capture start` / `capture stop` from another shell.
    External = 4,
    /// The process exited with its window open.
    ProcessExit = 5,
}

impl WindowTrigger {
    /// Every trigger, by its number.
    pub const ALL: [WindowTrigger; 6] = [
        WindowTrigger::ProcessStart,
        WindowTrigger::CudaProfilerApi,
        WindowTrigger::Nvtx,
        WindowTrigger::Time,
        WindowTrigger::External,
        WindowTrigger::ProcessExit,
    ];

    /// The trigger numbered `code` in a spool, if known.
    pub fn from_code(code: u8) -> Option<WindowTrigger> {
        Self::ALL.get(code as usize).copied()
    }

    /// The name the capture file stores.
    pub fn as_str(self) -> &'static str {
        match self {
            WindowTrigger::ProcessStart => "process-start",
            WindowTrigger::CudaProfilerApi => "cuda-profiler-api",
            WindowTrigger::Nvtx => "nvtx",
            WindowTrigger::Time => "time",
            WindowTrigger::External => "external",
            WindowTrigger::ProcessExit => "process-exit",
        }
    }
}

/// When recording is on inside each process: the capture ranges of `capture`, carried to the injection
/// library in [`WINDOW_ENV`], one `key=value` per line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindowPlan {
    /// Open at `cudaProfilerStart`, close at `cudaProfilerStop`.
    pub cuda_profiler_api: bool,
    /// Open while an NVTX push/pop range with this message is open on some thread.
    pub nvtx_range: Option<String>,
    /// Only ranges of this NVTX domain (default domain when `None`).
    pub nvtx_domain: Option<String>,
    /// Open this long after the session start, ns.
    pub delay_ns: Option<u64>,
    /// Close this long after opening, ns (with the time trigger; else never by time).
    pub duration_ns: Option<u64>,
    /// With the time trigger: open again this long after the previous opening, ns.
    pub every_ns: Option<u64>,
    /// Take at most this many windows per process (0: no limit).
    pub repeat: u32,
    /// Start with recording off until `capture start` (only the external trigger opens windows).
    pub start_paused: bool,
}

impl WindowPlan {
    /// True when recording starts off and waits for a trigger.
    pub fn starts_off(&self) -> bool {
        self.start_paused
            || self.cuda_profiler_api
            || self.nvtx_range.is_some()
            || self.delay_ns.is_some()
            || self.duration_ns.is_some()
    }

    /// True when the time trigger is in use.
    pub fn timed(&self) -> bool {
        self.delay_ns.is_some() || self.duration_ns.is_some()
    }

    /// The environment value ([`WindowPlan::parse`] reads it back). Errors when a name holds a line break.
    pub fn to_env(&self) -> Result<String, String> {
        let mut lines = Vec::new();
        if self.cuda_profiler_api {
            lines.push("cuda-profiler-api=1".to_string());
        }
        for (key, value) in [("nvtx-range", &self.nvtx_range), ("nvtx-domain", &self.nvtx_domain)] {
            if let Some(value) = value {
                if value.contains(['\n', '\r']) {
                    return Err(format!("{key}: a line break in the name"));
                }
                lines.push(format!("{key}={value}"));
            }
        }
        for (key, value) in
            [("delay-ns", self.delay_ns), ("duration-ns", self.duration_ns), ("every-ns", self.every_ns)]
        {
            if let Some(value) = value {
                lines.push(format!("{key}={value}"));
            }
        }
        lines.push(format!("repeat={}", self.repeat));
        if self.start_paused {
            lines.push("start-paused=1".to_string());
        }
        Ok(lines.join("\n"))
    }

    /// Parses [`WindowPlan::to_env`]'s text; errors name the line.
    pub fn parse(text: &str) -> Result<WindowPlan, String> {
        let mut plan = WindowPlan::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (key, value) = line.split_once('=').ok_or_else(|| format!("window plan: no '=' in '{line}'"))?;
            let number = || value.trim().parse::<u64>().map_err(|e| format!("window plan: {key}: {e}"));
            match key {
                "cuda-profiler-api" => plan.cuda_profiler_api = value == "1",
                "nvtx-range" => plan.nvtx_range = Some(value.to_string()),
                "nvtx-domain" => plan.nvtx_domain = Some(value.to_string()),
                "delay-ns" => plan.delay_ns = Some(number()?),
                "duration-ns" => plan.duration_ns = Some(number()?),
                "every-ns" => plan.every_ns = Some(number()?),
                "repeat" => plan.repeat = u32::try_from(number()?).map_err(|e| format!("window plan: repeat: {e}"))?,
                "start-paused" => plan.start_paused = value == "1",
                other => return Err(format!("window plan: unknown key '{other}'")),
            }
        }
        Ok(plan)
    }
}

/// The content of the control file: the wanted state and a generation number that each new command
/// increases, so a process acts on a command once and a process started later takes the latest state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlCommand {
    /// Recording wanted on (`start`) or off (`stop`).
    pub recording: bool,
    /// Increases with each command written to the file.
    pub generation: u64,
}

impl ControlCommand {
    /// The file's text: `start 3` or `stop 4`.
    pub fn to_text(self) -> String {
        format!("{} {}\n", if self.recording { "start" } else { "stop" }, self.generation)
    }

    /// Parses [`ControlCommand::to_text`]; `None` for anything else (a half-written file is ignored).
    pub fn parse(text: &str) -> Option<ControlCommand> {
        let (verb, generation) = text.trim().split_once(' ')?;
        let recording = match verb {
            "start" => true,
            "stop" => false,
            _ => return None,
        };
        Some(ControlCommand { recording, generation: generation.trim().parse().ok()? })
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

/// The calls recorded besides the work calls when memory is traced (`--trace memory`), so that each memory record's
/// correlation id finds the call that made it (its name and thread) and the calls before it on that thread say who
/// called: the allocating and releasing calls, `cudaStreamIsCapturing` (PyTorch's caching allocator asks it right
/// before each `cudaMalloc` of a segment) and `cudaOccupancyMaxActiveClusters` (cuBLAS asks it while it sets up a
/// handle, before allocating its own workspace). They are set-up calls, not per-kernel ones, in a PyTorch loop.
pub fn is_memory_api(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "cudaMalloc",
        "cudaFree",
        "cudaHostAlloc",
        "cudaStreamIsCapturing",
        "cudaOccupancyMaxActiveClusters",
        "cuMemAlloc",
        "cuMemFree",
        "cuMemHostAlloc",
        "cuMemCreate",
        "cuMemRelease",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// How many NCCL kernels `capture --comm-only` lets CUPTI time at the start of each process: NCCL's channel
/// timers leave out the kernel's start-up and wind-down (about 3 µs per collective on H100s), so the capture
/// times the first collectives both ways and widens every channel-timed kernel by what it learnt. CUPTI's
/// kernel timing is on from when the process starts recording (its start, or its first capture window) until the
/// plugin has seen `collectives` collectives launched, or that window closes, or for at most `max_ms`
/// milliseconds, and off for the rest of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcclKernelSample {
    /// Collectives (and point-to-point launches) to time both ways; 0: no sample.
    pub collectives: u32,
    /// Longest the sample may last, ms from its start (a program whose collectives come late, or never, does
    /// not pay CUPTI's kernel timing for longer).
    pub max_ms: u64,
}

impl NcclKernelSample {
    /// `collectives/max_ms`, as [`NcclKernelSample::parse`] reads it.
    pub fn to_env(self) -> String {
        format!("{}/{}", self.collectives, self.max_ms)
    }

    /// Parses `collectives/max_ms` (or `collectives` alone, with a 60 s limit); errors say what was wrong.
    pub fn parse(text: &str) -> Result<NcclKernelSample, String> {
        let (count, ms) = text.trim().split_once('/').unwrap_or((text.trim(), "60000"));
        let collectives =
            count.trim().parse().map_err(|_| format!("NCCL kernel sample: '{count}' is not a count of collectives"))?;
        let max_ms = ms.trim().parse().map_err(|_| format!("NCCL kernel sample: '{ms}' is not a number of ms"))?;
        Ok(NcclKernelSample { collectives, max_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_calls_are_the_allocating_ones_and_the_allocator_markers() {
        for name in ["cudaMalloc_v3020", "cudaFree_v3020", "cudaStreamIsCapturing_v10000", "cuMemAlloc_v2"] {
            assert!(is_memory_api(name), "{name}");
        }
        assert!(is_memory_api("cudaOccupancyMaxActiveClusters_v11070"));
        for name in ["cudaLaunchKernel_v7000", "cudaGetDevice_v3020", "cuGetProcAddress_v2", "cudaMemcpyAsync_v3020"] {
            assert!(!is_memory_api(name), "{name}");
        }
    }

    #[test]
    fn outside_windows_reads_back_what_it_writes_and_names_a_bad_word() {
        for mode in [OutsideWindows::Auto, OutsideWindows::Attached, OutsideWindows::Detached] {
            assert_eq!(OutsideWindows::parse(mode.as_str()), Ok(mode));
        }
        assert!(OutsideWindows::parse("off").unwrap_err().contains("'off'"));
    }

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
    fn window_plans_round_trip_and_say_whether_recording_starts_off() {
        let plan = WindowPlan {
            cuda_profiler_api: true,
            nvtx_range: Some("step = 3".into()),
            nvtx_domain: Some("app".into()),
            delay_ns: Some(5),
            duration_ns: Some(7),
            every_ns: Some(11),
            repeat: 2,
            start_paused: true,
        };
        assert_eq!(WindowPlan::parse(&plan.to_env().unwrap()).unwrap(), plan);
        assert!(plan.starts_off() && plan.timed());
        assert!(!WindowPlan::default().starts_off());
        assert!(WindowPlan { nvtx_range: Some("a\nb".into()), ..WindowPlan::default() }.to_env().is_err());
        assert!(WindowPlan::parse("colour=red").unwrap_err().contains("colour"));
        assert!(WindowPlan::parse("repeat=x").unwrap_err().contains("repeat"));
    }

    #[test]
    fn control_commands_and_triggers_round_trip() {
        let command = ControlCommand { recording: false, generation: 9 };
        assert_eq!(ControlCommand::parse(&command.to_text()), Some(command));
        assert_eq!(ControlCommand::parse("sto"), None);
        for trigger in WindowTrigger::ALL {
            assert_eq!(WindowTrigger::from_code(trigger as u8), Some(trigger));
        }
        assert_eq!(WindowTrigger::from_code(200), None);
        assert_eq!(GraphTrace::parse(GraphTrace::Graph.as_str()), Ok(GraphTrace::Graph));
        assert!(GraphTrace::parse("kernel").is_err());
    }

    #[test]
    fn trace_kinds_round_trip_and_reject_unknown() {
        let kinds = TraceKinds::parse("kernel, nvtx").unwrap();
        assert!(kinds.kernel && kinds.nvtx && !kinds.memcpy && !kinds.api);
        assert_eq!(kinds.to_list(), "kernel,nvtx");
        assert_eq!(TraceKinds::parse("all").unwrap(), TraceKinds::default());
        assert!(TraceKinds::parse("kernel,cudnn").unwrap_err().contains("cudnn"));
    }

    #[test]
    fn the_sample_round_trips_and_bad_text_is_named() {
        let sample = NcclKernelSample { collectives: 64, max_ms: 30_000 };
        assert_eq!(NcclKernelSample::parse(&sample.to_env()), Ok(sample));
        assert_eq!(NcclKernelSample::parse("8"), Ok(NcclKernelSample { collectives: 8, max_ms: 60_000 }));
        assert!(NcclKernelSample::parse("x/1").unwrap_err().contains("'x'"));
        assert!(NcclKernelSample::parse("1/-5").unwrap_err().contains("'-5'"));
    }
}
