//! CUPTI detached between capture windows, and the profiler API trigger seen without it.
//!
//! Attached, CUPTI costs every CUDA call something even with no kind and no callback switched on: timed in one
//! process on an H200 (`workloads/cupti_state_cost.cu`), a bare kernel launch took 2.7–3.4 % longer attached with
//! nothing on than detached, and subscribing or the trigger callbacks added nothing measurable on top; across
//! processes, a replay of 400 kernels that touch no memory took 1.017× attached with nothing on and 1.000×
//! detached (a bare launch took 1.001× of uncaptured detached, once NVTX reaches CUPTI only while it is attached:
//! `nvtx_gate.rs`; BENCHMARKS.md, sittings 23–25). So where every trigger of the plan can be seen without CUPTI,
//! the library never attaches CUPTI before the first window opens (not even to read its clock: the process record
//! then carries the wall clock, and the first attach writes CUPTI's clock beside it), detaches it
//! (`cuptiFinalize`) after each window and attaches it again when the next one opens.
//!
//! Detaching follows CUPTI's advice: `cuptiFinalize` is called at the exit of an API callback, never from a
//! thread that might race the workload's calls into CUPTI. After a window closes and its records had one flush
//! interval to arrive (work still running at the stop completes in it), the background thread flushes and arms
//! the detach by switching the runtime and driver callbacks on; the next CUDA call's exit callback forces out
//! the last buffers and detaches. While detached, nothing of this library calls CUPTI (any call would attach it
//! again): flushes are skipped and CUPTI's clock is carried on from the monotonic clock.
//!
//! CUDA graphs pin CUPTI: once a graph was made, changed, instantiated or launched while a window recorded,
//! CUPTI stays attached for the rest of the process. Detached after such a window, CUPTI 13.0 left a JAX
//! program's next command-buffer launch to fail on the GPU (`CUDA_ERROR_LAUNCH_FAILED`, on an H200, at the first
//! detach; the same program ran clean with CUPTI kept attached, and with command buffers switched off). While a
//! window is open the graph calls' callbacks are on (one callback per graph call, not per kernel) and the first
//! one pins.
//!
//! Triggers while detached: the clock and `capture start`/`stop` are the background thread's own. For the
//! profiler API the library exports `cudaProfilerStart`/`Stop` and `cuProfilerStart`/`Stop`; preloaded
//! (`LD_PRELOAD`, `capture`'s default), these come first in symbol lookup, so a call through the shared CUDA
//! runtime or driver (PyTorch's `torch.cuda.profiler.start`, engines' profiler switches) reaches them; they
//! switch, then call the real function. A statically linked runtime or a function pointer taken with `dlsym` on
//! the runtime's own handle (ctypes) bypasses them: `auto` therefore detaches for the profiler API only where a
//! shared runtime is loaded, and a process that saw no window says so at exit. The NVTX trigger reaches the
//! library only through CUPTI and keeps it attached.

use std::cell::Cell;
use std::ffi::{CStr, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use shardscope_cupti_sys::v13 as cupti;
use shardscope_spool::config::{OutsideWindows, WindowPlan};

/// Attaches CUPTI for a window: subscribes, registers the activity buffers, switches on the callbacks the session
/// needs, and at the process's first attach (`true`) the kinds on for the whole process. Returns the new subscriber.
pub(crate) type Reattach = Box<dyn Fn(bool) -> Result<cupti::CUpti_SubscriberHandle, String> + Send + Sync>;

/// Where CUPTI stands in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Attached,
    /// Attached, with the API callbacks on so that the next call's exit detaches.
    Armed,
    Detached,
}

struct Attachment {
    state: State,
    /// The current subscriber (null while detached), as an address so that the state can be shared.
    subscriber: usize,
    /// CUPTI's clock and the monotonic clock read together while attached: CUPTI's clock while detached. Before
    /// the first attach, the wall clock stands in for CUPTI's (on Linux CUPTI's clock is the wall clock).
    clock: (u64, Instant),
    /// CUPTI was attached at least once in this process.
    ever_attached: bool,
    /// When the background thread should arm the detach.
    detach_due: Option<Instant>,
}

/// The callback ids of the CUDA graph calls, runtime and driver (see the module notes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GraphCbids {
    pub runtime: Vec<u32>,
    pub driver: Vec<u32>,
}

/// Detaches and attaches CUPTI for one process (see the module notes).
pub(crate) struct Detacher {
    api: &'static cupti::Cupti,
    attachment: Mutex<Attachment>,
    /// Set while armed: read without the lock on every API callback.
    armed: AtomicBool,
    reattach: Reattach,
    /// Runs right after each detach: takes back the buffers CUPTI held.
    after_detach: fn(),
    /// How long a closed window's records get before CUPTI is detached.
    grace: Duration,
    /// The graph calls whose callbacks a window switches on.
    graph_cbids: GraphCbids,
    /// A graph call came while a window recorded: CUPTI is never detached again.
    pinned: AtomicBool,
}

impl Detacher {
    /// A detacher for a process that starts with CUPTI detached; `clock` is the wall clock (ns) and the monotonic
    /// clock read together, standing in for CUPTI's until it is attached; `after_detach` runs right after each
    /// detach.
    pub(crate) fn unattached(
        api: &'static cupti::Cupti,
        clock: (u64, Instant),
        reattach: Reattach,
        after_detach: fn(),
        grace: Duration,
        graph_cbids: GraphCbids,
    ) -> Detacher {
        let attachment =
            Attachment { state: State::Detached, subscriber: 0, clock, ever_attached: false, detach_due: None };
        let armed = AtomicBool::new(false);
        let pinned = AtomicBool::new(false);
        Detacher { api, attachment: Mutex::new(attachment), armed, reattach, after_detach, grace, graph_cbids, pinned }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Attachment> {
        self.attachment.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True while CUPTI is detached.
    pub(crate) fn detached(&self) -> bool {
        self.lock().state == State::Detached
    }

    /// CUPTI's clock now, ns; carried on from the last reading while detached (reading it would attach CUPTI).
    pub(crate) fn now_ns(&self) -> u64 {
        let mut attachment = self.lock();
        if attachment.state == State::Detached {
            let (cupti_ns, at) = attachment.clock;
            return cupti_ns + at.elapsed().as_nanos() as u64;
        }
        let now = (read_cupti_clock(self.api), Instant::now());
        attachment.clock = now;
        now.0
    }

    /// Makes sure CUPTI is attached (a window is about to open). At the process's first attach, returns CUPTI's
    /// clock and the wall clock read together (ns), for the spool. Errors when CUPTI refused to attach.
    pub(crate) fn attach(&self) -> Result<Option<(u64, u64)>, String> {
        let mut attachment = self.lock();
        attachment.detach_due = None;
        match attachment.state {
            State::Attached => Ok(None),
            State::Armed => {
                self.switch_api_callbacks(attachment.subscriber, false);
                self.armed.store(false, Ordering::SeqCst);
                attachment.state = State::Attached;
                Ok(None)
            }
            State::Detached => {
                let first = !attachment.ever_attached;
                let subscriber = (self.reattach)(first)?;
                attachment.subscriber = subscriber as usize;
                attachment.state = State::Attached;
                attachment.ever_attached = true;
                attachment.clock = (read_cupti_clock(self.api), Instant::now());
                say_verbose(if first {
                    "CUPTI attached for the first window"
                } else {
                    "CUPTI attached again for a window"
                });
                Ok(first.then(|| (attachment.clock.0, crate::switch::wall_now_ns())))
            }
        }
    }

    /// Asks for CUPTI to be detached once a grace period has passed (no window is open any more).
    pub(crate) fn detach_later(&self, now: Instant) {
        let mut attachment = self.lock();
        if attachment.state == State::Attached && !self.pinned.load(Ordering::SeqCst) {
            attachment.detach_due = Some(now + self.grace);
        }
    }

    /// The background thread's turn: arms the detach when it is due. Returns how long until it is.
    pub(crate) fn tick(&self, now: Instant) -> Option<Duration> {
        let mut attachment = self.lock();
        let due = attachment.detach_due?;
        if now < due {
            return Some(due - now);
        }
        attachment.detach_due = None;
        if attachment.state == State::Attached && !self.pinned.load(Ordering::SeqCst) {
            // Records of work done since the window closed go out while CUPTI is still there to hand them over.
            // SAFETY: plain call; the buffer callbacks take no lock of ours that is held here.
            unsafe { self.api.cuptiActivityFlushAll(0) };
            self.switch_api_callbacks(attachment.subscriber, true);
            attachment.state = State::Armed;
            self.armed.store(true, Ordering::SeqCst);
        }
        None
    }

    /// At the exit of an API callback: detaches CUPTI when armed. Never waits for the lock (another thread
    /// attaching or flushing holds it; the next call tries again).
    pub(crate) fn on_api_exit(&self) {
        if !self.armed.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut attachment) = self.attachment.try_lock() else { return };
        if attachment.state != State::Armed {
            return;
        }
        // The last reading of CUPTI's clock, carried on while detached (see `now_ns`).
        attachment.clock = (read_cupti_clock(self.api), Instant::now());
        // NVTX's calls stop reaching CUPTI first: one reaching it after the detach would attach it again.
        crate::nvtx_gate::close();
        // Every buffer comes back before CUPTI lets go of them; kinds are off, so no new record is made.
        // SAFETY: plain calls, at an API callback's exit as CUPTI advises for cuptiFinalize.
        unsafe {
            self.api.cuptiActivityFlushAll(cupti::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
            self.api.cuptiFinalize();
        }
        (self.after_detach)();
        attachment.state = State::Detached;
        attachment.subscriber = 0;
        self.armed.store(false, Ordering::SeqCst);
        say_verbose("CUPTI detached");
    }

    /// A window opened: switches on the callbacks of the graph calls, so that the first one pins CUPTI.
    pub(crate) fn watch_graphs(&self) {
        let attachment = self.lock();
        if attachment.state == State::Detached || self.pinned.load(Ordering::SeqCst) {
            return;
        }
        let subscriber = attachment.subscriber as cupti::CUpti_SubscriberHandle;
        let domains = [
            (cupti::CUPTI_CB_DOMAIN_RUNTIME_API, &self.graph_cbids.runtime),
            (cupti::CUPTI_CB_DOMAIN_DRIVER_API, &self.graph_cbids.driver),
        ];
        for (domain, cbids) in domains {
            for &cbid in cbids {
                // SAFETY: plain call on our subscriber with an id CUPTI named.
                unsafe { self.api.cuptiEnableCallback(1, subscriber, domain, cbid) };
            }
        }
    }

    /// True when `cbid` (driver or runtime) is a graph call.
    pub(crate) fn is_graph_call(&self, driver: bool, cbid: u32) -> bool {
        let cbids = if driver { &self.graph_cbids.driver } else { &self.graph_cbids.runtime };
        cbids.contains(&cbid)
    }

    /// A graph call came while a window recorded: CUPTI stays attached from now on (see the module notes).
    pub(crate) fn pin(&self) {
        if self.pinned.swap(true, Ordering::SeqCst) {
            return;
        }
        eprintln!(
            "shardscope: process {}: a CUDA graph ran while recording: CUPTI stays attached outside windows from \
             now on (detached, it can break the graph's next launch)",
            std::process::id()
        );
    }

    /// Flushes CUPTI's buffers (`flag` as `cuptiActivityFlushAll` takes it), unless detached.
    pub(crate) fn flush(&self, flag: u32) {
        let attachment = self.lock();
        if attachment.state != State::Detached {
            // SAFETY: plain call; the buffer callbacks take no lock of ours that is held here.
            unsafe { self.api.cuptiActivityFlushAll(flag) };
        }
    }

    fn switch_api_callbacks(&self, subscriber: usize, on: bool) {
        for domain in [cupti::CUPTI_CB_DOMAIN_RUNTIME_API, cupti::CUPTI_CB_DOMAIN_DRIVER_API] {
            // SAFETY: our own subscriber and a valid domain.
            unsafe { self.api.cuptiEnableDomain(u32::from(on), subscriber as cupti::CUpti_SubscriberHandle, domain) };
        }
    }
}

/// One line on stderr when `SHARDSCOPE_VERBOSE` is set: what the capture did to CUPTI, for checking it on a GPU.
fn say_verbose(what: &str) {
    if std::env::var_os("SHARDSCOPE_VERBOSE").is_some() {
        eprintln!("shardscope: process {}: {what}", std::process::id());
    }
}

fn read_cupti_clock(api: &cupti::Cupti) -> u64 {
    let mut now_ns = 0u64;
    // SAFETY: plain out-parameter call.
    unsafe { api.cuptiGetTimestamp(&mut now_ns) };
    now_ns
}

/// Whether this process detaches CUPTI outside windows, or why not (a line for stderr, when worth saying). Not
/// while measuring parts of the library or timing the NCCL kernel sample, and not at CUDA graph level, where the
/// graph-trace kind must stay on (see `live.rs`, `start_activity`).
pub(crate) fn decide(
    plan: &WindowPlan,
    mode: OutsideWindows,
    api: &cupti::Cupti,
    measuring_or_sampling: bool,
    graph_level: bool,
) -> Result<(), Option<String>> {
    if !plan.starts_off() || mode == OutsideWindows::Attached || measuring_or_sampling {
        return Err(None);
    }
    if graph_level {
        let why = "at CUDA graph level the graph-trace kind stays on for the whole run: CUPTI stays attached";
        return Err((mode == OutsideWindows::Detached).then(|| why.into()));
    }
    if api.cuptiFinalize.is_err() || api.cuptiEnableDomain.is_err() {
        return Err(Some("this CUPTI cannot detach: it stays attached outside windows".into()));
    }
    if plan.nvtx_range.is_some() {
        let why = "the NVTX trigger reaches the capture only through CUPTI: it stays attached outside windows";
        return Err((mode == OutsideWindows::Detached).then(|| why.into()));
    }
    if !plan.cuda_profiler_api {
        return Ok(());
    }
    if !profiler_calls_interposed() {
        return Err(Some(
            "the capture library is not preloaded, so cudaProfilerStart is seen only through CUPTI: it stays \
             attached outside windows"
                .into(),
        ));
    }
    if mode == OutsideWindows::Auto && loaded_libraries("libcudart.so").is_empty() {
        return Err(Some(
            "no shared CUDA runtime is loaded (a statically linked one calls cudaProfilerStart past the capture): \
             CUPTI stays attached outside windows (--outside-windows detached to detach anyway)"
                .into(),
        ));
    }
    Ok(())
}

/// True when a call of `cudaProfilerStart` by name reaches this library first (it is preloaded).
fn profiler_calls_interposed() -> bool {
    // SAFETY: dlsym with a NUL-terminated name; the result is only compared.
    let found = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"cudaProfilerStart".as_ptr()) };
    std::ptr::eq(found as *const (), cudaProfilerStart as *const ())
}

/// Paths of the loaded libraries whose name contains `fragment`.
fn loaded_libraries(fragment: &str) -> Vec<String> {
    unsafe extern "C" fn collect(info: *mut libc::dl_phdr_info, _size: usize, found: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid info and our own Vec as `found`.
        let (info, found) = unsafe { (&*info, &mut *(found as *mut Vec<String>)) };
        if !info.dlpi_name.is_null() {
            // SAFETY: the loader's NUL-terminated name.
            found.push(unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned());
        }
        0
    }
    let mut names: Vec<String> = Vec::new();
    // SAFETY: the callback only reads what the loader passes and pushes into `names`, alive for the call.
    unsafe { libc::dl_iterate_phdr(Some(collect), &mut names as *mut Vec<String> as *mut c_void) };
    names.retain(|name| name.rsplit('/').next().is_some_and(|file| file.contains(fragment)));
    names
}

/// The real function behind one of the exported profiler calls: the next definition in symbol lookup, else the
/// one in a loaded library whose name contains `library` (libraries loaded with `RTLD_LOCAL`, as Python loads
/// extension modules and their dependencies, are not in the global lookup).
fn real_function(name: &CStr, library: &str, ours: usize) -> Option<usize> {
    // SAFETY: dlsym with a NUL-terminated name.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    if next != 0 && next != ours {
        return Some(next);
    }
    loaded_libraries(library).into_iter().find_map(|path| {
        let path = std::ffi::CString::new(path).ok()?;
        // SAFETY: RTLD_NOLOAD only finds a library already loaded; the extra reference is dropped at once.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if handle.is_null() {
            return None;
        }
        // SAFETY: a valid handle and a NUL-terminated name.
        let found = unsafe { libc::dlsym(handle, name.as_ptr()) } as usize;
        // SAFETY: the handle dlopen returned; the library stays loaded (it was before).
        unsafe { libc::dlclose(handle) };
        (found != 0 && found != ours).then_some(found)
    })
}

/// The four exported profiler calls.
#[derive(Clone, Copy)]
enum ProfilerCall {
    RuntimeStart,
    RuntimeStop,
    DriverStart,
    DriverStop,
}

impl ProfilerCall {
    fn name(self) -> &'static CStr {
        match self {
            ProfilerCall::RuntimeStart => c"cudaProfilerStart",
            ProfilerCall::RuntimeStop => c"cudaProfilerStop",
            ProfilerCall::DriverStart => c"cuProfilerStart",
            ProfilerCall::DriverStop => c"cuProfilerStop",
        }
    }

    fn runtime(self) -> bool {
        matches!(self, ProfilerCall::RuntimeStart | ProfilerCall::RuntimeStop)
    }

    fn starts(self) -> bool {
        matches!(self, ProfilerCall::RuntimeStart | ProfilerCall::DriverStart)
    }

    fn ours(self) -> usize {
        match self {
            ProfilerCall::RuntimeStart => cudaProfilerStart as *const () as usize,
            ProfilerCall::RuntimeStop => cudaProfilerStop as *const () as usize,
            ProfilerCall::DriverStart => cuProfilerStart as *const () as usize,
            ProfilerCall::DriverStop => cuProfilerStop as *const () as usize,
        }
    }

    fn real(self) -> Option<unsafe extern "C" fn() -> c_int> {
        static REAL: [OnceLock<Option<usize>>; 4] = [const { OnceLock::new() }; 4];
        let library = if self.runtime() { "libcudart.so" } else { "libcuda.so" };
        let address = *REAL[self as usize].get_or_init(|| real_function(self.name(), library, self.ours()));
        // SAFETY: the address of the CUDA function of this name, which takes nothing and returns its status.
        address.map(|a| unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> c_int>(a) })
    }
}

thread_local! {
    /// Depth of exported runtime profiler calls on this thread: a driver call the runtime makes inside is the
    /// same request.
    static IN_RUNTIME_CALL: Cell<u32> = const { Cell::new(0) };
}

/// What a window trigger from an exported profiler call does: set by the session when it detaches.
static ON_PROFILER_CALL: OnceLock<fn(bool)> = OnceLock::new();
/// Set once a profiler call reached the library while it switches on them.
static PROFILER_CALL_SEEN: AtomicBool = AtomicBool::new(false);

/// Routes the exported profiler calls to `trigger` (`true`: start) from now on.
pub(crate) fn route_profiler_calls(trigger: fn(bool)) {
    let _ = ON_PROFILER_CALL.set(trigger);
}

/// True once an exported profiler call switched something.
pub(crate) fn profiler_call_seen() -> bool {
    PROFILER_CALL_SEEN.load(Ordering::Relaxed)
}

/// One exported profiler call: the window opens after a start returns and closes before a stop enters (the
/// work between the two calls, and only it, is inside), then the real function runs. Without a real function
/// (nothing defines it: not reachable by a linked program) the call succeeds, as it does with no profiler.
fn profiler_call(call: ProfilerCall) -> c_int {
    let trigger = ON_PROFILER_CALL.get().copied().filter(|_| call.runtime() || IN_RUNTIME_CALL.get() == 0);
    let switch = |start: bool| {
        if let Some(trigger) = trigger {
            PROFILER_CALL_SEEN.store(true, Ordering::Relaxed);
            crate::live::guarded((), || trigger(start));
        }
    };
    if !call.starts() {
        switch(false);
    }
    if call.runtime() {
        IN_RUNTIME_CALL.set(IN_RUNTIME_CALL.get() + 1);
    }
    // SAFETY: the real CUDA function of this name.
    let status = call.real().map_or(0, |real| unsafe { real() });
    if call.runtime() {
        IN_RUNTIME_CALL.set(IN_RUNTIME_CALL.get().saturating_sub(1));
    }
    if call.starts() {
        switch(true);
    }
    status
}

/// `cudaProfilerStart`, seen on its way to the CUDA runtime (see the module notes).
#[unsafe(no_mangle)]
pub extern "C" fn cudaProfilerStart() -> c_int {
    profiler_call(ProfilerCall::RuntimeStart)
}

/// `cudaProfilerStop`, seen on its way to the CUDA runtime.
#[unsafe(no_mangle)]
pub extern "C" fn cudaProfilerStop() -> c_int {
    profiler_call(ProfilerCall::RuntimeStop)
}

/// `cuProfilerStart`, seen on its way to the CUDA driver.
#[unsafe(no_mangle)]
pub extern "C" fn cuProfilerStart() -> c_int {
    profiler_call(ProfilerCall::DriverStart)
}

/// `cuProfilerStop`, seen on its way to the CUDA driver.
#[unsafe(no_mangle)]
pub extern "C" fn cuProfilerStop() -> c_int {
    profiler_call(ProfilerCall::DriverStop)
}
