//! Switching recording on and off inside the workload, at the triggers of the capture window plan.
//!
//! [`Switch`] owns the CUPTI activity kinds and API calls that record work (kernels, copies, sets, API
//! calls, NVTX markers, graph launches); outside a window all of them are off, and only what detects a
//! trigger stays on: the callbacks of `cudaProfilerStart`/`Stop` (`cuProfilerStart`/`Stop`), the NVTX push
//! and pop, start and end callbacks when the trigger is an NVTX range, and the background thread's look at the clock and
//! at the control file (`capture start`/`stop`). Where the plan's triggers are seen without CUPTI, CUPTI itself is detached
//! between windows ([`Detacher`], `attach.rs`). Every trigger goes through the [`WindowMachine`]; a
//! transition's CUPTI calls run under its lock, so two triggers never interleave their switching.
//!
//! At the end of a window the background thread is woken to call `cuptiActivityFlushAll(0)`: records of
//! work already done go to the spool at once. Work launched inside the window and still running keeps its
//! record (CUPTI created it at launch, while its kind was on) and arrives with a later flush, complete;
//! a *forced* flush would hand it over unfinished, with zero timestamps, so it is kept for exit.
//! The NCCL profiler plugin asks [`shardscope_recording_on`] before each new event.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use shardscope_cupti_sys::v13 as cupti;
use shardscope_spool::config::{ControlCommand, WindowPlan, WindowTrigger};
use shardscope_spool::cupti::SpoolRecord;

use crate::attach::{self, Detacher};
use crate::window::{
    NvtxData, PushMessage, RangeOpen, TimeAction, TimeSchedule, Transition, WindowMachine, c_text, nvtx_cbid,
    nvtx_end_id, nvtx_push_message, range_open_kind, wide_text,
};

/// The API kinds a window opened after the start records whole (see [`Switch::apply`]).
const WHOLE_API_KINDS: [cupti::CUpti_ActivityKind; 2] =
    [cupti::CUPTI_ACTIVITY_KIND_RUNTIME, cupti::CUPTI_ACTIVITY_KIND_DRIVER];

/// Recording is on in this process (what the NCCL plugin asks). On until a plan says otherwise.
static RECORDING: AtomicBool = AtomicBool::new(true);

/// How often the background thread looks at the control file.
const CONTROL_POLL: Duration = Duration::from_millis(100);

/// `cuptiActivityEnableRuntimeApi` / `cuptiActivityEnableDriverApi`.
pub(crate) type EnableApi = unsafe extern "C" fn(cbid: u32, enable: u8) -> cupti::CUptiResult;

/// 1 while recording is on in this process, else 0. The NCCL profiler plugin looks this symbol up and
/// starts no event while it answers 0.
#[unsafe(no_mangle)]
pub extern "C" fn shardscope_recording_on() -> c_int {
    c_int::from(RECORDING.load(Ordering::Relaxed))
}

/// What recording switches: activity kinds and single API calls.
pub(crate) struct Recorded {
    /// Activity kinds on only inside windows.
    pub kinds: Vec<cupti::CUpti_ActivityKind>,
    /// Runtime callback ids recorded one by one, and the function that switches them.
    pub runtime_cbids: Vec<u32>,
    /// Driver callback ids recorded one by one.
    pub driver_cbids: Vec<u32>,
    /// `cuptiActivityEnableRuntimeApi`, when this CUPTI has it.
    pub enable_runtime: Option<EnableApi>,
    /// `cuptiActivityEnableDriverApi`, when this CUPTI has it.
    pub enable_driver: Option<EnableApi>,
}

impl Recorded {
    /// Nothing to switch: a window records nothing.
    pub fn nothing() -> Recorded {
        Recorded {
            kinds: Vec::new(),
            runtime_cbids: Vec::new(),
            driver_cbids: Vec::new(),
            enable_runtime: None,
            enable_driver: None,
        }
    }
}

/// The callback ids that start and stop a window on the profiler API, per domain.
#[derive(Debug, Default, Clone)]
pub(crate) struct ProfilerCbids {
    pub runtime_start: Vec<u32>,
    pub runtime_stop: Vec<u32>,
    pub driver_start: Vec<u32>,
    pub driver_stop: Vec<u32>,
}

/// The named NVTX range, and what is needed to recognise it.
struct NvtxTarget {
    name: String,
    domain: Option<String>,
    /// Domain handle → name, from `nvtxDomainCreateA`/`W`.
    domains: Mutex<HashMap<usize, String>>,
    /// Registered string handle → text, from `nvtxDomainRegisterStringA`/`W`.
    strings: Mutex<HashMap<usize, String>>,
    /// Named ranges started (`nvtxRangeStart*`) and not ended yet, by domain handle and range id.
    started: Mutex<HashSet<(usize, u64)>>,
    /// How many `started` holds, read without the lock on every end.
    started_open: AtomicUsize,
}

/// The background thread's own trigger state.
struct Watch {
    schedule: Option<TimeSchedule>,
    control_path: PathBuf,
    control_generation: u64,
    next_control_poll: Instant,
}

/// Switches recording in this process.
pub(crate) struct Switch {
    api: &'static cupti::Cupti,
    recorded: Recorded,
    profiler: ProfilerCbids,
    nvtx: Option<NvtxTarget>,
    machine: Mutex<WindowMachine>,
    watch: Mutex<Watch>,
    /// Window records for the background thread to write.
    pending: Mutex<Vec<SpoolRecord>>,
    flush_wanted: AtomicBool,
    /// The start state is applied: a window opening from now on records whole API kinds (see [`Switch::apply`]).
    after_start: AtomicBool,
    /// Detaches CUPTI while no window is open, where the plan's triggers allow it (see `attach.rs`).
    detacher: Option<Detacher>,
    /// The plan opens windows at `cudaProfilerStart`.
    profiler_api_trigger: bool,
}

thread_local! {
    /// Depth of runtime profiler calls on this thread: the driver call a runtime call makes inside is the
    /// same request, not a second one.
    static IN_RUNTIME_PROFILER_CALL: Cell<u32> = const { Cell::new(0) };
    /// One entry per open NVTX push of this thread: whether it was the named range.
    static NVTX_PUSHES: std::cell::RefCell<Vec<(usize, bool)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// CUPTI's `CUpti_ApiCallbackSite`: entering the call.
const SITE_ENTER: u32 = 0;

/// The head of CUPTI's `CUpti_CallbackData`: only the site is read.
#[repr(C)]
struct CallbackDataHead {
    callback_site: u32,
}

impl Switch {
    /// A switch for `plan`; `spool_dir` holds the control file, `session_start_ns` is the launcher's start.
    /// With a `detacher`, CUPTI is detached outside windows and the profiler API trigger comes through the
    /// library's exported profiler calls instead of CUPTI's callbacks.
    pub(crate) fn new(
        api: &'static cupti::Cupti,
        plan: &WindowPlan,
        recorded: Recorded,
        profiler: ProfilerCbids,
        spool_dir: PathBuf,
        session_start_ns: u64,
        detacher: Option<Detacher>,
    ) -> Switch {
        let nvtx = plan.nvtx_range.clone().map(|name| NvtxTarget {
            name,
            domain: plan.nvtx_domain.clone(),
            domains: Mutex::new(HashMap::new()),
            strings: Mutex::new(HashMap::new()),
            started: Mutex::new(HashSet::new()),
            started_open: AtomicUsize::new(0),
        });
        // Without the profiler API trigger, cudaProfilerStart/Stop leave recording alone (as nsys does).
        let profiler = if plan.cuda_profiler_api && detacher.is_none() { profiler } else { ProfilerCbids::default() };
        let now_ns = detacher.as_ref().map_or_else(|| cupti_now(api), Detacher::now_ns);
        Switch {
            api,
            recorded,
            profiler,
            nvtx,
            machine: Mutex::new(WindowMachine::new(plan, now_ns)),
            watch: Mutex::new(Watch {
                schedule: TimeSchedule::new(plan, session_start_ns),
                control_path: spool_dir.join(shardscope_spool::config::CONTROL_FILE_NAME),
                control_generation: 0,
                next_control_poll: Instant::now(),
            }),
            pending: Mutex::new(Vec::new()),
            flush_wanted: AtomicBool::new(false),
            after_start: AtomicBool::new(false),
            detacher,
            profiler_api_trigger: plan.cuda_profiler_api,
        }
    }

    /// CUPTI's clock now, ns (carried on from the monotonic clock while CUPTI is detached).
    fn now_ns(&self) -> u64 {
        self.detacher.as_ref().map_or_else(|| cupti_now(self.api), Detacher::now_ns)
    }

    /// True while CUPTI is detached (nothing may call it then).
    pub(crate) fn detached(&self) -> bool {
        self.detacher.as_ref().is_some_and(Detacher::detached)
    }

    /// Flushes CUPTI's buffers (`flag` as `cuptiActivityFlushAll` takes it), unless CUPTI is detached.
    pub(crate) fn flush(&self, flag: u32) {
        match &self.detacher {
            Some(detacher) => detacher.flush(flag),
            // SAFETY: plain call; the buffer callbacks take no lock of ours that is held here.
            None => unsafe {
                self.api.cuptiActivityFlushAll(flag);
            },
        }
    }

    /// An exported profiler call (`cudaProfilerStart`/`Stop`, `cuProfilerStart`/`Stop`) while CUPTI may be
    /// detached.
    pub(crate) fn profiler_call(&self, start: bool) {
        let trigger = WindowTrigger::CudaProfilerApi;
        if start {
            self.trigger_opening(|m, t| m.start(trigger, t), trigger);
        } else {
            self.trigger(|m, t| m.stop(trigger, t), trigger);
        }
    }

    /// Applies the start state (recording on unless the plan waits) and switches on the trigger callbacks
    /// of `subscriber` (null where CUPTI starts detached: the triggers then need none). A control file already
    /// there (a capture stopped before this process started) wins.
    pub(crate) fn install(&self, subscriber: cupti::CUpti_SubscriberHandle) {
        let on = self.lock_machine().recording();
        RECORDING.store(on, Ordering::SeqCst);
        if on {
            self.apply_api_selection(true);
            self.apply(true);
        }
        self.after_start.store(true, Ordering::SeqCst);
        if subscriber.is_null() {
            self.poll_control(Instant::now());
            return;
        }
        let enable = |domain, cbid| {
            // SAFETY: plain call on our subscriber; unknown ids are refused, not undefined.
            unsafe { self.api.cuptiEnableCallback(1, subscriber, domain, cbid) };
        };
        let p = &self.profiler;
        for &cbid in p.runtime_start.iter().chain(&p.runtime_stop) {
            enable(cupti::CUPTI_CB_DOMAIN_RUNTIME_API, cbid);
        }
        for &cbid in p.driver_start.iter().chain(&p.driver_stop) {
            enable(cupti::CUPTI_CB_DOMAIN_DRIVER_API, cbid);
        }
        if self.nvtx.is_some() {
            for cbid in nvtx_cbid::ALL {
                enable(cupti::CUPTI_CB_DOMAIN_NVTX, cbid);
            }
        }
        self.poll_control(Instant::now());
    }

    fn lock_machine(&self) -> std::sync::MutexGuard<'_, WindowMachine> {
        self.machine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Switches every recorded kind on or off, and the API records of a window opened after the start.
    ///
    /// CUPTI takes a selection of single API calls (`cuptiActivityEnableRuntimeApi`/`DriverApi`) only while the
    /// process starts: enabled later, no call is recorded (seen on CUPTI 13.0 with every trigger: windows opened by
    /// `cudaProfilerStart`, by time and by `capture start` kept their kernels and no API call). A window that opens
    /// after the start therefore records the runtime and driver kinds whole, every call, which CUPTI does switch at
    /// any time; the selection serves a capture that records from the start.
    fn apply(&self, on: bool) {
        let whole_api = self.after_start.load(Ordering::SeqCst) && self.selects_api_calls();
        if !on && self.selects_api_calls() {
            // The selection a capture that recorded from the start switched on.
            self.apply_api_selection(false);
        }
        for &kind in self.recorded.kinds.iter().chain(if whole_api { &WHOLE_API_KINDS[..] } else { &[] }) {
            // SAFETY: plain calls with a valid kind constant.
            let result =
                unsafe { if on { self.api.cuptiActivityEnable(kind) } else { self.api.cuptiActivityDisable(kind) } };
            if result != 0 && on {
                eprintln!("shardscope: cannot enable CUPTI activity kind {kind} (error {result})");
            }
        }
        crate::nccl_sample::window_switched(on);
    }

    /// True when API calls are recorded one callback id at a time.
    fn selects_api_calls(&self) -> bool {
        !self.recorded.runtime_cbids.is_empty() || !self.recorded.driver_cbids.is_empty()
    }

    /// Switches the selected single API calls on or off (at the start only: see [`Switch::apply`]).
    fn apply_api_selection(&self, on: bool) {
        let flag = u8::from(on);
        for (enable, cbids) in [
            (self.recorded.enable_runtime, &self.recorded.runtime_cbids),
            (self.recorded.enable_driver, &self.recorded.driver_cbids),
        ] {
            let Some(enable) = enable else { continue };
            for &cbid in cbids {
                // SAFETY: plain call with a callback id CUPTI named.
                unsafe { enable(cbid, flag) };
            }
        }
    }

    /// Runs one trigger through the machine and does what it decided.
    fn trigger(&self, step: impl FnOnce(&mut WindowMachine, u64) -> Transition, trigger: WindowTrigger) {
        self.run_trigger(step, trigger, false);
    }

    /// Runs a trigger that may open a window: CUPTI is attached first, so that the window's start is on its
    /// clock and its first launch is recorded.
    fn trigger_opening(&self, step: impl FnOnce(&mut WindowMachine, u64) -> Transition, trigger: WindowTrigger) {
        self.run_trigger(step, trigger, true);
    }

    fn run_trigger(
        &self,
        step: impl FnOnce(&mut WindowMachine, u64) -> Transition,
        trigger: WindowTrigger,
        opening: bool,
    ) {
        let mut machine = self.lock_machine();
        let attached = opening && !machine.recording() && !machine.exhausted() && self.attach_for_window();
        let now_ns = self.now_ns();
        let transition = step(&mut machine, now_ns);
        if attached && !matches!(transition, Transition::Opened) {
            self.detach_later();
        }
        match transition {
            Transition::Unchanged => {}
            Transition::Opened => {
                self.apply(true);
                if let Some(detacher) = &self.detacher {
                    detacher.watch_graphs();
                }
                RECORDING.store(true, Ordering::SeqCst);
            }
            Transition::Closed(window) => {
                // Off only once the kinds are: whoever reads the flag (`shardscope_recording_on`) then finds
                // nothing recorded any more, as the flag goes on only after they are on.
                self.apply(false);
                RECORDING.store(false, Ordering::SeqCst);
                self.lock_pending().push(SpoolRecord::Window(window));
                self.flush_wanted.store(true, Ordering::SeqCst);
                self.detach_later();
            }
            Transition::StrayStop { first } => {
                if first {
                    eprintln!(
                        "shardscope: process {}: a {} stop came while recording was off; ignored (nothing was lost)",
                        std::process::id(),
                        trigger.as_str()
                    );
                }
                self.lock_pending().push(SpoolRecord::WindowStrayStop { timestamp_ns: now_ns, trigger: trigger as u8 });
            }
        }
    }

    /// Attaches CUPTI for a window about to open; true when this process detaches at all. A refusal leaves
    /// recording off for good (one line on stderr).
    fn attach_for_window(&self) -> bool {
        let Some(detacher) = &self.detacher else { return false };
        match detacher.attach() {
            Ok(Some((cupti_clock_ns, realtime_ns))) => {
                self.lock_pending().push(SpoolRecord::ClockPair { cupti_clock_ns, realtime_ns });
            }
            Ok(None) => {}
            Err(why) => crate::live::give_up(&format!("cannot attach CUPTI for a window: {why}")),
        }
        true
    }

    fn detach_later(&self) {
        if let Some(detacher) = &self.detacher {
            detacher.detach_later(Instant::now());
        }
    }

    /// At the exit of a runtime or driver callback: where a detach is armed, CUPTI is detached here.
    fn on_api_exit(&self) {
        if let Some(detacher) = &self.detacher {
            detacher.on_api_exit();
        }
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Vec<SpoolRecord>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Window records to write, and whether a window closed since the last call (flush now).
    pub(crate) fn take_pending(&self) -> (Vec<SpoolRecord>, bool) {
        let records = std::mem::take(&mut *self.lock_pending());
        (records, self.flush_wanted.swap(false, Ordering::SeqCst))
    }

    /// The background thread's turn: the time schedule and the control file. Returns how long it may sleep.
    pub(crate) fn tick(&self) -> Duration {
        let now = Instant::now();
        let wall_ns = wall_now_ns();
        let due = {
            let mut watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
            watch.schedule.as_mut().and_then(|s| s.due(wall_ns))
        };
        match due {
            Some(TimeAction::Open) => self.trigger_opening(|m, t| m.start(WindowTrigger::Time, t), WindowTrigger::Time),
            Some(TimeAction::Close) => self.trigger(|m, t| m.stop(WindowTrigger::Time, t), WindowTrigger::Time),
            None => {}
        }
        self.poll_control(now);
        let until_detach = self.detacher.as_ref().and_then(|d| d.tick(Instant::now())).unwrap_or(Duration::MAX);
        let watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
        let until_control = watch.next_control_poll.saturating_duration_since(Instant::now()).min(until_detach);
        let until_schedule = watch
            .schedule
            .and_then(|s| s.next_deadline_ns())
            .map(|deadline| Duration::from_nanos(deadline.saturating_sub(wall_now_ns())));
        until_schedule.map_or(until_control, |d| d.min(until_control))
    }

    /// Reads the control file when due, and acts on a command it has not acted on yet.
    fn poll_control(&self, now: Instant) {
        let (path, seen) = {
            let mut watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
            if now < watch.next_control_poll {
                return;
            }
            watch.next_control_poll = now + CONTROL_POLL;
            (watch.control_path.clone(), watch.control_generation)
        };
        let Ok(text) = std::fs::read_to_string(&path) else { return };
        let Some(command) = ControlCommand::parse(&text).filter(|c| c.generation != seen) else { return };
        self.watch.lock().unwrap_or_else(|e| e.into_inner()).control_generation = command.generation;
        if command.recording {
            self.trigger_opening(|m, t| m.start(WindowTrigger::External, t), WindowTrigger::External);
        } else {
            self.trigger(|m, t| m.stop(WindowTrigger::External, t), WindowTrigger::External);
        }
    }

    /// At exit: closes the open window.
    pub(crate) fn at_exit(&self) {
        let mut machine = self.lock_machine();
        if self.detacher.is_some() && self.profiler_api_trigger && !attach::profiler_call_seen() {
            eprintln!(
                "shardscope: process {}: no cudaProfilerStart reached the capture through the shared CUDA runtime or \
                 driver; a call through a statically linked runtime or a ctypes handle is seen only with \
                 --outside-windows attached",
                std::process::id()
            );
        }
        if let Some(window) = machine.at_exit(self.now_ns()) {
            self.lock_pending().push(SpoolRecord::Window(window));
        }
    }

    /// A runtime or driver callback: the profiler API trigger, and graph calls while recording (they pin CUPTI).
    fn on_api(&self, driver: bool, cbid: u32, site: u32) {
        if let Some(detacher) = &self.detacher
            && RECORDING.load(Ordering::Relaxed)
            && detacher.is_graph_call(driver, cbid)
        {
            detacher.pin();
            return;
        }
        let p = &self.profiler;
        let (starts, stops) =
            if driver { (&p.driver_start, &p.driver_stop) } else { (&p.runtime_start, &p.runtime_stop) };
        let (is_start, is_stop) = (starts.contains(&cbid), stops.contains(&cbid));
        if !is_start && !is_stop {
            return;
        }
        if driver && IN_RUNTIME_PROFILER_CALL.get() > 0 {
            return;
        }
        if !driver {
            let depth = IN_RUNTIME_PROFILER_CALL.get();
            IN_RUNTIME_PROFILER_CALL.set(if site == SITE_ENTER { depth + 1 } else { depth.saturating_sub(1) });
        }
        // Open after the start call returns and close when the stop call enters: the work between the two
        // calls, and only it, is inside.
        let trigger = WindowTrigger::CudaProfilerApi;
        if is_start && site != SITE_ENTER {
            self.trigger(|m, t| m.start(trigger, t), trigger);
        } else if is_stop && site == SITE_ENTER {
            self.trigger(|m, t| m.stop(trigger, t), trigger);
        }
    }

    /// An NVTX callback: domain and string bookkeeping, and the pushes and pops, starts and ends of the named
    /// range.
    ///
    /// # Safety
    /// `data` is the `CUpti_NvtxData` CUPTI passed with `cbid`.
    unsafe fn on_nvtx(&self, cbid: u32, data: &NvtxData) {
        let Some(target) = &self.nvtx else { return };
        // SAFETY: each parameter and return struct is the one NVTX declares for `cbid`.
        unsafe {
            match cbid {
                nvtx_cbid::DOMAIN_CREATE_A | nvtx_cbid::DOMAIN_CREATE_W => {
                    if let Some(handle) = returned_handle(data) {
                        let name = if cbid == nvtx_cbid::DOMAIN_CREATE_A {
                            c_text(*(data.function_params as *const *const c_char))
                        } else {
                            wide_text(*(data.function_params as *const *const u32))
                        };
                        lock(&target.domains).insert(handle, name.unwrap_or_default());
                    }
                }
                nvtx_cbid::DOMAIN_REGISTER_STRING_A | nvtx_cbid::DOMAIN_REGISTER_STRING_W => {
                    if let Some(handle) = returned_handle(data) {
                        let text_at = (data.function_params as *const usize).add(1);
                        let text = if cbid == nvtx_cbid::DOMAIN_REGISTER_STRING_A {
                            c_text(*(text_at as *const *const c_char))
                        } else {
                            wide_text(*(text_at as *const *const u32))
                        };
                        lock(&target.strings).insert(handle, text.unwrap_or_default());
                    }
                }
                nvtx_cbid::RANGE_POP | nvtx_cbid::DOMAIN_RANGE_POP => self.on_nvtx_pop(cbid, data),
                nvtx_cbid::RANGE_END | nvtx_cbid::DOMAIN_RANGE_END => {
                    // Only ends of started named ranges matter; none open (the common case) takes no lock.
                    if target.started_open.load(Ordering::Relaxed) == 0 {
                        return;
                    }
                    let Some(end) = nvtx_end_id(cbid, data) else { return };
                    let was_target = lock(&target.started).remove(&end);
                    if was_target {
                        target.started_open.fetch_sub(1, Ordering::Relaxed);
                        self.trigger(|m, t| m.nvtx_pop(t), WindowTrigger::Nvtx);
                    }
                }
                _ => self.on_nvtx_open(target, cbid, data),
            }
        }
    }

    /// A pop: ranges nest per domain and thread, so it closes the last push of its own domain.
    ///
    /// # Safety
    /// `data` is the `CUpti_NvtxData` CUPTI passed with `cbid`.
    unsafe fn on_nvtx_pop(&self, cbid: u32, data: &NvtxData) {
        let domain = if cbid == nvtx_cbid::DOMAIN_RANGE_POP && !data.function_params.is_null() {
            // SAFETY: `nvtxDomainRangePop_params` holds the domain handle.
            unsafe { *(data.function_params as *const usize) }
        } else {
            0
        };
        let was_target = NVTX_PUSHES.with_borrow_mut(|pushes| {
            let last = pushes.iter().rposition(|(d, _)| *d == domain)?;
            Some(pushes.remove(last).1)
        }) == Some(true);
        if was_target {
            self.trigger(|m, t| m.nvtx_pop(t), WindowTrigger::Nvtx);
        }
    }

    /// A push or a start: whether it is the named range, remembered until its pop or end.
    ///
    /// # Safety
    /// `data` is the `CUpti_NvtxData` CUPTI passed with `cbid`.
    unsafe fn on_nvtx_open(&self, target: &NvtxTarget, cbid: u32, data: &NvtxData) {
        let Some(open) = range_open_kind(cbid) else { return };
        // SAFETY: the caller's promise.
        let Some((domain, message)) = (unsafe { nvtx_push_message(cbid, data) }) else { return };
        let hit = self.is_target(target, domain, &message);
        match open {
            RangeOpen::Push => NVTX_PUSHES.with_borrow_mut(|pushes| pushes.push((domain, hit))),
            RangeOpen::Start => {
                if !hit {
                    return;
                }
                // The id the start returned names the range its end closes (0 where NVTX gave none).
                // SAFETY: a start's return value is its `nvtxRangeId_t`.
                let id = unsafe { (data.function_return_value as *const u64).as_ref() }.copied().unwrap_or(0);
                if !lock(&target.started).insert((domain, id)) {
                    return;
                }
                target.started_open.fetch_add(1, Ordering::Relaxed);
            }
        }
        if hit {
            self.trigger(|m, t| m.nvtx_push(t), WindowTrigger::Nvtx);
        }
    }

    fn is_target(&self, target: &NvtxTarget, domain: usize, message: &PushMessage) -> bool {
        let domain_matches = match (&target.domain, domain) {
            (None, 0) => true,
            (None, _) | (Some(_), 0) => false,
            (Some(wanted), handle) => lock(&target.domains).get(&handle).is_some_and(|n| n == wanted),
        };
        domain_matches
            && match message {
                PushMessage::Text(text) => *text == target.name,
                PushMessage::Registered(handle) => lock(&target.strings).get(handle).is_some_and(|t| *t == target.name),
                PushMessage::Unreadable => false,
            }
    }
}

/// The subscriber's callback: hands each trigger callback to the process's [`Switch`].
///
/// # Safety
/// CUPTI's arguments: `cbdata` is the callback data of `domain`.
pub(crate) unsafe fn dispatch(switch: &Switch, domain: cupti::CUpti_CallbackDomain, cbid: u32, cbdata: *const c_void) {
    if cbdata.is_null() {
        return;
    }
    match domain {
        cupti::CUPTI_CB_DOMAIN_RUNTIME_API | cupti::CUPTI_CB_DOMAIN_DRIVER_API => {
            // SAFETY: API-domain callbacks pass a `CUpti_CallbackData`, whose first field is the site.
            let site = unsafe { (*(cbdata as *const CallbackDataHead)).callback_site };
            switch.on_api(domain == cupti::CUPTI_CB_DOMAIN_DRIVER_API, cbid, site);
            if site != SITE_ENTER {
                switch.on_api_exit();
            }
        }
        // SAFETY: NVTX-domain callbacks pass a `CUpti_NvtxData`.
        cupti::CUPTI_CB_DOMAIN_NVTX => unsafe { switch.on_nvtx(cbid, &*(cbdata as *const NvtxData)) },
        _ => {}
    }
}

/// The handle a create or register call returned, if any.
///
/// # Safety
/// `data` is the `CUpti_NvtxData` of a create or register callback, whose return value is a handle.
unsafe fn returned_handle(data: &NvtxData) -> Option<usize> {
    // SAFETY: the caller's promise; null when NVTX passed none.
    unsafe { (data.function_return_value as *const usize).as_ref() }.copied()
}

/// Locks `mutex`, taking the data of a poisoned one (a panic elsewhere must not stop the triggers).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// CUPTI's clock now, ns: the clock of its records.
fn cupti_now(api: &cupti::Cupti) -> u64 {
    let mut now_ns = 0u64;
    // SAFETY: plain out-parameter call.
    unsafe { api.cuptiGetTimestamp(&mut now_ns) };
    now_ns
}

/// The wall clock, ns since the Unix epoch.
pub(crate) fn wall_now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}
