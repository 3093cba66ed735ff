//! `capture [options] -- command args…`: run a CUDA workload and record it (see the library docs).

use shardscope_io::error_text::one_line;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Parser;
use shardscope_capture::cost::{CaptureCostReport, recorded_api_mode};
use shardscope_capture::launch::{self, ChildExit};
use shardscope_capture::merge::{self, CaptureRange, MergeOptions, uuid_text};
use shardscope_capture::nccl_spool::{self, NcclProcess};
use shardscope_capture::torch_modules::{HookFolder, ModuleSettings};
use shardscope_capture::{control, names, nccl_merge, nvml, redact, sqlite};
use shardscope_io::nsys::CAPTURE_MODE_COMM_ONLY;
use shardscope_spool::config::{self, GraphTrace, OutsideWindows, TraceKinds, WindowPlan};

/// Name of the injection library that `cargo build` puts next to the `capture` binary.
const INJECT_LIB_NAME: &str = "libshardscope_inject.so";
/// The NCCL profiler plugin, looked for next to this binary.
const NCCL_PLUGIN_LIB_NAME: &str = "libshardscope_nccl_profiler.so";
/// Longest the `--comm-sample` kernel timing lasts in a process, ms: a program whose collectives come late (a
/// server loading its model) or never does not pay CUPTI's kernel timing for longer.
const COMM_SAMPLE_MAX_MS: u64 = 60_000;

#[derive(Parser, Debug)]
#[command(
    name = "capture",
    version,
    about = "Run a CUDA workload and record its GPU activity into an Nsight Systems-schema SQLite file",
    after_help = "Examples:\n  capture -o run.sqlite -- python3 train.py\n  \
                  capture -o tp2.sqlite -- torchrun --nproc_per_node=2 infer.py\n  \
                  capture --merge run.sqlite.spool-1234 -o run.sqlite   (merge spools left by an interrupted capture)\n  \
                  capture --cuda-profiler-api -o win.sqlite -- python3 serve.py   (record between \
                  cudaProfilerStart/Stop only)\n  \
                  capture --start-paused -o srv.sqlite -- python3 serve.py &   then   capture start; …; capture stop\n\n\
                  Capture ranges (--delay, --duration, --every, --nvtx-range, --cuda-profiler-api, --start-paused, \
                  capture start/stop) switch recording on and off inside every process: outside a window CUPTI \
                  records nothing and the NCCL plugin starts no event; work launched inside a window and still \
                  running at its end is kept whole. The capture file lists the windows (SHARDSCOPE_CAPTURE_WINDOWS).",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Args {
    /// Switch recording in a running capture from another shell.
    #[command(subcommand)]
    control: Option<Control>,
    /// Output SQLite file.
    #[arg(short, long, default_value = "capture.sqlite")]
    output: PathBuf,
    /// Replace the output file if it exists.
    #[arg(long)]
    force: bool,
    /// What to record: comma-separated of kernel, memcpy, memset, api, nvtx, sync, or all; and the costly
    /// extras api-all (every runtime and driver call, not only those that launch, copy, set, synchronise or
    /// order streams), nccl-timers (the NCCL plugin's per-channel GPU timers) and nccl-nvtx (NCCL's own
    /// NVTX range per call, switched off with NCCL_NVTX_DISABLE=1 while the plugin records collectives);
    /// memory (CUDA allocations and releases, and memory pools, into CUDA_GPU_MEMORY_USAGE_EVENTS) is off
    /// unless named, e.g. --trace all,memory.
    #[arg(long, default_value = "all")]
    trace: String,
    /// Communication only: every NCCL collective timed on the GPU by NCCL's own kernel-channel timers
    /// (per channel and per collective, placed on the host clock), with its communicator, rank, sequence
    /// number, type, bytes, algorithm, protocol and launch time, plus NVTX ranges; CUPTI times no kernel,
    /// copy or CUDA call, so the launch path runs as uncaptured. The report's wait and transfer, late rank
    /// and bus bandwidth come from these times; without compute kernels, exposed communication is unknown.
    /// A channel span leaves out the kernel's start-up and wind-down (about 3.3 µs per collective on H100s),
    /// so CUPTI times the first --comm-sample collectives' kernels too, and every channel-timed kernel is
    /// widened by what that sample showed. Needs the NCCL profiler plugin (NCCL 2.26 or later for GPU
    /// timers); NCCL 2.31.x is warned about (costly timers).
    #[arg(long, conflicts_with_all = ["trace", "no_nccl_plugin"])]
    comm_only: bool,
    /// With --comm-only: collectives per process whose kernels CUPTI times when recording starts (at the start,
    /// or in the first capture window; kernel timing is on until they are launched, at most 60 s and no longer
    /// than that window, then off), to learn how NCCL's channel timers sit inside their kernels. 0: no sample;
    /// channel spans are then used as they are.
    #[arg(long, value_name = "COLLECTIVES", default_value_t = 64, requires = "comm_only")]
    comm_sample: u32,
    /// Record only from this many seconds after launch (in every process; recording is off before).
    #[arg(long, value_name = "SECONDS")]
    delay: Option<f64>,
    /// Record for this many seconds (after --delay), then switch recording off.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// With --delay/--duration: open a window again every this many seconds (after the previous opening).
    #[arg(long, value_name = "SECONDS", requires = "duration")]
    every: Option<f64>,
    /// Record only while an NVTX push/pop range with this message is open (per process).
    #[arg(long, value_name = "NAME")]
    nvtx_range: Option<String>,
    /// With --nvtx-range: only ranges of this NVTX domain (default: the default domain).
    #[arg(long, value_name = "DOMAIN", requires = "nvtx_range")]
    nvtx_domain: Option<String>,
    /// Record only between cudaProfilerStart and cudaProfilerStop (torch.cuda.profiler.start/stop), per process.
    #[arg(long)]
    cuda_profiler_api: bool,
    /// Take at most this many windows per process (0: every one).
    #[arg(long, value_name = "N", default_value_t = 0)]
    repeat: u32,
    /// Start with recording off; `capture start` (from another shell) switches it on.
    #[arg(long)]
    start_paused: bool,
    /// CUDA graphs: `node` records every kernel, copy and set of each replay (CUPTI times each node on the GPU:
    /// a replay of 400 tiny kernels took 2.04× on an H200, Nsight Systems' node level 2.75×); `graph` records one
    /// activity per graph launch, with its graph id (1.018× on the same replays, as Nsight Systems' graph level;
    /// nothing of what ran inside the graph: no kernel names or per-kernel times); with capture ranges its kind
    /// stays on for the whole run (CUPTI 13.0 crashed graphs launched after it was switched on) and only launches
    /// inside windows are kept. BENCHMARKS.md has the measurements.
    #[arg(long, value_name = "graph|node", default_value = "node")]
    cuda_graph_trace: String,
    /// With capture ranges: what CUPTI does in each process while no window is open. `attached` keeps CUPTI
    /// attached with nothing switched on, which still costs every CUDA call (about 3 % of a bare launch and 1.7 %
    /// of a replay of 400 tiny kernels on an H200); `detached` never attaches it before the first window, detaches
    /// it (cuptiFinalize) after each window and attaches it again when the next opens (a graph replay and a bare
    /// launch with an NVTX range per batch then ran as uncaptured, 1.000× and 1.001×: BENCHMARKS.md; NVTX reaches
    /// CUPTI only while it is attached, as handing NVTX to CUPTI attaches it); the profiler API trigger
    /// is then seen only through the shared
    /// CUDA runtime or driver (not a statically linked runtime, not ctypes), and graph nodes made while detached
    /// get no module range. `auto` detaches where every trigger is seen that way (time, `capture start`, the
    /// profiler API with a shared runtime loaded) and stays attached otherwise and for --nvtx-range. A process
    /// in which a CUDA graph ran while a window recorded stays attached from then on (detached, CUPTI 13.0 broke
    /// such a graph's next launch).
    #[arg(long, value_name = "auto|attached|detached", default_value = "auto")]
    outside_windows: String,
    /// libcupti to load in the workload (default: library path, then the usual CUDA folders).
    #[arg(long, value_name = "PATH")]
    cupti_lib: Option<PathBuf>,
    /// Injection library (default: libshardscope_inject.so next to this binary).
    #[arg(long, value_name = "PATH")]
    inject_lib: Option<PathBuf>,
    /// More environment variable names to record per process (comma-separated).
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    env_allow: Vec<String>,
    /// NCCL profiler plugin recording each collective's communicator, sequence number, size, algorithm and
    /// protocol (default: libshardscope_nccl_profiler.so next to this binary, when it is there).
    #[arg(long, value_name = "PATH", conflicts_with = "no_nccl_plugin")]
    nccl_plugin: Option<PathBuf>,
    /// Do not load the NCCL profiler plugin (collectives are then known by kernel name and NVTX only).
    #[arg(long)]
    no_nccl_plugin: bool,
    /// Do not preload the injection library (LD_PRELOAD): a CUPTI profiler the workload starts itself
    /// (torch.profiler) is then refused by CUPTI without capture noticing.
    #[arg(long)]
    no_client_guard: bool,
    /// Folder for the per-process spool files (default: next to the output).
    #[arg(long, value_name = "DIR")]
    spool_dir: Option<PathBuf>,
    /// Keep the spool files after merging.
    #[arg(long)]
    keep_spool: bool,
    /// Milliseconds between flushes of CUPTI buffers inside the workload (bounds what a crash loses).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    flush_ms: u64,
    /// Seconds to wait, after the command exits, for processes it left running.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    group_wait: f64,
    /// Store command lines and allow-listed environment values as they are. By default the values of
    /// arguments and variables whose names look like secrets (`--api-key=…`, `HF_TOKEN=…`, `*PASSWORD*`)
    /// are replaced by `<redacted>`.
    #[arg(long)]
    keep_cmdline: bool,
    /// Record every PyTorch module forward as an NVTX range named by its path and class
    /// (`model.layers.3.mlp (Qwen3MLP)`), through a Python start-up hook put first on PYTHONPATH; a
    /// sitecustomize the workload has still runs. DEPTH keeps modules with at most that many dotted path parts;
    /// `memory` adds the allocator's allocated and reserved bytes at entry and exit (costlier).
    #[arg(long, value_name = "DEPTH[,memory]", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    torch_modules: Option<String>,
    /// Merge the spool files in DIR into --output without running anything.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    merge: Option<PathBuf>,
    /// The workload and its arguments (after `--`).
    #[arg(last = true, value_name = "COMMAND", required_unless_present = "merge")]
    command: Vec<OsString>,
}

fn main() {
    let args = Args::parse();
    match run(args) {
        Ok(code) => std::process::exit(code),
        Err(error) => {
            eprintln!("capture: {}", one_line(&causes(&error)));
            std::process::exit(2);
        }
    }
}

/// The chain of causes on one line (see [`shardscope_io::error_text::causes`]).
fn causes(error: &anyhow::Error) -> String {
    shardscope_io::error_text::causes(error.chain())
}

fn seconds_to_ns(seconds: Option<f64>, what: &str) -> anyhow::Result<Option<i64>> {
    match seconds {
        Some(s) if !(s >= 0.0 && s.is_finite()) => bail!("{what} must be a non-negative number of seconds, got {s}"),
        Some(s) => Ok(Some((s * 1e9) as i64)),
        None => Ok(None),
    }
}

fn find_inject_lib(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => {
            let exe = std::env::current_exe().context("cannot locate the capture binary")?;
            exe.with_file_name(INJECT_LIB_NAME)
        }
    };
    if !path.is_file() {
        bail!("{}: injection library not found (build shardscope-inject, or pass --inject-lib)", path.display());
    }
    path.canonicalize().with_context(|| format!("{}", path.display()))
}

/// The NCCL profiler plugin to load, if any. A plugin the user chose through the environment wins over ours.
fn nccl_plugin(args: &Args) -> anyhow::Result<Option<PathBuf>> {
    if args.no_nccl_plugin {
        return Ok(None);
    }
    if std::env::var_os("NCCL_PROFILER_PLUGIN").is_some() && args.nccl_plugin.is_none() {
        eprintln!(
            "capture: NCCL_PROFILER_PLUGIN is already set; collective metadata is recorded by that plugin, not ours"
        );
        return Ok(None);
    }
    let path = match &args.nccl_plugin {
        Some(path) => path.clone(),
        None => {
            let path = std::env::current_exe()
                .context("cannot locate the capture binary")?
                .with_file_name(NCCL_PLUGIN_LIB_NAME);
            if !path.is_file() {
                // Without the plugin, collectives are still recorded as kernels and NVTX ranges.
                return Ok(None);
            }
            path
        }
    };
    if !path.is_file() {
        bail!("{}: NCCL profiler plugin not found", path.display());
    }
    Ok(Some(path.canonicalize().with_context(|| format!("{}", path.display()))?))
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("{}", path.display()))
}

/// `capture start` / `capture stop`.
#[derive(clap::Subcommand, Debug)]
enum Control {
    /// Switch recording on in every process of a running capture.
    Start(ControlArgs),
    /// Switch recording off in every process of a running capture (what ran inside the window is kept).
    Stop(ControlArgs),
}

#[derive(clap::Args, Debug)]
struct ControlArgs {
    /// The running capture's spool folder (default: the one capture running on this machine).
    #[arg(long, value_name = "DIR")]
    session: Option<PathBuf>,
}

/// Sends `capture start` / `capture stop`.
fn run_control(control: &Control) -> anyhow::Result<i32> {
    let (recording, args) = match control {
        Control::Start(args) => (true, args),
        Control::Stop(args) => (false, args),
    };
    let session = control::find_session(args.session.as_deref())?;
    let command = control::send(&session, recording)?;
    eprintln!(
        "capture: recording {} in {} (command {})",
        if recording { "on" } else { "off" },
        session.display(),
        command.generation
    );
    Ok(0)
}

/// The window plan the processes follow, from the capture range options.
fn window_plan(args: &Args) -> anyhow::Result<WindowPlan> {
    let ns = |seconds, what| seconds_to_ns(seconds, what).map(|ns| ns.map(|ns| ns as u64));
    Ok(WindowPlan {
        cuda_profiler_api: args.cuda_profiler_api,
        nvtx_range: args.nvtx_range.clone(),
        nvtx_domain: args.nvtx_domain.clone(),
        delay_ns: ns(args.delay, "--delay")?,
        duration_ns: ns(args.duration, "--duration")?,
        every_ns: ns(args.every, "--every")?,
        repeat: args.repeat,
        start_paused: args.start_paused,
    })
}

fn run(args: Args) -> anyhow::Result<i32> {
    if let Some(control) = &args.control {
        return run_control(control);
    }
    let kinds = if args.comm_only {
        TraceKinds::comm_only()
    } else {
        TraceKinds::parse(&args.trace).map_err(anyhow::Error::msg).context("--trace")?
    };
    let graph_trace =
        GraphTrace::parse(&args.cuda_graph_trace).map_err(anyhow::Error::msg).context("--cuda-graph-trace")?;
    let plan = window_plan(&args)?;
    let outside_windows =
        OutsideWindows::parse(&args.outside_windows).map_err(anyhow::Error::msg).context("--outside-windows")?;
    let range = CaptureRange {
        delay_ns: seconds_to_ns(args.delay, "--delay")?,
        duration_ns: seconds_to_ns(args.duration, "--duration")?,
        nvtx_range: args.nvtx_range.clone(),
        cuda_profiler_api: args.cuda_profiler_api,
    };
    if args.output.exists() && !args.force {
        bail!("{}: output exists (pass --force to replace it)", args.output.display());
    }
    let output = absolute(&args.output)?;
    // A mistyped folder should be an error, not a new folder (the spool folder goes beside the output).
    if let Some(folder) = output.parent()
        && !folder.is_dir()
    {
        bail!("{}: folder does not exist", folder.display());
    }

    if let Some(spool_dir) = &args.merge {
        let (trace_meta, exit) = (vec![("mode".to_string(), "merge only".to_string())], ChildExit::Code(0));
        merge_and_write(&output, spool_dir, None, &range, &kinds, trace_meta, args.keep_cmdline, args.comm_only)?;
        return Ok(exit.exit_code());
    }

    let inject_lib = find_inject_lib(args.inject_lib.as_deref())?;
    let spool_dir = match &args.spool_dir {
        Some(dir) => absolute(dir)?,
        None => {
            let name =
                format!("{}.spool-{}", output.file_name().unwrap_or_default().to_string_lossy(), std::process::id());
            output.with_file_name(name)
        }
    };
    std::fs::create_dir_all(&spool_dir)
        .with_context(|| format!("{}: cannot create spool folder", spool_dir.display()))?;

    let session_start_utc_ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0);
    let mut env: Vec<(String, OsString)> = vec![
        ("CUDA_INJECTION64_PATH".into(), inject_lib.clone().into()),
        (config::SPOOL_DIR_ENV.into(), spool_dir.clone().into()),
        (config::TRACE_ENV.into(), kinds.to_list().into()),
        (config::FLUSH_MS_ENV.into(), args.flush_ms.to_string().into()),
        (config::WINDOW_ENV.into(), plan.to_env().map_err(anyhow::Error::msg).context("--nvtx-range")?.into()),
        (config::SESSION_START_ENV.into(), session_start_utc_ns.to_string().into()),
        (config::GRAPH_TRACE_ENV.into(), graph_trace.as_str().into()),
        (config::OUTSIDE_WINDOWS_ENV.into(), outside_windows.as_str().into()),
    ];
    if !args.no_client_guard {
        // Preloaded, the library's `cuptiSubscribe` comes first in symbol lookup, so a profiler the workload
        // starts itself goes through it and its refusal (CUPTI allows one subscriber per process) is noted.
        let mut preload = inject_lib.clone().into_os_string();
        if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            preload.push(":");
            preload.push(existing);
        }
        env.push(("LD_PRELOAD".into(), preload));
    }
    if std::env::var_os("CUDA_INJECTION64_PATH").is_some() {
        eprintln!("capture: replacing CUDA_INJECTION64_PATH from the environment");
    }
    // The NVTX trigger needs NVTX's calls to reach CUPTI even when NVTX ranges are not recorded.
    if kinds.nvtx || plan.nvtx_range.is_some() {
        if std::env::var_os("NVTX_INJECTION64_PATH").is_some() {
            eprintln!("capture: NVTX_INJECTION64_PATH is already set; NVTX ranges go there, not into the capture");
        } else {
            // NVTX calls our library, which hands NVTX to CUPTI (see InitializeInjectionNvtx2).
            env.push(("NVTX_INJECTION64_PATH".into(), inject_lib.clone().into()));
        }
    }
    if let Some(cupti) = &args.cupti_lib {
        env.push((config::CUPTI_LIB_ENV.into(), absolute(cupti)?.into()));
    }
    let plugin = nccl_plugin(&args)?;
    if args.comm_only && plugin.is_none() {
        bail!(
            "--comm-only times collectives with the NCCL profiler plugin, and none is loaded (build \
             shardscope-nccl-profiler next to capture, pass --nccl-plugin, or unset NCCL_PROFILER_PLUGIN)"
        );
    }
    if let Some(plugin) = plugin {
        env.push(("NCCL_PROFILER_PLUGIN".into(), plugin.into()));
        if kinds.nccl_timers {
            env.push((config::NCCL_KERNEL_TIMERS_ENV.into(), "1".into()));
        }
        if args.comm_only && args.comm_sample > 0 {
            let sample = config::NcclKernelSample { collectives: args.comm_sample, max_ms: COMM_SAMPLE_MAX_MS };
            env.push((config::NCCL_KERNEL_SAMPLE_ENV.into(), sample.to_env().into()));
        }
        // The plugin records every collective; NCCL's own NVTX range per call would only add two marker
        // records to each collective's launch path. A user's own setting wins.
        if !kinds.nccl_nvtx && std::env::var_os("NCCL_NVTX_DISABLE").is_none() {
            env.push(("NCCL_NVTX_DISABLE".into(), "1".into()));
        }
    }
    if !args.env_allow.is_empty() {
        env.push((config::ENV_ALLOW_ENV.into(), args.env_allow.join(",").into()));
    }

    let registration = control::Registration::new(&spool_dir);
    let module_hook = match &args.torch_modules {
        Some(text) => {
            let settings = ModuleSettings::parse(text).map_err(anyhow::Error::msg).context("--torch-modules")?;
            if !kinds.nvtx {
                bail!("--torch-modules records NVTX ranges: add nvtx to --trace");
            }
            // Beside the spool folder, not in it: the merge takes every file there for a spool.
            let mut folder = spool_dir.clone().into_os_string();
            folder.push(".python");
            let folder = PathBuf::from(folder);
            let hook = HookFolder::create(&folder, &settings, std::env::var_os("PYTHONPATH"))
                .with_context(|| format!("{}: cannot write the module hook", folder.display()))?;
            env.extend(hook.env.iter().cloned());
            Some((hook, settings))
        }
        None => None,
    };
    let launched = launch::run(&args.command, &env, Duration::from_secs_f64(args.group_wait.max(0.0)));
    if let Some((hook, _)) = &module_hook {
        hook.remove();
    }
    let exit = match launched {
        Ok(exit) => exit,
        Err(error) => {
            // Nothing ran, so nothing was spooled: leave no empty folder behind (remove_dir
            // refuses a folder that is not empty).
            let _ = std::fs::remove_dir(&spool_dir);
            return Err(error.into());
        }
    };
    drop(registration);
    let exit_text = match exit {
        ChildExit::Code(code) => format!("exit code {code}"),
        ChildExit::Signal(signal) => {
            eprintln!("capture: workload killed by {} (signal {signal})", launch::signal_name(signal));
            format!("killed by {}", launch::signal_name(signal))
        }
    };
    let command: Vec<String> = args.command.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let command = if args.keep_cmdline { command } else { redact::redact_args(&command) };
    let command_json = serde_json::to_string(&command)?;
    let mut meta = vec![("command".to_string(), command_json), ("exitStatus".to_string(), exit_text)];
    if let Some((_, value)) = env.iter().find(|(name, _)| name == "NCCL_NVTX_DISABLE") {
        meta.push(("ncclNvtx".into(), format!("off (NCCL_NVTX_DISABLE={})", value.to_string_lossy())));
    }
    if let Some((_, settings)) = &module_hook {
        meta.push(("torchModules".into(), settings.env_text()));
    }
    if let Some(cupti) = &args.cupti_lib {
        meta.push(("cuptiLib".into(), cupti.display().to_string()));
    }
    meta.push(("cudaGraphTrace".into(), graph_trace.as_str().into()));
    let merged = merge_and_write(
        &output,
        &spool_dir,
        Some(session_start_utc_ns),
        &range,
        &kinds,
        meta,
        args.keep_cmdline,
        args.comm_only,
    );
    match merged {
        Ok(()) => {
            if !args.keep_spool {
                let _ = std::fs::remove_dir_all(&spool_dir);
            }
        }
        Err(error) => {
            eprintln!("capture: {}", one_line(&causes(&error)));
            eprintln!(
                "capture: spool files kept in {}; retry with: capture --merge {} -o {}",
                spool_dir.display(),
                spool_dir.display(),
                output.display()
            );
            // The workload's own failure matters more than ours.
            return Ok(if exit == ChildExit::Code(0) { 2 } else { exit.exit_code() });
        }
    }
    Ok(exit.exit_code())
}

/// Reads the NCCL profiler plugin's spools and joins each recorded collective to the trace (see
/// [`nccl_merge`]); the links are kept in each process's `kernel_links`, which the capture file stores.
fn attach_nccl_operations(
    trace: &mut shardscope_model::Trace,
    extras: &mut merge::CaptureExtras,
    spool_dir: &Path,
    comm_only: bool,
) -> anyhow::Result<(Vec<NcclProcess>, nccl_merge::NcclMergeSummary)> {
    let mut processes = nccl_spool::read_spool_dir(spool_dir)
        .map_err(|e| anyhow::anyhow!("{}: NCCL profiler spools: {e}", spool_dir.display()))?;
    let summary = nccl_merge::attach_operations(trace, extras, &mut processes, comm_only);
    for line in summary.lines(processes.len()) {
        eprintln!("capture: {line}");
    }
    Ok((processes, summary))
}

#[allow(clippy::too_many_arguments)]
fn merge_and_write(
    output: &Path,
    spool_dir: &Path,
    session_start_utc_ns: Option<i64>,
    range: &CaptureRange,
    kinds: &TraceKinds,
    mut meta: Vec<(String, String)>,
    keep_cmdline: bool,
    comm_only: bool,
) -> anyhow::Result<()> {
    let folder = merge::read_spool_folder(spool_dir)?;
    let spools = folder.spools;
    // Merging a folder on its own (no session start: nothing was run) needs something to merge.
    if spools.is_empty() && session_start_utc_ns.is_none() {
        let skipped = match folder.skipped.len() {
            0 => String::new(),
            n => format!(" ({n} entries that are not regular files skipped)"),
        };
        bail!("{}: no spool files (*.spool) in the folder{skipped}", spool_dir.display());
    }
    if spools.is_empty() {
        eprintln!(
            "capture: no process recorded anything (none initialised CUDA, or the injection library could not load); \
             writing an empty trace"
        );
    }
    // A workload run here switched recording itself (capture windows); a folder merged on its own may come from
    // an older capture that filtered at merge time (its spools have no windows).
    let windows_live = session_start_utc_ns.is_some();
    let options =
        MergeOptions { session_start_utc_ns, range: range.clone(), windows_live, cufilt: names::find_cufilt() };
    let (mut trace, mut extras) = merge::merge(&spools, &options);
    if !keep_cmdline {
        redact::redact_capture(&mut trace, &mut extras);
    }
    let (nccl, nccl_summary) = attach_nccl_operations(&mut trace, &mut extras, spool_dir, comm_only)?;
    // The mode says where the collectives' GPU times came from: CUPTI's kernels, or NCCL's own timers only.
    let timed_by_nccl = comm_only || (nccl_summary.timer_processes > 0 && nccl_summary.linked == 0);
    meta.push(("captureMode".into(), if timed_by_nccl { CAPTURE_MODE_COMM_ONLY } else { "full" }.into()));
    if !nccl_summary.clocks.is_empty() {
        meta.push(("ncclGpuClock".into(), nccl_summary.clocks_json()));
    }
    if !nccl_summary.samples.is_empty() {
        meta.push(("ncclKernelSample".into(), nccl_summary.samples_json()));
    }
    for skipped in &folder.skipped {
        trace.warn(skipped);
    }

    // NVML's view: PCI locations and physical GPU indices (what nsys uses as deviceId), by UUID.
    let mut links = Vec::new();
    if let Some((gpus, gpu_links)) = nvml::query() {
        for (device, extra) in trace.devices.iter_mut().zip(&extras.devices) {
            let uuid = uuid_text(&extra.uuid);
            if let Some(gpu) = gpus.iter().find(|g| g.uuid == uuid) {
                device.ordinal = gpu.index;
                device.bus_location = Some(gpu.bus_location.clone());
            }
        }
        links = gpu_links;
    }
    // Ordinals are per process (CUDA_VISIBLE_DEVICES renumbers): keep them unique in the file.
    let mut seen = std::collections::HashSet::new();
    let mut next = trace.devices.iter().map(|d| d.ordinal).max().map_or(0, |m| m + 1);
    for device in &mut trace.devices {
        if !seen.insert(device.ordinal) {
            device.ordinal = next;
            seen.insert(next);
            next += 1;
        }
    }

    let cost = CaptureCostReport::collect(&trace, &extras, &nccl);
    meta.push(("trace".into(), kinds.to_list()));
    let api_mode = recorded_api_mode(&trace, &extras, kinds.api_mode());
    meta.push(("apiCalls".into(), api_mode.clone()));
    meta.push(("recordCounts".into(), cost.record_counts_json()));
    meta.push(("captureCost".into(), cost.processes_json()));
    if let Some(added) = cost.added_ns_per_launch() {
        meta.push(("addedHostNsPerLaunch".into(), format!("{added:.0}")));
    }
    if let Some(demangler) = extras.demangler {
        meta.push(("demangler".into(), format!("{demangler:?}")));
    }
    meta.push(("sessionStartUtcNs".into(), extras.session_start_utc_ns.to_string()));
    meta.push(("captureRange".into(), format!("{range:?}")));
    let facts = sqlite::RunFacts { meta, links, nccl };

    let partial = output.with_extension("sqlite.partial");
    sqlite::write_capture(&partial, &trace, &extras, &facts)?;
    std::fs::rename(&partial, output).with_context(|| format!("{}: cannot move into place", output.display()))?;

    let dropped: u64 = extras.processes.iter().map(|p| p.records_dropped).sum();
    let unclean = extras.processes.iter().filter(|p| !p.clean_exit).count();
    eprintln!(
        "capture: wrote {}: {} processes, {} GPUs, {} kernels, {} memory ops, {} API calls, {} NVTX ranges; \
         {dropped} records dropped{}",
        output.display(),
        trace.processes.len(),
        trace.devices.len(),
        trace.kernels.len(),
        trace.memops.len(),
        trace.api_calls.len(),
        trace.ranges.len(),
        if unclean > 0 {
            format!("; {unclean} processes did not exit cleanly (records up to their last flush kept)")
        } else {
            String::new()
        }
    );
    for line in cost.summary(&api_mode) {
        eprintln!("capture: {line}");
    }
    for warning in &trace.warnings {
        eprintln!("capture: warning: {} × {}", warning.count, warning.what);
    }
    Ok(())
}
