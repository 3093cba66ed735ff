//! The live side: loading CUPTI, the buffer callbacks, the background writer and exit flush.
//!
//! Threads and locks. CUPTI calls [`buffer_requested`] and [`buffer_completed`] on threads of
//! its own (and from inside `cuptiActivityFlushAll`); they only take a buffer from the pool or
//! push a filled one on the queue, each under a short lock, and never call into CUPTI while
//! holding one. The background thread waits on the queue, decodes and writes under the
//! `writer` lock, and calls `cuptiActivityFlushAll` periodically with no lock held. Lock order,
//! where two are ever held together: `writer` before `queue` (only when draining at exit);
//! `pool` is only ever held alone. The dropped-record query runs with no lock held.

use std::collections::VecDeque;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use shardscope_cupti_sys::v13 as cupti;

use shardscope_spool::config::{self, GraphTrace, NcclKernelSample, OutsideWindows, TraceKinds, WindowPlan};
use shardscope_spool::cupti::{ApiSelection, CaptureCost, DroppedRecord, ProcessInfo, SpoolRecord, SpoolWriter};
use shardscope_spool::hostname;

use crate::attach::{self, Detacher, GraphCbids};
use crate::decode::{self, Decoder, Layout};
use crate::graph_nodes;
use crate::nccl_sample;
use crate::nvtx_gate;
use crate::omit::Omit;
use crate::switch::{self, EnableApi, ProfilerCbids, Recorded, Switch};

/// Size of one activity buffer handed to CUPTI. 4 MiB holds about 20 000 kernel records.
const BUFFER_BYTES: usize = 4 << 20;
/// Most buffers alive at once (256 MiB). When all are in flight, requests get no buffer and
/// CUPTI drops (and counts) records instead of the workload's memory growing without bound.
const MAX_BUFFERS: usize = 64;
/// Default time between periodic flushes, so a killed process loses at most about this much.
const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_millis(1000);

/// Set when recording is off for good in this process (error, panic, or no spool dir).
static DISABLED: AtomicBool = AtomicBool::new(false);
/// Ensures one line on stderr per process at most.
static COMPLAINED: AtomicBool = AtomicBool::new(false);
static SESSION: OnceLock<Session> = OnceLock::new();
static CUPTI: OnceLock<Option<Loaded>> = OnceLock::new();
/// Switches recording at the capture window plan's triggers (set once recording has started).
static SWITCH: OnceLock<Switch> = OnceLock::new();

/// The loaded CUPTI: the function table plus a second handle for symbols outside it.
/// Both are leaked on purpose: unloading libcupti after use crashes the process at exit.
struct Loaded {
    api: &'static cupti::Cupti,
    library: &'static libloading::Library,
    path: String,
}

/// A buffer CUPTI filled, waiting for the background thread.
struct Completed {
    buffer: usize,
    valid_bytes: usize,
}

struct Writer {
    spool: SpoolWriter,
    decoder: Decoder,
    batch: Vec<SpoolRecord>,
    records_written: u64,
    dropped_reported: u64,
    refused_reported: u64,
}

struct Session {
    api: &'static cupti::Cupti,
    free_buffers: Mutex<Vec<usize>>,
    /// Buffers handed to CUPTI and not returned yet (CUPTI forgets them when it is detached: see [`reclaim_buffers`]).
    with_cupti: Mutex<Vec<usize>>,
    buffers_allocated: AtomicUsize,
    buffers_refused: AtomicU64,
    records_dropped: AtomicU64,
    queue: Mutex<VecDeque<Completed>>,
    queue_signal: Condvar,
    writer: Mutex<Writer>,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    flush_interval: Duration,
}

/// Switches recording off and says why, once per process.
pub(crate) fn give_up(why: &str) {
    DISABLED.store(true, Ordering::SeqCst);
    if !COMPLAINED.swap(true, Ordering::SeqCst) {
        eprintln!("shardscope: recording off in process {}: {why}", std::process::id());
    }
}

/// Runs `body`, turning a panic into "recording off" instead of unwinding into C.
pub(crate) fn guarded<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(_) => {
            give_up("internal error (panic); the workload continues unrecorded");
            fallback
        }
    }
}

/// Called by the CUDA driver (through `CUDA_INJECTION64_PATH`) while it initialises.
/// Returns 1 even when recording is off: the workload must run either way.
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> c_int {
    guarded(1, || {
        if let Err(why) = start() {
            give_up(&why);
        }
        1
    })
}

/// Called by NVTX (through `NVTX_INJECTION64_PATH`) on the first NVTX call of each NVTX instance. Where CUPTI
/// may be detached outside windows, NVTX gets this library's functions, which go on to CUPTI's only while it is
/// attached (`nvtx_gate.rs`: handing NVTX to CUPTI attaches it); otherwise NVTX is handed straight to CUPTI's own
/// hook, so that ranges become CUPTI marker records.
///
/// # Safety
/// `get_export_table` is NVTX's export-table function (`nvtxGetExportTable`), as NVTX passes it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn InitializeInjectionNvtx2(get_export_table: Option<nvtx_gate::GetExportTable>) -> c_int {
    guarded(0, || {
        let Some(get_export_table) = get_export_table else { return 0 };
        if nvtx_gated() {
            // SAFETY: as the caller promises.
            return unsafe { nvtx_gate::initialize(get_export_table) };
        }
        let Some(init) = cupti_nvtx_init() else { return 0 };
        // SAFETY: forwards NVTX's own argument to CUPTI's hook.
        unsafe { init(get_export_table) }
    })
}

/// CUPTI's NVTX hook, `InitializeInjectionNvtx2`, where CUPTI loads and has it.
fn cupti_nvtx_init() -> Option<nvtx_gate::NvtxInit> {
    let loaded = load_cupti()?;
    // SAFETY: CUPTI exports `InitializeInjectionNvtx2` with exactly this signature.
    unsafe { loaded.library.get::<nvtx_gate::NvtxInit>(b"InitializeInjectionNvtx2\0") }.map(|f| *f).ok()
}

/// True when NVTX should reach CUPTI only while it is attached: under `capture`, with a window plan that starts
/// with recording off, CUPTI not kept attached and no NVTX trigger (which needs every NVTX call). Read from the
/// environment, as NVTX may come before CUDA calls `InitializeInjection`; where that call then keeps CUPTI
/// attached after all, it opens the gate for good.
fn nvtx_gated() -> bool {
    if std::env::var_os(config::SPOOL_DIR_ENV).is_none() {
        return false;
    }
    Settings::from_env().is_ok_and(|settings| {
        settings.plan.starts_off()
            && settings.outside_windows != OutsideWindows::Attached
            && settings.plan.nvtx_range.is_none()
    })
}

fn cupti_candidates() -> Vec<String> {
    if let Ok(path) = std::env::var(config::CUPTI_LIB_ENV) {
        return vec![path];
    }
    let mut candidates: Vec<String> =
        ["libcupti.so", "libcupti.so.13", "libcupti.so.12"].iter().map(|s| s.to_string()).collect();
    for home in [std::env::var("CUDA_HOME").ok(), Some("/usr/local/cuda".to_string())].into_iter().flatten() {
        candidates.push(format!("{home}/extras/CUPTI/lib64/libcupti.so"));
        candidates.push(format!("{home}/targets/x86_64-linux/lib/libcupti.so"));
        candidates.push(format!("{home}/lib64/libcupti.so"));
    }
    candidates
}

fn load_cupti() -> Option<&'static Loaded> {
    CUPTI
        .get_or_init(|| {
            for path in cupti_candidates() {
                // SAFETY: loading libcupti runs its initialisers, which are safe to run in any
                // CUDA process; the handles are leaked so the library is never unloaded.
                let Ok(library) = (unsafe { libloading::Library::new(&path) }) else { continue };
                // SAFETY: as for the library above; the bindings load the same file.
                let Ok(api) = (unsafe { cupti::Cupti::new(&path) }) else { continue };
                let essential_present = api.cuptiGetVersion.is_ok()
                    && api.cuptiGetTimestamp.is_ok()
                    && api.cuptiSubscribe.is_ok()
                    && api.cuptiActivityEnable.is_ok()
                    && api.cuptiActivityRegisterCallbacks.is_ok()
                    && api.cuptiActivityGetNextRecord.is_ok()
                    && api.cuptiActivityFlushAll.is_ok()
                    && api.cuptiActivityGetNumDroppedRecords.is_ok()
                    && api.cuptiGetCallbackName.is_ok();
                if !essential_present {
                    continue;
                }
                return Some(Loaded { api: Box::leak(Box::new(api)), library: Box::leak(Box::new(library)), path });
            }
            None
        })
        .as_ref()
}

fn result_text(api: &cupti::Cupti, result: cupti::CUptiResult) -> String {
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: cuptiGetResultString only writes the out pointer; on failure it stays null.
    if api.cuptiGetResultString.is_ok()
        // SAFETY: as above: an out pointer only.
        && unsafe { api.cuptiGetResultString(result, &mut text) } == 0
        && !text.is_null()
    {
        // SAFETY: CUPTI returns a static NUL-terminated string.
        return unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned();
    }
    format!("CUPTI error {result}")
}

fn start() -> Result<(), String> {
    let Some(spool_dir) = std::env::var_os(config::SPOOL_DIR_ENV) else {
        // Loaded without `capture`: nothing asked us to record.
        DISABLED.store(true, Ordering::SeqCst);
        return Ok(());
    };
    let settings = Settings::from_env()?;
    let spool_dir = PathBuf::from(spool_dir);
    let loaded = load_cupti()
        .ok_or_else(|| format!("cannot load libcupti (tried {}; set --cupti-lib)", cupti_candidates().join(", ")))?;
    let api = loaded.api;
    let omit = settings.omit;
    if omit.any() {
        eprintln!("shardscope: process {}: left off for a measurement: {omit:?}", std::process::id());
    }
    if omit.subscribe {
        DISABLED.store(true, Ordering::SeqCst);
        return Ok(());
    }
    let pid = std::process::id();
    let detaching = match settings.detach_decision(api) {
        Ok(()) => true,
        Err(why) => {
            if let Some(why) = why {
                eprintln!("shardscope: process {pid}: {why}");
            }
            false
        }
    };

    let mut version = 0u32;
    // SAFETY: plain out-parameter call (the version of the library, no call into the driver).
    unsafe { api.cuptiGetVersion(&mut version) };
    // Graph level records no kernel of a graph, so nothing would use the nodes.
    let want_nodes = settings.kinds.kernel && settings.graph_trace == GraphTrace::Node && !omit.graph_nodes;
    // Detaching, CUPTI is first attached when the first window opens: until then nothing of this library calls
    // it (see `attach.rs`), not even its clock.
    let (subscriber, cupti_clock_ns) = if detaching {
        if want_nodes {
            graph_nodes::prepare(api, loaded.library);
        }
        (std::ptr::null_mut(), 0)
    } else {
        let attached = attach_at_start(api, loaded.library, want_nodes)?;
        nvtx_gate::open(cupti_nvtx_init());
        attached
    };
    let realtime_ns = switch::wall_now_ns();

    let host = hostname();
    let path = spool_dir.join(format!("{host}.{pid}.spool"));
    let mut spool = SpoolWriter::create(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let info = process_info(pid, host, version, cupti_clock_ns, realtime_ns);
    spool.write_batch(&[SpoolRecord::Process(info)]).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let session = open_session(api, spool, version)?;

    let selector = ApiSelector::load(api, loaded.library);
    let (recorded, selection) = if omit.activity {
        (Recorded::nothing(), ApiSelection::default())
    } else if detaching {
        recorded_activity(&settings.kinds, settings.graph_trace == GraphTrace::Graph, &selector)
    } else {
        start_activity(api, &settings, &selector)?
    };
    // Only where kernels are otherwise not timed (`capture --comm-only`); it starts when recording does.
    if let Some(sample) = settings.comm_sample.filter(|_| !omit.activity) {
        nccl_sample::prepare(api, sample, wake_background);
    }
    let session_start_ns =
        std::env::var(config::SESSION_START_ENV).ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(realtime_ns);
    let mut profiler = selector.profiler_cbids();
    if omit.runtime_triggers {
        (profiler.runtime_start, profiler.runtime_stop) = (Vec::new(), Vec::new());
    }
    if omit.driver_triggers {
        (profiler.driver_start, profiler.driver_stop) = (Vec::new(), Vec::new());
    }
    let detacher = detaching.then(|| {
        let dump = enable_and_dump(loaded.library);
        let reattach = Box::new(move |first: bool| reattach(api, want_nodes, first, dump));
        let clock = (realtime_ns, Instant::now());
        Detacher::unattached(api, clock, reattach, reclaim_buffers, session.flush_interval, selector.graph_cbids())
    });
    if detacher.is_some() {
        attach::route_profiler_calls(|start| {
            if let Some(switch) = SWITCH.get() {
                switch.profiler_call(start);
            }
        });
    }
    let switch = Switch::new(api, &settings.plan, recorded, profiler, spool_dir, session_start_ns, detacher);
    // Switched on (or left off until a trigger) after the callbacks are registered, so no buffer is missed.
    let switch = SWITCH.get_or_init(|| switch);
    switch.install(subscriber);
    {
        let mut writer = session.writer.lock().unwrap_or_else(|e| e.into_inner());
        writer.decoder.calibration_driver_cbid = CALIBRATION.get().and_then(|c| c.as_ref()).map(|c| c.cbid);
        if let Err(e) = writer.spool.write_batch(&[SpoolRecord::ApiSelection(selection)]) {
            return Err(format!("cannot write {}: {e}", path.display()));
        }
    }
    let thread = std::thread::Builder::new()
        .name("shardscope-spool".into())
        .spawn(|| guarded((), background_loop))
        .map_err(|e| format!("cannot start the spool thread: {e}"))?;
    *session.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
    // SAFETY: registering a plain `extern "C" fn()` with the C runtime.
    unsafe { libc::atexit(flush_at_exit) };
    if std::env::var_os("SHARDSCOPE_VERBOSE").is_some() {
        eprintln!("shardscope: recording process {pid} with {} (CUPTI {version}) to {}", loaded.path, path.display());
    }
    Ok(())
}

/// What `capture` asked of this process, from the environment it passed on.
struct Settings {
    kinds: TraceKinds,
    plan: WindowPlan,
    graph_trace: GraphTrace,
    outside_windows: OutsideWindows,
    omit: Omit,
    /// The NCCL kernel sample, only where kernels are otherwise not timed (`capture --comm-only`).
    comm_sample: Option<NcclKernelSample>,
}

impl Settings {
    fn from_env() -> Result<Settings, String> {
        let kinds = from_env_or_default(config::TRACE_ENV, TraceKinds::parse)?;
        let plan = from_env_or_default(config::WINDOW_ENV, WindowPlan::parse)?;
        let graph_trace = from_env_or_default(config::GRAPH_TRACE_ENV, GraphTrace::parse)?;
        let outside_windows = from_env_or_default(config::OUTSIDE_WINDOWS_ENV, OutsideWindows::parse)?;
        let omit = Omit::from_env()?;
        let comm_sample = nccl_kernel_sample()?.filter(|_| !kinds.kernel);
        Ok(Settings { kinds, plan, graph_trace, outside_windows, omit, comm_sample })
    }

    /// Whether CUPTI is detached outside windows (see [`attach::decide`]).
    fn detach_decision(&self, api: &cupti::Cupti) -> Result<(), Option<String>> {
        let measuring_or_sampling = self.omit.any() || self.comm_sample.is_some();
        let graph_level = self.graph_trace == GraphTrace::Graph;
        attach::decide(&self.plan, self.outside_windows, api, measuring_or_sampling, graph_level)
    }
}

/// The setting in environment variable `name`, parsed; the default where it is unset.
fn from_env_or_default<T: Default>(name: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<T, String> {
    std::env::var(name).map_or_else(|_| Ok(T::default()), |text| parse(&text))
}

/// Attaches CUPTI as the process starts (recording from the start, or kept attached outside windows): its clock
/// with the subscription that tells whether another CUPTI client owns the process, and the graph node callbacks
/// when `want_nodes`. The subscriber and CUPTI's clock, ns.
fn attach_at_start(
    api: &'static cupti::Cupti,
    library: &'static libloading::Library,
    want_nodes: bool,
) -> Result<(cupti::CUpti_SubscriberHandle, u64), String> {
    let mut cupti_clock_ns = 0u64;
    // SAFETY: plain out-parameter call.
    unsafe { api.cuptiGetTimestamp(&mut cupti_clock_ns) };
    // Subscribing first tells us whether another CUPTI client (nsys, torch.profiler) owns the
    // process; activity calls alone would appear to succeed and interfere with it.
    let subscriber = subscribe(api).map_err(|refused| {
        format!("CUPTI refused to subscribe ({}): another profiler is attached?", result_text(api, refused))
    })?;
    if want_nodes && !graph_nodes::enable(api, library, subscriber) {
        eprintln!("shardscope: this CUPTI gives no graph node callbacks; graph kernels keep no module ranges");
    }
    Ok((subscriber, cupti_clock_ns))
}

/// The session that writes `spool` (the process record already in it), set once for the process.
fn open_session(api: &'static cupti::Cupti, spool: SpoolWriter, version: u32) -> Result<&'static Session, String> {
    let namer = Box::new(move |driver: bool, cbid: u32| {
        let domain = if driver { cupti::CUPTI_CB_DOMAIN_DRIVER_API } else { cupti::CUPTI_CB_DOMAIN_RUNTIME_API };
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: out-parameter call; CUPTI returns a static string or leaves null.
        let ok = unsafe { api.cuptiGetCallbackName(domain, cbid, &mut name) } == 0;
        // SAFETY: non-null names are static NUL-terminated strings.
        (ok && !name.is_null()).then(|| unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned())
    });
    let flush_interval = std::env::var(config::FLUSH_MS_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_FLUSH_INTERVAL);
    let session = Session {
        api,
        free_buffers: Mutex::new(Vec::new()),
        with_cupti: Mutex::new(Vec::new()),
        buffers_allocated: AtomicUsize::new(0),
        buffers_refused: AtomicU64::new(0),
        records_dropped: AtomicU64::new(0),
        queue: Mutex::new(VecDeque::new()),
        queue_signal: Condvar::new(),
        writer: Mutex::new(Writer {
            spool,
            decoder: Decoder::new(Layout::for_cupti_version(version), namer),
            batch: Vec::with_capacity(1 << 16),
            records_written: 0,
            dropped_reported: 0,
            refused_reported: 0,
        }),
        stop: AtomicBool::new(false),
        thread: Mutex::new(None),
        flush_interval,
    };
    if SESSION.set(session).is_err() {
        return Err("InitializeInjection called twice".into());
    }
    Ok(SESSION.get().expect("set just above"))
}

/// Subscribes [`trigger_callback`]; the handle, or CUPTI's refusal.
fn subscribe(api: &cupti::Cupti) -> Result<cupti::CUpti_SubscriberHandle, cupti::CUptiResult> {
    let mut subscriber: cupti::CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: `trigger_callback` has CUPTI's callback signature; the handle is an out-parameter.
    let subscribed = unsafe { api.cuptiSubscribe(&mut subscriber, Some(trigger_callback), std::ptr::null_mut()) };
    if subscribed == 0 { Ok(subscriber) } else { Err(subscribed) }
}

/// Hands CUPTI the activity buffer callbacks.
fn register_buffers(api: &cupti::Cupti) -> Result<(), String> {
    // SAFETY: both callbacks are `extern "C"` functions with CUPTI's signatures.
    let registered = unsafe { api.cuptiActivityRegisterCallbacks(Some(buffer_requested), Some(buffer_completed)) };
    if registered != 0 {
        return Err(format!("cuptiActivityRegisterCallbacks: {}", result_text(api, registered)));
    }
    Ok(())
}

/// Attaches CUPTI for a window of a process that detaches it outside windows (see `attach.rs`): a new subscriber
/// with the graph node callbacks when `want_nodes`, and the activity buffers. At the process's `first` attach also
/// the device records' kind, through `dump` (`cuptiActivityEnableAndDump`) where this CUPTI has it: the contexts
/// exist by then, and switched on after them with `cuptiActivityEnable` the kind gave no device record on CUPTI
/// 13.0 (H200). Device records are not asked again at later attaches.
fn reattach(
    api: &'static cupti::Cupti,
    want_nodes: bool,
    first: bool,
    dump: Option<EnableAndDump>,
) -> Result<cupti::CUpti_SubscriberHandle, String> {
    let subscriber = subscribe(api).map_err(|refused| format!("cuptiSubscribe: {}", result_text(api, refused)))?;
    register_buffers(api)?;
    if want_nodes {
        graph_nodes::enable_again(api, subscriber);
    }
    if first {
        enable_kinds(api, &decode::ALWAYS_ON_KINDS, dump);
    }
    nvtx_gate::open(cupti_nvtx_init());
    Ok(subscriber)
}

/// `cuptiActivityEnableAndDump` (CUPTI of CUDA 11.7 on): switches a kind on and makes the records of what already
/// exists (devices, contexts).
type EnableAndDump = unsafe extern "C" fn(cupti::CUpti_ActivityKind) -> cupti::CUptiResult;

/// [`EnableAndDump`] in `library`, where it has it (looked up, not called).
fn enable_and_dump(library: &libloading::Library) -> Option<EnableAndDump> {
    // SAFETY: CUPTI exports this function with exactly this signature.
    unsafe { library.get::<EnableAndDump>(b"cuptiActivityEnableAndDump\0") }.map(|f| *f).ok()
}

/// Switches on `kinds`, through `dump` where given (the records of what exists come too); a refusal is one line
/// on stderr.
fn enable_kinds(api: &cupti::Cupti, kinds: &[cupti::CUpti_ActivityKind], dump: Option<EnableAndDump>) {
    for &kind in kinds {
        // SAFETY: plain calls with a valid kind constant; `dump` is CUPTI's function of that signature.
        let result = unsafe { dump.map_or_else(|| api.cuptiActivityEnable(kind), |dump| dump(kind)) };
        if result != 0 {
            eprintln!("shardscope: cannot enable CUPTI activity kind {kind}: {}", result_text(api, result));
        }
    }
}

/// Registers the activity buffers, switches on the kinds on from the start (the device records), and says what
/// a window switches on.
fn start_activity(
    api: &'static cupti::Cupti,
    settings: &Settings,
    selector: &ApiSelector,
) -> Result<(Recorded, ApiSelection), String> {
    register_buffers(api)?;
    let mut always_on: Vec<cupti::CUpti_ActivityKind> =
        if settings.omit.device_kind { Vec::new() } else { decode::ALWAYS_ON_KINDS.to_vec() };
    // CUPTI 13.0 crashed a graph's launch when the graph-trace kind was switched on after the graph was
    // instantiated (reproduced with `workloads/cupti_state_cost.cu graph … graph-live`): with windows it stays on
    // from the start, and the merge keeps only the graph launches inside windows.
    let graph_level = settings.graph_trace == GraphTrace::Graph;
    let graph_kind_always = settings.plan.starts_off() && graph_level;
    if graph_kind_always {
        always_on.push(cupti::CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
    }
    enable_kinds(api, &always_on, None);
    Ok(recorded_activity(&settings.kinds, graph_level && !graph_kind_always, selector))
}

/// A CUDA API domain whose calls can be recorded one callback id at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Domain {
    Runtime,
    Driver,
}

/// Largest callback id probed (CUDA 13.0 has 807 driver and ~500 runtime ids; ids only grow, and unknown
/// ones have no name).
const MAX_CBID: u32 = 2048;

/// Switches activity records on for single runtime or driver calls.
struct ApiSelector {
    api: &'static cupti::Cupti,
    runtime: Option<EnableApi>,
    driver: Option<EnableApi>,
}

impl ApiSelector {
    fn load(api: &'static cupti::Cupti, library: &libloading::Library) -> ApiSelector {
        // SAFETY: the symbols, when present, have this signature in every CUPTI that exports them.
        let symbol = |name: &[u8]| unsafe { library.get::<EnableApi>(name) }.ok().map(|f| *f);
        ApiSelector {
            api,
            runtime: symbol(b"cuptiActivityEnableRuntimeApi\0"),
            driver: symbol(b"cuptiActivityEnableDriverApi\0"),
        }
    }

    /// The CUPTI name of callback `cbid` in `domain`, if it has one.
    fn name(&self, domain: Domain, cbid: u32) -> Option<String> {
        let domain = match domain {
            Domain::Runtime => cupti::CUPTI_CB_DOMAIN_RUNTIME_API,
            Domain::Driver => cupti::CUPTI_CB_DOMAIN_DRIVER_API,
        };
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: out-parameter call; CUPTI returns a static string or an error for unknown ids.
        let known = unsafe { self.api.cuptiGetCallbackName(domain, cbid, &mut name) } == 0;
        // SAFETY: non-null names are static NUL-terminated strings.
        (known && !name.is_null()).then(|| unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned())
    }

    fn enable_fn(&self, domain: Domain) -> Option<EnableApi> {
        match domain {
            Domain::Runtime => self.runtime,
            Domain::Driver => self.driver,
        }
    }

    /// The work calls ([`config::is_work_api`]) of `domain` that can be switched one by one (none when
    /// this CUPTI cannot select single calls), and with `memory` the calls that tell who allocated
    /// ([`config::is_memory_api`]).
    fn work_calls(&self, domain: Domain, memory: bool) -> Vec<u32> {
        if self.enable_fn(domain).is_none() {
            return Vec::new();
        }
        self.cbids_named(domain, |name| config::is_work_api(name) || (memory && config::is_memory_api(name)))
    }

    /// The callback ids of `domain` whose CUPTI name `wanted` accepts.
    fn cbids_named(&self, domain: Domain, wanted: impl Fn(&str) -> bool) -> Vec<u32> {
        (1..MAX_CBID).filter(|&cbid| self.name(domain, cbid).is_some_and(|name| wanted(&name))).collect()
    }

    /// The callback ids of the CUDA graph calls (make, change, instantiate, launch a graph; not the graphics
    /// interop calls, whose names also start `cuGraph`), runtime and driver: see `attach.rs` on why they pin CUPTI.
    fn graph_cbids(&self) -> GraphCbids {
        let graph_call = |prefix: &'static str| {
            move |name: &str| {
                name.strip_prefix(prefix).is_some_and(|rest| rest.starts_with("Graph") && !rest.starts_with("Graphics"))
            }
        };
        GraphCbids {
            runtime: self.cbids_named(Domain::Runtime, graph_call("cuda")),
            driver: self.cbids_named(Domain::Driver, graph_call("cu")),
        }
    }

    /// The callback ids of the profiler API's start and stop calls, which open and close windows.
    fn profiler_cbids(&self) -> ProfilerCbids {
        let mut cbids = ProfilerCbids::default();
        for (domain, starts, stops, start_name, stop_name) in [
            (
                Domain::Runtime,
                &mut cbids.runtime_start,
                &mut cbids.runtime_stop,
                "cudaProfilerStart",
                "cudaProfilerStop",
            ),
            (Domain::Driver, &mut cbids.driver_start, &mut cbids.driver_stop, "cuProfilerStart", "cuProfilerStop"),
        ] {
            for cbid in 1..MAX_CBID {
                let Some(name) = self.name(domain, cbid) else { continue };
                if name.starts_with(start_name) {
                    starts.push(cbid);
                } else if name.starts_with(stop_name) {
                    stops.push(cbid);
                }
            }
        }
        cbids
    }

    /// What the exit-time cost measurement needs: `cuDriverGetVersion` (cheap, needs no context) and its
    /// callback id. `None` when the driver or this CUPTI lacks either.
    fn calibration(&self) -> Option<Calibration> {
        let enable = self.driver?;
        let cbid =
            (1..MAX_CBID).find(|&cbid| self.name(Domain::Driver, cbid).as_deref() == Some("cuDriverGetVersion"))?;
        // The driver that loaded this library is already mapped; RTLD_NOLOAD only looks it up.
        // SAFETY: dlopen/dlsym with C strings; the handle is kept for the life of the process.
        let function = unsafe {
            let handle = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if handle.is_null() {
                return None;
            }
            libc::dlsym(handle, c"cuDriverGetVersion".as_ptr())
        };
        if function.is_null() {
            return None;
        }
        // SAFETY: `cuDriverGetVersion(int*)` has this signature in every CUDA driver.
        let get_version = unsafe { std::mem::transmute::<*mut c_void, DriverGetVersion>(function) };
        Some(Calibration { cbid, enable, get_version })
    }
}

type DriverGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;

/// The means to measure what one recorded API call costs the calling thread.
struct Calibration {
    cbid: u32,
    enable: EnableApi,
    get_version: DriverGetVersion,
}

/// Calls per timed batch, and batches each way, of the exit-time measurement (about 2 ms in all).
const CALIBRATION_CALLS: u32 = 2000;
const CALIBRATION_ROUNDS: u32 = 3;

impl Calibration {
    /// Host ns that recording adds to one API call: batches of `cuDriverGetVersion` with its record off
    /// and on, alternated, the smallest difference per call (the least disturbed pair).
    fn measure(&self) -> Option<u32> {
        let batch = || {
            let started = Instant::now();
            let mut version: c_int = 0;
            for _ in 0..CALIBRATION_CALLS {
                // SAFETY: plain out-parameter call into the driver.
                unsafe { (self.get_version)(&mut version) };
            }
            started.elapsed().as_nanos() as f64 / f64::from(CALIBRATION_CALLS)
        };
        let mut best: Option<f64> = None;
        for _ in 0..CALIBRATION_ROUNDS {
            let off = batch();
            // SAFETY: plain calls with a callback id CUPTI named.
            if unsafe { (self.enable)(self.cbid, 1) } != 0 {
                return None;
            }
            let on = batch();
            // SAFETY: as above.
            unsafe { (self.enable)(self.cbid, 0) };
            let added = (on - off).max(0.0);
            best = Some(best.map_or(added, |b: f64| b.min(added)));
        }
        best.map(|ns| ns.round() as u32)
    }
}

/// Other CUPTI clients of the workload refused so far (see [`cuptiSubscribe`]).
static REFUSED_CLIENTS: AtomicU64 = AtomicU64::new(0);

/// Notes that CUPTI refused another client of this process: once on stderr, and in the spool each time.
fn note_refused_client() {
    let count = REFUSED_CLIENTS.fetch_add(1, Ordering::Relaxed) + 1;
    if count == 1 {
        eprintln!(
            "shardscope: process {} started its own CUPTI profiler (torch.profiler, Nsight, …); CUPTI allows one per \
             process and capture holds it, so that profiler gets no GPU events. Run it without capture, or capture \
             without it.",
            std::process::id()
        );
    }
    if let Some(session) = SESSION.get() {
        let mut writer = session.writer.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writer.spool.write_batch(&[SpoolRecord::RefusedClient { count: count as u32 }]);
    }
}

/// Passes a forwarded subscription's result through, noting it when CUPTI refused the workload's client
/// because this library holds the subscription.
fn noted_if_refused(result: cupti::CUptiResult) -> cupti::CUptiResult {
    if result == cupti::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && SESSION.get().is_some() {
        guarded((), note_refused_client);
    }
    result
}

/// The next `name` in the symbol search order after this library (the workload's libcupti, when `capture`
/// preloads this library), else ours.
fn next_cupti_symbol(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with a C string; RTLD_NEXT searches the objects loaded after this one.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if !next.is_null() {
        return next;
    }
    match load_cupti() {
        // SAFETY: as above, in the libcupti this library loaded.
        Some(loaded) => unsafe { loaded.library.get::<*mut c_void>(name.to_bytes_with_nul()) }
            .map(|symbol| *symbol)
            .unwrap_or(std::ptr::null_mut()),
        None => std::ptr::null_mut(),
    }
}

/// CUPTI's "not initialised" result, for a forwarded call that finds no CUPTI at all.
const CUPTI_ERROR_NOT_INITIALIZED: cupti::CUptiResult = 15;

/// `cuptiSubscribe` as the workload sees it when `capture` preloads this library (`LD_PRELOAD`): forwards to
/// the real one and notes when CUPTI refuses the workload's own profiler because this library already holds
/// the process's subscription, so that the capture can say so instead of that profiler's trace silently
/// having no GPU events. This library's own subscription goes straight to libcupti, not through here.
///
/// # Safety
/// The arguments are as CUPTI's `cuptiSubscribe` documents them.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuptiSubscribe(
    subscriber: *mut cupti::CUpti_SubscriberHandle,
    callback: cupti::CUpti_CallbackFunc,
    userdata: *mut c_void,
) -> cupti::CUptiResult {
    type Subscribe = unsafe extern "C" fn(
        *mut cupti::CUpti_SubscriberHandle,
        cupti::CUpti_CallbackFunc,
        *mut c_void,
    ) -> cupti::CUptiResult;
    let real = next_cupti_symbol(c"cuptiSubscribe");
    if real.is_null() || real == cuptiSubscribe as *mut c_void {
        return CUPTI_ERROR_NOT_INITIALIZED;
    }
    // SAFETY: the symbol is libcupti's cuptiSubscribe, with this signature; the arguments are the caller's.
    let result = unsafe { std::mem::transmute::<*mut c_void, Subscribe>(real)(subscriber, callback, userdata) };
    noted_if_refused(result)
}

/// `cuptiSubscribe_v2` (CUDA 13), forwarded and watched like [`cuptiSubscribe`].
///
/// # Safety
/// The arguments are as CUPTI's `cuptiSubscribe_v2` documents them.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuptiSubscribe_v2(
    subscriber: *mut cupti::CUpti_SubscriberHandle,
    callback: cupti::CUpti_CallbackFunc,
    userdata: *mut c_void,
    params: *mut c_void,
) -> cupti::CUptiResult {
    type SubscribeV2 = unsafe extern "C" fn(
        *mut cupti::CUpti_SubscriberHandle,
        cupti::CUpti_CallbackFunc,
        *mut c_void,
        *mut c_void,
    ) -> cupti::CUptiResult;
    let real = next_cupti_symbol(c"cuptiSubscribe_v2");
    if real.is_null() || real == cuptiSubscribe_v2 as *mut c_void {
        return CUPTI_ERROR_NOT_INITIALIZED;
    }
    // SAFETY: the symbol is libcupti's cuptiSubscribe_v2, with this signature; the arguments are the caller's.
    let result =
        unsafe { std::mem::transmute::<*mut c_void, SubscribeV2>(real)(subscriber, callback, userdata, params) };
    noted_if_refused(result)
}

/// Set once at start: how to measure the cost of a recorded call at exit (`None`: cannot).
static CALIBRATION: OnceLock<Option<Calibration>> = OnceLock::new();

/// Wall time in the buffer callbacks and their number (see [`CaptureCost`]).
static BUFFER_CALLBACK_NS: AtomicU64 = AtomicU64::new(0);
static BUFFER_CALLBACKS: AtomicU64 = AtomicU64::new(0);
/// CPU time the spool thread used, stored when it ends.
static WRITER_CPU_NS: AtomicU64 = AtomicU64::new(0);

/// Runs a buffer callback's body and adds its wall time to the cost counters.
fn timed_callback(body: impl FnOnce()) {
    let started = Instant::now();
    body();
    BUFFER_CALLBACK_NS.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    BUFFER_CALLBACKS.fetch_add(1, Ordering::Relaxed);
}

/// CPU time of the calling thread, ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn first_env_u32(names: &[&str]) -> Option<u32> {
    names.iter().find_map(|n| std::env::var(n).ok()?.trim().parse().ok())
}

fn process_info(pid: u32, hostname: String, cupti_version: u32, cupti_clock_ns: u64, realtime_ns: u64) -> ProcessInfo {
    let command_line = std::fs::read("/proc/self/cmdline")
        .map(|bytes| {
            bytes
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let mut allowed: Vec<String> = config::DEFAULT_ENV_ALLOW.iter().map(|s| s.to_string()).collect();
    if let Ok(extra) = std::env::var(config::ENV_ALLOW_ENV) {
        allowed.extend(extra.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from));
    }
    allowed.dedup();
    let env = allowed.iter().filter_map(|name| Some((name.clone(), std::env::var(name).ok()?))).collect();
    ProcessInfo {
        pid,
        // SAFETY: getppid has no preconditions.
        ppid: unsafe { libc::getppid() } as u32,
        command_line,
        hostname,
        rank: first_env_u32(&["RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"]),
        local_rank: first_env_u32(&["LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"]),
        world_size: first_env_u32(&["WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"]),
        env,
        cupti_version,
        cupti_clock_ns,
        realtime_ns,
    }
}

/// The subscriber's callback: only the callbacks of window triggers (see `switch.rs`) and of graph nodes (see
/// [`graph_nodes`]) are switched on.
unsafe extern "C" fn trigger_callback(
    _: *mut c_void,
    domain: cupti::CUpti_CallbackDomain,
    cbid: cupti::CUpti_CallbackId,
    cbdata: *const c_void,
) {
    guarded((), || {
        // SAFETY: CUPTI passes the data that goes with the domain and callback id.
        unsafe { graph_nodes::on_callback(domain, cbid, cbdata) };
        if let Some(switch) = SWITCH.get() {
            // SAFETY: CUPTI's own arguments, forwarded.
            unsafe { switch::dispatch(switch, domain, cbid, cbdata) };
        }
    })
}

/// What recording switches on inside a window for `kinds` (and the graph-trace kind, when `graph_kind`): activity
/// kinds and single API calls; and how the API calls are selected, for the spool.
fn recorded_activity(kinds: &TraceKinds, graph_kind: bool, selector: &ApiSelector) -> (Recorded, ApiSelection) {
    let mut recorded = Recorded {
        kinds: decode::activity_kinds(kinds).into_iter().filter(|k| !decode::ALWAYS_ON_KINDS.contains(k)).collect(),
        runtime_cbids: Vec::new(),
        driver_cbids: Vec::new(),
        enable_runtime: selector.runtime,
        enable_driver: selector.driver,
    };
    if graph_kind {
        // Before the node kinds, so that no graph launch ever finds kernel records on and graph records off.
        recorded.kinds.insert(0, cupti::CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
    }
    let mut selection = ApiSelection { every_call: kinds.api && kinds.api_all, ..ApiSelection::default() };
    if !kinds.api {
        return (recorded, selection);
    }
    // Each recorded call lengthens the workload's launch path, and PyTorch makes about fifteen runtime
    // and driver calls per kernel. Record only the calls the analysis uses, one callback id at a time,
    // unless every call was asked for or this CUPTI cannot select single calls.
    if kinds.api_all {
        recorded.kinds.extend([cupti::CUPTI_ACTIVITY_KIND_RUNTIME, cupti::CUPTI_ACTIVITY_KIND_DRIVER]);
        return (recorded, selection);
    }
    recorded.runtime_cbids = selector.work_calls(Domain::Runtime, kinds.memory);
    recorded.driver_cbids = selector.work_calls(Domain::Driver, kinds.memory);
    selection.runtime_cbids = recorded.runtime_cbids.len() as u32;
    selection.driver_cbids = recorded.driver_cbids.len() as u32;
    if recorded.runtime_cbids.is_empty() {
        selection.runtime_whole_kind = true;
        recorded.kinds.push(cupti::CUPTI_ACTIVITY_KIND_RUNTIME);
    }
    if recorded.driver_cbids.is_empty() {
        selection.driver_whole_kind = true;
        recorded.kinds.push(cupti::CUPTI_ACTIVITY_KIND_DRIVER);
    }
    CALIBRATION.get_or_init(|| selector.calibration());
    (recorded, selection)
}

/// CUPTI asks for an empty buffer. Hands out a pooled one, or none when the pool is spent.
unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    guarded((), || {
        timed_callback(|| {
            // SAFETY: CUPTI passes valid out-pointers.
            unsafe {
                *buffer = std::ptr::null_mut();
                *size = 0;
                *max_records = 0;
            }
            let Some(session) = SESSION.get() else { return };
            if DISABLED.load(Ordering::Relaxed) {
                return;
            }
            let pooled = session.free_buffers.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let ptr = match pooled {
                Some(ptr) => ptr as *mut u8,
                None if session.buffers_allocated.fetch_add(1, Ordering::SeqCst) < MAX_BUFFERS => {
                    // u64 elements give the 8-byte alignment CUPTI requires.
                    let storage = vec![0u64; BUFFER_BYTES / 8].into_boxed_slice();
                    Box::leak(storage).as_mut_ptr() as *mut u8
                }
                None => {
                    session.buffers_allocated.fetch_sub(1, Ordering::SeqCst);
                    session.buffers_refused.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            session.with_cupti.lock().unwrap_or_else(|e| e.into_inner()).push(ptr as usize);
            // SAFETY: as above.
            unsafe {
                *buffer = ptr;
                *size = BUFFER_BYTES;
            }
        })
    })
}

/// After `cuptiFinalize`: the buffers CUPTI still held (asked for, never returned) go back to the pool. CUPTI
/// destroys all its resources when it detaches, so it will not write to them again; without this each window would
/// leave its buffers behind until the pool ran dry and records were refused.
fn reclaim_buffers() {
    let Some(session) = SESSION.get() else { return };
    let held = std::mem::take(&mut *session.with_cupti.lock().unwrap_or_else(|e| e.into_inner()));
    session.free_buffers.lock().unwrap_or_else(|e| e.into_inner()).extend(held);
}

/// CUPTI returns a filled buffer. Queues it for the background thread.
unsafe extern "C" fn buffer_completed(
    _context: cupti::CUcontext,
    _stream_id: u32,
    buffer: *mut u8,
    _size: usize,
    valid_bytes: usize,
) {
    guarded((), || {
        timed_callback(|| {
            let Some(session) = SESSION.get() else { return };
            if buffer.is_null() {
                return;
            }
            session.with_cupti.lock().unwrap_or_else(|e| e.into_inner()).retain(|&b| b != buffer as usize);
            // No lock of ours is held here (see the module notes).
            let mut dropped = 0usize;
            // SAFETY: a null context asks for the global queue, which is where all records go
            // since CUDA 6.
            if unsafe { session.api.cuptiActivityGetNumDroppedRecords(std::ptr::null_mut(), 0, &mut dropped) } == 0 {
                session.records_dropped.fetch_add(dropped as u64, Ordering::Relaxed);
            }
            session
                .queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(Completed { buffer: buffer as usize, valid_bytes });
            session.queue_signal.notify_one();
        })
    })
}

/// Decodes and writes every queued buffer, then returns the buffers to the pool; writes the windows that
/// closed. True when a window closed since the last call (its records should be flushed now).
fn drain(session: &Session) -> bool {
    let mut writer = session.writer.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let next = session.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
        let Some(done) = next else { break };
        write_buffer(session, &mut writer, done.buffer as *mut u8, done.valid_bytes);
        session.free_buffers.lock().unwrap_or_else(|e| e.into_inner()).push(done.buffer);
    }
    let nodes = graph_nodes::take_pending();
    if !nodes.is_empty() && writer.spool.write_batch(&nodes).is_ok() {
        writer.records_written += nodes.len() as u64;
    }
    report_losses(session, &mut writer);
    let Some(switch) = SWITCH.get() else { return false };
    let (windows, window_closed) = switch.take_pending();
    if let Err(e) = writer.spool.write_batch(&windows) {
        give_up(&format!("cannot write the spool file: {e}"));
    }
    window_closed
}

fn write_buffer(session: &Session, writer: &mut Writer, buffer: *mut u8, valid_bytes: usize) {
    let Writer { spool, decoder, batch, records_written, .. } = writer;
    batch.clear();
    let mut record: *mut cupti::CUpti_Activity = std::ptr::null_mut();
    loop {
        // SAFETY: `buffer` is a buffer CUPTI completed with `valid_bytes` valid bytes and
        // `record` is null or the previous record CUPTI returned from it.
        let result = unsafe { session.api.cuptiActivityGetNextRecord(buffer, valid_bytes, &mut record) };
        if result != 0 {
            if result != cupti::CUPTI_ERROR_MAX_LIMIT_REACHED {
                decoder.undecoded += 1;
            }
            break;
        }
        // SAFETY: CUPTI just returned this as a complete record of this process's layout.
        unsafe { decoder.decode(record, batch) };
    }
    *records_written += batch.len() as u64;
    if let Err(e) = spool.write_batch(batch) {
        give_up(&format!("cannot write the spool file: {e}"));
    }
}

fn report_losses(session: &Session, writer: &mut Writer) {
    let dropped = session.records_dropped.load(Ordering::Relaxed);
    let refused = session.buffers_refused.load(Ordering::Relaxed);
    let mut losses = Vec::new();
    if dropped > writer.dropped_reported {
        losses.push(SpoolRecord::Dropped(DroppedRecord {
            context_id: 0,
            stream_id: 0,
            count: dropped - writer.dropped_reported,
        }));
        writer.dropped_reported = dropped;
    }
    if refused > writer.refused_reported {
        losses.push(SpoolRecord::BuffersRefused { count: refused });
        writer.refused_reported = refused;
    }
    if !losses.is_empty() {
        let _ = writer.spool.write_batch(&losses);
    }
}

fn background_loop() {
    let Some(session) = SESSION.get() else { return };
    let mut next_flush = Instant::now() + session.flush_interval;
    while !session.stop.load(Ordering::SeqCst) && !DISABLED.load(Ordering::Relaxed) {
        // The window triggers the clock and the control file drive, and how long until they are due.
        let trigger_wait = SWITCH.get().map_or(Duration::MAX, Switch::tick).min(nccl_sample::tick(Instant::now()));
        {
            let queue = session.queue.lock().unwrap_or_else(|e| e.into_inner());
            let wait = next_flush.saturating_duration_since(Instant::now()).min(trigger_wait);
            if queue.is_empty() && !wait.is_zero() {
                let _ = session.queue_signal.wait_timeout(queue, wait);
            }
        }
        // At a window's end, what it recorded goes out now; work still running arrives complete with a
        // later (unforced) flush.
        if drain(session) || Instant::now() >= next_flush {
            // No lock of ours is held: CUPTI calls buffer_completed from inside this call.
            flush_cupti(session, 0);
            next_flush = Instant::now() + session.flush_interval;
        }
    }
    WRITER_CPU_NS.store(thread_cpu_ns(), Ordering::Relaxed);
}

/// Flushes CUPTI's buffers, unless CUPTI is detached (a call would attach it again).
fn flush_cupti(session: &Session, flag: u32) {
    match SWITCH.get() {
        Some(switch) => switch.flush(flag),
        // SAFETY: plain call; callbacks were registered before the background thread started.
        None => unsafe {
            session.api.cuptiActivityFlushAll(flag);
        },
    }
}

/// Wakes the background thread for a look at its triggers before its next flush.
fn wake_background() {
    if let Some(session) = SESSION.get() {
        // Taken so that the wake-up cannot fall between the thread's look at the queue and its wait.
        drop(session.queue.lock().unwrap_or_else(|e| e.into_inner()));
        session.queue_signal.notify_all();
    }
}

/// The NCCL kernel sample asked for (`capture --comm-only`), if any.
fn nccl_kernel_sample() -> Result<Option<NcclKernelSample>, String> {
    match std::env::var(config::NCCL_KERNEL_SAMPLE_ENV) {
        Ok(text) => NcclKernelSample::parse(&text).map(Some),
        Err(_) => Ok(None),
    }
}

/// At exit: stop the background thread, force out every buffer, write what is left.
extern "C" fn flush_at_exit() {
    guarded((), || {
        let Some(session) = SESSION.get() else { return };
        session.stop.store(true, Ordering::SeqCst);
        session.queue_signal.notify_all();
        if let Some(thread) = session.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = thread.join();
        }
        if DISABLED.load(Ordering::Relaxed) {
            return;
        }
        // The workload is done, so measuring what a recorded call costs disturbs nothing; detached, no call is
        // recorded and measuring would attach CUPTI again.
        let detached = SWITCH.get().is_some_and(Switch::detached);
        let calibration = CALIBRATION.get().and_then(|c| c.as_ref()).filter(|_| !detached);
        let ns_per_recorded_call = calibration.and_then(Calibration::measure);
        let drain_started = thread_cpu_ns();
        if let Some(switch) = SWITCH.get() {
            switch.at_exit();
        }
        // No lock of ours is held.
        flush_cupti(session, cupti::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        drain(session);
        let mut writer = session.writer.lock().unwrap_or_else(|e| e.into_inner());
        let calibration_records = writer.decoder.calibration_records;
        let cost = CaptureCost {
            buffer_callback_ns: BUFFER_CALLBACK_NS.load(Ordering::Relaxed),
            buffer_callbacks: BUFFER_CALLBACKS.load(Ordering::Relaxed),
            writer_cpu_ns: WRITER_CPU_NS.load(Ordering::Relaxed) + thread_cpu_ns().saturating_sub(drain_started),
            // A measurement whose records never arrived did not record anything: not a cost.
            ns_per_recorded_call: ns_per_recorded_call.filter(|_| calibration_records > 0),
            calibration_records,
        };
        let end = SpoolRecord::End { records: writer.records_written, undecoded: writer.decoder.undecoded };
        let _ = writer.spool.write_batch(&[SpoolRecord::Cost(cost), end]);
    })
}
