//! Capture windows inside the workload, checked without a GPU against the stand-in libcupti
//! (`tests/data/fake_cupti.c`), which plays the workload's launches and calls: a launch gets a record only
//! while its kind is switched on, a record of a running kernel is delivered by an unforced flush only once
//! the kernel has finished, and a forced flush hands it over with zero timestamps.
//!
//! What a launch meets in CUPTI while recording is off is counted too: the stand-in counts the subscriber's
//! callbacks it made and the switches on for the launch calls (their callbacks, single API records, whole API
//! kinds, kernel kinds): none outside a window, with every trigger waiting; and at CUDA graph level a replay gets
//! one graph record and its launch call's API records, no node record, and no node callback is switched on.
//!
//! Each scenario runs in a child process (the library's state is per process): the cudaProfilerStart/Stop
//! trigger with a window that ends while a kernel is still running and a stop without a start; the NVTX
//! trigger by name and by domain, pushed or started (ended by id on another thread), ASCII, wide or
//! registered; the clock; two processes with different windows, both switched on again
//! by one external start command through the spool folder's control file; and with CUPTI detached outside
//! windows, NVTX's calls reaching CUPTI only inside them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use shardscope_cupti_sys::v13 as cupti;
use shardscope_inject::omit::OMIT_ENV;
use shardscope_inject::window::nvtx_cbid;
use shardscope_spool::config::{self, ControlCommand, WindowPlan, WindowTrigger};
use shardscope_spool::cupti::{KernelRecord, SpoolRecord, WindowRecord};

const SCENARIO_ENV: &str = "SHARDSCOPE_TEST_WINDOW_SCENARIO";
const RUNTIME_DOMAIN: i32 = 2;
const DRIVER_DOMAIN: i32 = 1;
// The stand-in's callback ids (see fake_cupti.c).
const RUNTIME_LAUNCH_KERNEL: u32 = 2;
const RUNTIME_PROFILER_START: u32 = 7;
const RUNTIME_PROFILER_STOP: u32 = 8;
const RUNTIME_GRAPH_LAUNCH: u32 = 9;
const DRIVER_LAUNCH_KERNEL_EX: u32 = 2;
const DRIVER_PROFILER_START: u32 = 6;
const DRIVER_PROFILER_STOP: u32 = 7;
const DRIVER_GRAPH_LAUNCH: u32 = 8;
/// Kernel nodes of the replayed graph (the stand-in holds at most 256 pending records).
const GRAPH_NODES: usize = 100;
const SITE_ENTER: u32 = 0;
const SITE_EXIT: u32 = 1;
/// Kernel start and end the child gives its kernels, CUPTI clock.
const KERNEL_NS: (u64, u64) = (5_000, 9_000);

type Activity = unsafe extern "C" fn(i32, u32, *const u8, usize, usize, i32) -> i32;
type ApiCall = unsafe extern "C" fn(i32, u32, u32);
type Nvtx = unsafe extern "C" fn(u32, *const std::ffi::c_void, *const std::ffi::c_void);
type Complete = unsafe extern "C" fn();
type NodeActivity = unsafe extern "C" fn(*const u8, usize, usize) -> i32;
type Delivered = unsafe extern "C" fn() -> u64;
type SwitchesOn = unsafe extern "C" fn(i32, u32) -> i32;
type KindsOn = unsafe extern "C" fn() -> i32;
type Attached = unsafe extern "C" fn() -> i32;
type Attaches = unsafe extern "C" fn() -> u64;

/// The stand-in's workload functions, in the child.
struct Workload {
    library: libloading::Library,
    kernel_name: &'static std::ffi::CStr,
}

impl Workload {
    fn open() -> Workload {
        let path = std::env::var(config::CUPTI_LIB_ENV).unwrap();
        // SAFETY: the same stand-in library the injection library loaded; loading it again returns that handle.
        let library = unsafe { libloading::Library::new(path) }.unwrap();
        Workload { library, kernel_name: c"_Z6kernelv" }
    }

    fn symbol<T: Copy>(&self, name: &[u8]) -> T {
        // SAFETY: each symbol is looked up with the signature fake_cupti.c gives it.
        unsafe { *self.library.get::<T>(name).unwrap() }
    }

    /// Launches a kernel (and its launch call's API record); true when the kernel got a record.
    fn launch(&self, correlation_id: u32, finished: bool) -> bool {
        // SAFETY: an all-zero CUPTI record is valid plain data.
        let mut kernel: cupti::CUpti_ActivityKernel10 = unsafe { std::mem::zeroed() };
        kernel.kind = cupti::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        (kernel.start, kernel.end) = KERNEL_NS;
        kernel.correlationId = correlation_id;
        kernel.name = self.kernel_name.as_ptr();
        let timestamps_at = std::mem::offset_of!(cupti::CUpti_ActivityKernel10, start);
        // SAFETY: an all-zero CUPTI record is valid plain data.
        let mut api: cupti::CUpti_ActivityAPI = unsafe { std::mem::zeroed() };
        api.kind = cupti::CUPTI_ACTIVITY_KIND_RUNTIME;
        api.cbid = RUNTIME_LAUNCH_KERNEL;
        (api.start, api.end, api.correlationId) = (4_000, 4_500, correlation_id);
        let activity: Activity = self.symbol(b"fake_activity\0");
        // SAFETY: the records are plain data of the sizes passed.
        unsafe {
            activity(
                api.kind as i32,
                api.cbid,
                &api as *const _ as *const u8,
                size_of_val(&api),
                std::mem::offset_of!(cupti::CUpti_ActivityAPI, start),
                1,
            );
            activity(
                kernel.kind as i32,
                0,
                &kernel as *const _ as *const u8,
                size_of_val(&kernel),
                timestamps_at,
                i32::from(finished),
            ) == 1
        }
    }

    /// A kernel launched through `cudaLaunchKernel`, which calls `cuLaunchKernelEx`: CUPTI's callbacks for both
    /// calls (when switched on), then the records. True when the kernel got a record.
    fn launch_call(&self, correlation_id: u32) -> bool {
        self.api_call(RUNTIME_DOMAIN, RUNTIME_LAUNCH_KERNEL, || {
            self.api_call(DRIVER_DOMAIN, DRIVER_LAUNCH_KERNEL_EX, || {});
        });
        self.launch(correlation_id, true)
    }

    /// A call's enter and exit callbacks around `inside`.
    fn api_call(&self, domain: i32, cbid: u32, inside: impl FnOnce()) {
        let call: ApiCall = self.symbol(b"fake_api_call\0");
        // SAFETY: plain calls into the stand-in.
        unsafe { call(domain, cbid, SITE_ENTER) };
        inside();
        // SAFETY: as above.
        unsafe { call(domain, cbid, SITE_EXIT) };
    }

    /// One replay of a graph of [`GRAPH_NODES`] kernels through `cudaGraphLaunch` (which calls
    /// `cuGraphLaunch`). Returns the records it got: (API records, graph records, kernel records).
    fn graph_launch(&self, correlation_id: u32) -> (usize, usize, usize) {
        self.api_call(RUNTIME_DOMAIN, RUNTIME_GRAPH_LAUNCH, || {
            self.api_call(DRIVER_DOMAIN, DRIVER_GRAPH_LAUNCH, || {});
        });
        let activity: Activity = self.symbol(b"fake_activity\0");
        let node: NodeActivity = self.symbol(b"fake_graph_node_activity\0");
        let mut made = (0, 0, 0);
        for (kind, cbid) in [
            (cupti::CUPTI_ACTIVITY_KIND_RUNTIME, RUNTIME_GRAPH_LAUNCH),
            (cupti::CUPTI_ACTIVITY_KIND_DRIVER, DRIVER_GRAPH_LAUNCH),
        ] {
            // SAFETY: an all-zero CUPTI record is valid plain data.
            let mut api: cupti::CUpti_ActivityAPI = unsafe { std::mem::zeroed() };
            (api.kind, api.cbid, api.correlationId, api.start, api.end) = (kind, cbid, correlation_id, 4_000, 4_500);
            let at = std::mem::offset_of!(cupti::CUpti_ActivityAPI, start);
            // SAFETY: the record is plain data of the size passed.
            made.0 += unsafe { activity(kind as i32, cbid, &api as *const _ as *const u8, size_of_val(&api), at, 1) }
                as usize;
        }
        let graph = shardscope_inject::decode::ActivityGraphTrace2 {
            kind: cupti::CUPTI_ACTIVITY_KIND_GRAPH_TRACE,
            correlationId: correlation_id,
            start: KERNEL_NS.0,
            end: KERNEL_NS.1,
            deviceId: 0,
            graphId: 7,
            contextId: 1,
            streamId: 1,
            reserved: std::ptr::null_mut(),
        };
        let at = std::mem::offset_of!(shardscope_inject::decode::ActivityGraphTrace2, start);
        // SAFETY: as above.
        made.1 += unsafe { activity(graph.kind as i32, 0, &graph as *const _ as *const u8, size_of_val(&graph), at, 1) }
            as usize;
        for _ in 0..GRAPH_NODES {
            // SAFETY: an all-zero CUPTI record is valid plain data.
            let mut kernel: cupti::CUpti_ActivityKernel10 = unsafe { std::mem::zeroed() };
            kernel.kind = cupti::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
            (kernel.start, kernel.end, kernel.correlationId) = (KERNEL_NS.0, KERNEL_NS.1, correlation_id);
            kernel.name = self.kernel_name.as_ptr();
            let at = std::mem::offset_of!(cupti::CUpti_ActivityKernel10, start);
            // SAFETY: as above.
            made.2 += unsafe { node(&kernel as *const _ as *const u8, size_of_val(&kernel), at) } as usize;
        }
        made
    }

    /// Subscriber callbacks CUPTI made so far.
    fn delivered(&self) -> u64 {
        let delivered: Delivered = self.symbol(b"fake_delivered\0");
        // SAFETY: plain call into the stand-in.
        unsafe { delivered() }
    }

    /// What a launch meets in CUPTI now: the switches on for the launch calls and the graph launch calls
    /// (callbacks, single API records, whole API kinds) and the kernel kinds.
    fn launch_switches(&self) -> i32 {
        let switches: SwitchesOn = self.symbol(b"fake_switches_on\0");
        let kernel_kinds: KindsOn = self.symbol(b"fake_kernel_kinds_on\0");
        let calls = [
            (RUNTIME_DOMAIN, RUNTIME_LAUNCH_KERNEL),
            (DRIVER_DOMAIN, DRIVER_LAUNCH_KERNEL_EX),
            (RUNTIME_DOMAIN, RUNTIME_GRAPH_LAUNCH),
            (DRIVER_DOMAIN, DRIVER_GRAPH_LAUNCH),
        ];
        // SAFETY: plain calls into the stand-in.
        unsafe { calls.iter().map(|&(domain, cbid)| switches(domain, cbid)).sum::<i32>() + kernel_kinds() }
    }

    fn profiler(&self, start: bool) {
        let call: ApiCall = self.symbol(b"fake_api_call\0");
        let cbid = if start { RUNTIME_PROFILER_START } else { RUNTIME_PROFILER_STOP };
        // SAFETY: plain call into the stand-in.
        unsafe {
            call(RUNTIME_DOMAIN, cbid, SITE_ENTER);
            call(RUNTIME_DOMAIN, cbid, SITE_EXIT);
        }
    }

    fn nvtx(&self, cbid: u32, params: *const std::ffi::c_void, return_value: *const std::ffi::c_void) {
        let call: Nvtx = self.symbol(b"fake_nvtx\0");
        // SAFETY: the parameter struct is the one NVTX declares for `cbid`, alive for the call.
        unsafe { call(cbid, params, return_value) };
    }

    fn push(&self, message: &std::ffi::CStr) {
        let params = message.as_ptr();
        self.nvtx(nvtx_cbid::RANGE_PUSH_A, &params as *const _ as *const _, std::ptr::null());
    }

    fn pop(&self) {
        self.nvtx(nvtx_cbid::RANGE_POP, [0usize].as_ptr() as *const _, std::ptr::null());
    }

    /// Whether CUPTI is attached now, and how often a call attached it again after a detach.
    fn attached(&self) -> (bool, u64) {
        let attached: Attached = self.symbol(b"fake_attached\0");
        let attaches: Attaches = self.symbol(b"fake_attaches\0");
        // SAFETY: plain calls into the stand-in.
        unsafe { (attached() == 1, attaches()) }
    }

    /// Waits (up to 3 s) for the library to arm its detach (the runtime callbacks switched on), then makes CUDA
    /// calls until one's exit detached CUPTI: an exit that finds the background thread holding the library's lock
    /// (a flush) leaves the detach to the next call.
    fn detach_at_next_call(&self) {
        let switches: SwitchesOn = self.symbol(b"fake_switches_on\0");
        let deadline = Instant::now() + Duration::from_secs(3);
        // SAFETY: plain call into the stand-in.
        while unsafe { switches(RUNTIME_DOMAIN, RUNTIME_LAUNCH_KERNEL) } == 0 {
            assert!(Instant::now() < deadline, "the detach was never armed");
            std::thread::sleep(Duration::from_millis(2));
        }
        self.api_call(RUNTIME_DOMAIN, RUNTIME_LAUNCH_KERNEL, || {});
        while self.attached().0 {
            assert!(Instant::now() < deadline, "CUPTI still attached after the armed calls");
            std::thread::sleep(Duration::from_millis(1));
            self.api_call(RUNTIME_DOMAIN, RUNTIME_LAUNCH_KERNEL, || {});
        }
    }

    fn complete_all(&self) {
        let complete: Complete = self.symbol(b"fake_complete_all\0");
        // SAFETY: plain call into the stand-in.
        unsafe { complete() };
    }
}

/// A process that detaches CUPTI outside windows starts without it: nothing has called CUPTI yet.
fn never_attached(w: &Workload) {
    settle();
    assert_eq!(w.attached(), (false, 0), "CUPTI was attached before the first window");
}

/// Lets the background thread flush a few times (the flush interval is 20 ms in these runs).
fn settle() {
    std::thread::sleep(Duration::from_millis(150));
}

fn profiler_scenario(w: &Workload) {
    assert!(!w.launch(1, true), "recording on before cudaProfilerStart");
    w.profiler(true);
    assert!(w.launch(2, true));
    // Launched inside, still running when the window ends.
    assert!(w.launch(3, false));
    w.profiler(false);
    assert!(!w.launch(4, true), "recording on after cudaProfilerStop");
    settle();
    w.complete_all();
    settle();
    // A stop without a start: one warning, and the next window still works.
    w.profiler(false);
    w.profiler(false);
    w.profiler(true);
    assert!(w.launch(5, true));
}

fn nvtx_scenario(w: &Workload) {
    w.push(c"warm-up");
    assert!(!w.launch(1, true));
    w.pop();
    w.push(c"step");
    w.push(c"inner");
    assert!(w.launch(2, true));
    w.pop();
    assert!(w.launch(3, true), "the window ends with the named range, not an inner one");
    w.pop();
    assert!(!w.launch(4, true));
}

/// The domain variant: the named range counts only in its domain.
fn nvtx_domain_scenario(w: &Workload) {
    let domain: usize = 0x77;
    let name = c"app".as_ptr();
    w.nvtx(nvtx_cbid::DOMAIN_CREATE_A, &name as *const _ as *const _, &domain as *const _ as *const _);
    w.push(c"step");
    assert!(!w.launch(1, true), "the named range of the default domain opened a window");
    w.pop();
    let attributes = attributes(1, c"step".as_ptr() as *const _);
    let params: [usize; 2] = [domain, &attributes as *const _ as usize];
    w.nvtx(nvtx_cbid::DOMAIN_RANGE_PUSH_EX, params.as_ptr() as *const _, std::ptr::null());
    assert!(w.launch(2, true));
    w.nvtx(nvtx_cbid::DOMAIN_RANGE_POP, [domain].as_ptr() as *const _, std::ptr::null());
    assert!(!w.launch(3, true));
}

/// NVTX event attributes with `message` of `message_type` (1 ASCII, 2 wide, 3 registered).
fn attributes(message_type: i32, message: *const std::ffi::c_void) -> shardscope_inject::window::NvtxEventAttributes {
    shardscope_inject::window::NvtxEventAttributes {
        version: 3,
        size: 48,
        category: 0,
        color_type: 0,
        color: 0,
        payload_type: 0,
        reserved0: 0,
        payload: 0,
        message_type,
        message,
    }
}

/// A wide (`wchar_t`, UTF-32) string with its terminating NUL.
fn wide(text: &str) -> Vec<u32> {
    text.chars().map(u32::from).chain([0]).collect()
}

/// Started ranges (closed by id, here on another thread) and wide pushes of the named range.
fn nvtx_start_scenario(w: &Workload) {
    let start_a = |text: &std::ffi::CStr, id: u64| {
        let params = text.as_ptr();
        w.nvtx(nvtx_cbid::RANGE_START_A, &params as *const _ as *const _, &id as *const _ as *const _);
    };
    let end = |id: u64| w.nvtx(nvtx_cbid::RANGE_END, &id as *const _ as *const _, std::ptr::null());
    start_a(c"step", 5);
    assert!(w.launch(1, true));
    start_a(c"other", 6);
    end(6);
    assert!(w.launch(2, true), "the end of another range closed the window");
    std::thread::scope(|scope| {
        std::thread::Builder::new().name("range-end".into()).spawn_scoped(scope, || end(5)).unwrap();
    });
    assert!(!w.launch(3, true), "the end on another thread left the window open");
    let name = wide("step");
    let pointer = name.as_ptr();
    w.nvtx(nvtx_cbid::RANGE_PUSH_W, &pointer as *const _ as *const _, std::ptr::null());
    assert!(w.launch(4, true));
    w.pop();
    let wide_step = attributes(2, name.as_ptr() as *const _);
    let pointer: *const _ = &wide_step;
    let id: u64 = 9;
    w.nvtx(nvtx_cbid::RANGE_START_EX, &pointer as *const _ as *const _, &id as *const _ as *const _);
    assert!(w.launch(5, true));
    end(9);
    assert!(!w.launch(6, true));
}

/// The domain variant of started ranges, with a domain and a registered string made from wide strings.
fn nvtx_start_domain_scenario(w: &Workload) {
    let (domain, registered): (usize, usize) = (0x77, 0x55);
    let app = wide("app");
    let pointer = app.as_ptr();
    w.nvtx(nvtx_cbid::DOMAIN_CREATE_W, &pointer as *const _ as *const _, &domain as *const _ as *const _);
    let step = wide("step");
    let params: [usize; 2] = [domain, step.as_ptr() as usize];
    w.nvtx(nvtx_cbid::DOMAIN_REGISTER_STRING_W, params.as_ptr() as *const _, &registered as *const _ as *const _);
    let plain = c"step".as_ptr();
    let id: u64 = 1;
    w.nvtx(nvtx_cbid::RANGE_START_A, &plain as *const _ as *const _, &id as *const _ as *const _);
    assert!(!w.launch(1, true), "the named range of the default domain opened a window");
    w.nvtx(nvtx_cbid::RANGE_END, &id as *const _ as *const _, std::ptr::null());
    let by_handle = attributes(3, registered as *const _);
    let params: [usize; 2] = [domain, &by_handle as *const _ as usize];
    let id: u64 = 2;
    w.nvtx(nvtx_cbid::DOMAIN_RANGE_START_EX, params.as_ptr() as *const _, &id as *const _ as *const _);
    assert!(w.launch(2, true));
    let end: [u64; 2] = [domain as u64, 2];
    w.nvtx(nvtx_cbid::DOMAIN_RANGE_END, end.as_ptr() as *const _, std::ptr::null());
    assert!(!w.launch(3, true));
}

/// Recording off, with every trigger waiting (profiler API and NVTX): a thousand launches and a graph replay
/// make no callback and meet no switch; inside a window a launch still makes no callback (its records come
/// through the activity buffers), and after it all is off again.
fn off_launches_scenario(w: &Workload) {
    let before = w.delivered();
    for i in 0..1000 {
        assert!(!w.launch_call(i), "a launch got a record while recording was off");
    }
    assert_eq!(w.graph_launch(1000), (0, 0, 0), "a graph replay got records while recording was off");
    assert_eq!(w.delivered() - before, 0, "CUPTI callbacks for launches while recording was off");
    assert_eq!(w.launch_switches(), 0, "switches on for launches while recording was off");
    w.profiler(true);
    assert!(w.launch_switches() > 0, "the window switched nothing on");
    let before = w.delivered();
    assert!(w.launch_call(2000));
    assert_eq!(w.delivered() - before, 0, "a recorded launch went through a callback");
    w.profiler(false);
    let before = w.delivered();
    assert!(!w.launch_call(3000));
    assert_eq!((w.delivered() - before, w.launch_switches()), (0, 0), "left on after the window");
}

/// Graph replays before, inside and after a window: inside, one graph record and the launch call's API records
/// per replay and no kernel record of a node at graph level (every node's at node level); a kernel outside the
/// graph keeps its record either way. At graph level the graph-trace kind stays on outside windows too (CUPTI
/// 13.0 crashed graphs launched after it was switched on): replays outside get a graph record, which the merge
/// leaves out.
fn graph_replay_scenario(w: &Workload, graph_level: bool) {
    let outside = (0, usize::from(graph_level), 0);
    assert_eq!(w.graph_launch(1), outside);
    w.profiler(true);
    let before = w.delivered();
    let nodes = if graph_level { 0 } else { GRAPH_NODES };
    assert_eq!(w.graph_launch(2), (2, usize::from(graph_level), nodes));
    assert!(w.launch_call(3));
    assert_eq!(w.delivered() - before, 0, "callbacks for a replay or a launch inside the window");
    w.profiler(false);
    assert_eq!(w.graph_launch(4), outside);
}

/// Waits up to 3 s for the library to switch recording to `on`.
fn wait_for_recording(on: bool) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while (shardscope_inject::shardscope_recording_on() == 1) != on {
        assert!(Instant::now() < deadline, "recording never switched {}", if on { "on" } else { "off" });
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn time_scenario(w: &Workload) {
    // The plan: open 1 s after the session start, for 400 ms.
    assert!(!w.launch(1, true));
    wait_for_recording(true);
    assert!(w.launch(2, true));
    wait_for_recording(false);
    assert!(!w.launch(3, true));
}

/// CUPTI detached outside windows, with the profiler API seen through the library's own `cudaProfilerStart`/`Stop`:
/// nothing calls CUPTI while detached, each window attaches it again and records its launches, a kernel still
/// running at the stop keeps its times, and a stray stop while detached attaches nothing.
fn detached_profiler_scenario(w: &Workload) {
    never_attached(w);
    for i in 0..1000 {
        assert!(!w.launch_call(i), "a launch got a record while CUPTI was detached");
    }
    settle();
    assert_eq!(w.attached(), (false, 0), "something called CUPTI while it was detached");
    assert_eq!(shardscope_inject::cudaProfilerStart(), 0);
    assert_eq!(w.attached(), (true, 1), "the window did not attach CUPTI");
    assert!(w.launch(2000, true));
    assert!(w.launch(2001, false));
    assert_eq!(shardscope_inject::cudaProfilerStop(), 0);
    w.complete_all();
    w.detach_at_next_call();
    assert!(!w.launch(2002, true), "recording after the stop");
    assert_eq!(shardscope_inject::cuProfilerStop(), 0);
    settle();
    assert_eq!(w.attached(), (false, 1), "a stray stop attached CUPTI");
    assert_eq!(shardscope_inject::cuProfilerStart(), 0);
    assert!(w.launch(2003, true));
}

/// Eighty windows, each detaching CUPTI after it while CUPTI held a buffer it never returned: the held buffers come
/// back to the library's pool at each detach, so the pool (64 buffers) never runs dry.
fn detached_many_windows_scenario(w: &Workload) {
    never_attached(w);
    for i in 0..80 {
        assert_eq!(shardscope_inject::cudaProfilerStart(), 0);
        assert!(w.launch(i, true), "window {i} recorded nothing");
        assert_eq!(shardscope_inject::cudaProfilerStop(), 0);
        w.detach_at_next_call();
    }
}

/// An NVTX instance of the program, as NVTX's headers make one: its core slots and the export table a tool gets.
mod nvtx_client {
    use std::ffi::{c_int, c_void};
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub const RANGE_PUSH_A: usize = 9;
    static CORE: [AtomicUsize; 16] = [const { AtomicUsize::new(0) }; 16];
    static TABLE: OnceLock<Vec<usize>> = OnceLock::new();

    #[repr(C)]
    struct Callbacks {
        struct_size: usize,
        get_module_function_table: unsafe extern "C" fn(u32, *mut *mut *mut usize, *mut u32) -> c_int,
    }
    static CALLBACKS: Callbacks =
        Callbacks { struct_size: std::mem::size_of::<Callbacks>(), get_module_function_table: module_table };

    unsafe extern "C" fn module_table(module: u32, out_table: *mut *mut *mut usize, out_size: *mut u32) -> c_int {
        if module != 1 {
            return 0;
        }
        let table = TABLE.get_or_init(|| {
            let mut table = vec![0usize];
            table.extend(CORE.iter().skip(1).map(|slot| slot.as_ptr() as usize));
            table.push(0);
            table
        });
        // SAFETY: the caller's out-parameters; the table lives in a static.
        unsafe {
            *out_table = table.as_ptr().cast::<*mut usize>().cast_mut();
            *out_size = (table.len() - 1) as u32;
        }
        1
    }

    /// The instance's `nvtxGetExportTable`.
    pub unsafe extern "C" fn export_table(id: u32) -> *const c_void {
        if id == 1 { (&CALLBACKS as *const Callbacks).cast() } else { std::ptr::null() }
    }

    /// The program's `nvtxRangePushA`: through its slot, a no-op while the slot is empty.
    pub fn push(message: &std::ffi::CStr) {
        let function = CORE[RANGE_PUSH_A].load(Ordering::SeqCst);
        if function != 0 {
            // SAFETY: a tool filled the slot with its nvtxRangePushA.
            let push: unsafe extern "C" fn(*const std::ffi::c_char) -> c_int = unsafe { std::mem::transmute(function) };
            // SAFETY: a zero-terminated message.
            unsafe { push(message.as_ptr()) };
        }
    }
}

/// NVTX with CUPTI detached outside windows: NVTX's first call does not attach CUPTI (CUPTI's NVTX hook attaches
/// it, so it is called only at the first attach, once), and a push reaches CUPTI only while a window is open.
fn detached_nvtx_scenario(w: &Workload) {
    type Count = unsafe extern "C" fn() -> u64;
    let (pushes, inits): (Count, Count) = (w.symbol(b"fake_nvtx_pushes\0"), w.symbol(b"fake_nvtx_inits\0"));
    // SAFETY: the program's export table, as NVTX passes it.
    let initialized = unsafe { shardscope_inject::InitializeInjectionNvtx2(Some(nvtx_client::export_table)) };
    assert_eq!(initialized, 1);
    nvtx_client::push(c"outside");
    settle();
    // SAFETY: plain counters of the stand-in.
    let counts = || unsafe { (pushes(), inits()) };
    assert_eq!(w.attached(), (false, 0), "NVTX's first call attached CUPTI");
    assert_eq!(counts(), (0, 0));
    assert_eq!(shardscope_inject::cudaProfilerStart(), 0);
    nvtx_client::push(c"inside");
    assert_eq!(counts(), (1, 1), "a push inside the window did not reach CUPTI");
    assert_eq!(shardscope_inject::cudaProfilerStop(), 0);
    w.detach_at_next_call();
    nvtx_client::push(c"between");
    settle();
    assert_eq!(w.attached(), (false, 1), "a push between windows attached CUPTI again");
    assert_eq!(shardscope_inject::cudaProfilerStart(), 0);
    nvtx_client::push(c"second");
    assert_eq!(counts(), (2, 1), "the second window: one more push, the hook not called again");
    assert_eq!(shardscope_inject::cudaProfilerStop(), 0);
}

/// A graph launched while a window records pins CUPTI: after the window it is not detached (detached, CUPTI 13.0
/// broke such a graph's next launch), and the next window records without attaching again. A graph launched while
/// detached pins nothing.
fn detached_graph_scenario(w: &Workload) {
    never_attached(w);
    assert_eq!(w.graph_launch(1), (0, 0, 0));
    assert_eq!(w.attached(), (false, 0), "a graph launched while detached called CUPTI");
    assert_eq!(shardscope_inject::cudaProfilerStart(), 0);
    assert_eq!(w.graph_launch(2).2, GRAPH_NODES);
    assert_eq!(shardscope_inject::cudaProfilerStop(), 0);
    settle();
    let switches: SwitchesOn = w.symbol(b"fake_switches_on\0");
    // SAFETY: plain call into the stand-in.
    assert_eq!(unsafe { switches(RUNTIME_DOMAIN, RUNTIME_LAUNCH_KERNEL) }, 0, "a detach was armed after a graph ran");
    w.api_call(RUNTIME_DOMAIN, RUNTIME_LAUNCH_KERNEL, || {});
    assert_eq!(w.attached(), (true, 1), "CUPTI detached after a window in which a graph ran");
    assert_eq!(shardscope_inject::cudaProfilerStart(), 0);
    assert!(w.launch(3, true), "the second window recorded nothing");
    assert_eq!(w.attached(), (true, 1));
}

/// CUPTI detached outside a window of the clock: the background thread attaches it for the window and detaches
/// it after.
fn detached_time_scenario(w: &Workload) {
    never_attached(w);
    assert!(!w.launch(1, true));
    wait_for_recording(true);
    assert_eq!(w.attached(), (true, 1));
    assert!(w.launch(2, true));
    wait_for_recording(false);
    w.detach_at_next_call();
    assert!(!w.launch(3, true));
}

/// One of two processes: `windows` windows of its own, then recording switched on by an external start.
fn external_scenario(w: &Workload, windows: u32) {
    for i in 0..windows {
        w.profiler(true);
        assert!(w.launch(10 + i, true));
        w.profiler(false);
    }
    let spool_dir = PathBuf::from(std::env::var(config::SPOOL_DIR_ENV).unwrap());
    std::fs::write(spool_dir.with_file_name(format!("ready-{windows}")), "").unwrap();
    wait_for_recording(true);
    assert!(w.launch(20, true));
}

/// Waits up to 3 s for the stand-in's kernel kinds to go off.
fn wait_for_kernel_kinds_off(w: &Workload) {
    let kinds_on: KindsOn = w.symbol(b"fake_kernel_kinds_on\0");
    let deadline = Instant::now() + Duration::from_secs(3);
    // SAFETY: plain call into the stand-in.
    while unsafe { kinds_on() } != 0 {
        assert!(Instant::now() < deadline, "the NCCL kernel sample never switched kernel timing off");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `capture --comm-only` with a kernel sample: kernels are timed from the start until the NCCL plugin says the
/// sample is done (`ended_by_plugin`) or its time limit passes, and never after; a kernel still running when it
/// ends keeps its record.
fn nccl_sample_scenario(w: &Workload, ended_by_plugin: bool) {
    assert!(shardscope_inject::nccl_sample::sampling());
    assert!(w.launch(1, true), "no kernel timing for the sample");
    assert!(w.launch(2, false));
    if ended_by_plugin {
        shardscope_inject::shardscope_nccl_sample_done();
    }
    wait_for_kernel_kinds_off(w);
    assert!(!shardscope_inject::nccl_sample::sampling());
    assert!(!w.launch(3, true), "a kernel timed after the sample");
    w.complete_all();
}

/// The sample under `--cuda-profiler-api`: nothing timed before the first window, kernels timed inside it, and the
/// sample over when it closes (a second window times no kernel: `--comm-only` records none).
fn nccl_sample_window_scenario(w: &Workload) {
    assert!(!shardscope_inject::nccl_sample::sampling());
    assert!(!w.launch(1, true), "a kernel timed before the first window");
    w.profiler(true);
    assert!(shardscope_inject::nccl_sample::sampling());
    assert!(w.launch(2, true), "no kernel timing for the sample inside the window");
    w.profiler(false);
    assert!(!shardscope_inject::nccl_sample::sampling());
    assert!(!w.launch(3, true), "a kernel timed after the window");
    w.profiler(true);
    assert!(!w.launch(4, true), "the sample ran again in a second window");
}

/// The child: start recording, play the scenario, exit (the library's exit flush runs).
#[test]
fn child_entry() {
    let Ok(scenario) = std::env::var(SCENARIO_ENV) else { return };
    assert_eq!(shardscope_inject::InitializeInjection(), 1);
    let workload = Workload::open();
    match scenario.as_str() {
        "profiler" => profiler_scenario(&workload),
        "nvtx" => nvtx_scenario(&workload),
        "nvtx-domain" => nvtx_domain_scenario(&workload),
        "nvtx-start" => nvtx_start_scenario(&workload),
        "off-launches" => off_launches_scenario(&workload),
        "idle" => assert!(!workload.launch_call(1)),
        "graph-level" => graph_replay_scenario(&workload, true),
        "node-level" => graph_replay_scenario(&workload, false),
        "nvtx-start-domain" => nvtx_start_domain_scenario(&workload),
        "time" => time_scenario(&workload),
        "detached-profiler" => detached_profiler_scenario(&workload),
        "detached-time" => detached_time_scenario(&workload),
        "detached-many-windows" => detached_many_windows_scenario(&workload),
        "detached-graph" => detached_graph_scenario(&workload),
        "detached-nvtx" => detached_nvtx_scenario(&workload),
        "whole-run" => {
            assert!(workload.launch(1, true));
            workload.profiler(false);
            assert!(workload.launch(2, true), "cudaProfilerStop switched a whole-run capture off");
        }
        "nccl-sample-plugin" => nccl_sample_scenario(&workload, true),
        "nccl-sample-time" => nccl_sample_scenario(&workload, false),
        "nccl-sample-window" => nccl_sample_window_scenario(&workload),
        "comm-only" => assert!(!workload.launch(1, true), "a kernel timed under --comm-only without a sample"),
        "external-1" => external_scenario(&workload, 1),
        "external-2" => external_scenario(&workload, 2),
        other => panic!("unknown scenario {other}"),
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardscope-windows-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("spool")).unwrap();
    dir
}

fn fake_cupti(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake_cupti.c");
    let library = dir.join("libcupti_fake.so");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&compiler)
        .args(["-shared", "-fPIC", "-pthread", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("this test needs a C compiler ({compiler}): {e}"));
    assert!(status.success(), "{compiler} failed on {}", source.display());
    library
}

fn child(dir: &Path, scenario: &str, plan: &WindowPlan) -> Command {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(SCENARIO_ENV, scenario)
        .env(config::CUPTI_LIB_ENV, dir.join("libcupti_fake.so"))
        .env(config::SPOOL_DIR_ENV, dir.join("spool"))
        .env(config::FLUSH_MS_ENV, "20")
        .env(config::WINDOW_ENV, plan.to_env().unwrap())
        .env(config::SESSION_START_ENV, shardscope_spool_now_ns().to_string())
        .env_remove(config::TRACE_ENV)
        .env_remove("FAKE_CUPTI_LOG");
    child
}

fn shardscope_spool_now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
}

fn check(output: &Output) {
    assert!(output.status.success(), "child failed: {}", String::from_utf8_lossy(&output.stderr));
}

/// The records of every spool in the folder, one list per process.
fn spools(dir: &Path) -> Vec<Vec<SpoolRecord>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir.join("spool"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "spool"))
        .collect();
    paths.sort();
    paths.iter().map(|p| shardscope_spool::read_spool::<SpoolRecord>(p).unwrap().records).collect()
}

fn kernels(records: &[SpoolRecord]) -> Vec<KernelRecord> {
    records.iter().filter_map(|r| if let SpoolRecord::Kernel(k) = r { Some(*k) } else { None }).collect()
}

fn windows(records: &[SpoolRecord]) -> Vec<WindowRecord> {
    records.iter().filter_map(|r| if let SpoolRecord::Window(w) = r { Some(*w) } else { None }).collect()
}

fn triggers(windows: &[WindowRecord]) -> Vec<(WindowTrigger, WindowTrigger)> {
    windows
        .iter()
        .map(|w| (WindowTrigger::from_code(w.start_trigger).unwrap(), WindowTrigger::from_code(w.end_trigger).unwrap()))
        .collect()
}

/// Runs one scenario alone and returns its spool and stderr.
fn run_one(name: &str, scenario: &str, plan: &WindowPlan) -> (Vec<SpoolRecord>, String) {
    let (records, stderr, _) = run_logged(name, scenario, plan, &[]);
    (records, stderr)
}

/// Runs one scenario alone with `env` added and returns its spool, stderr and the stand-in's log of every
/// switching call.
fn run_logged(
    name: &str,
    scenario: &str,
    plan: &WindowPlan,
    env: &[(&str, &str)],
) -> (Vec<SpoolRecord>, String, String) {
    let dir = scratch(name);
    fake_cupti(&dir);
    let log = dir.join("calls.log");
    let mut command = child(&dir, scenario, plan);
    command.env("FAKE_CUPTI_LOG", &log);
    command.envs(env.iter().copied());
    let output = command.output().unwrap();
    check(&output);
    let mut spools = spools(&dir);
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    // No spool when the measurement left the subscription off.
    let records = if spools.is_empty() { Vec::new() } else { spools.remove(0) };
    assert!(spools.is_empty(), "one process, one spool");
    (records, String::from_utf8_lossy(&output.stderr).into_owned(), log)
}

/// The switching calls of the stand-in's log before the first window opened (the first kernel kind on).
fn before_first_window(log: &str) -> Vec<&str> {
    let opened = format!("kind {}", cupti::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    log.lines().take_while(|line| *line != opened).collect()
}

#[test]
fn outside_a_window_a_launch_makes_no_callback_and_meets_no_switch() {
    let plan = WindowPlan { cuda_profiler_api: true, nvtx_range: Some("step".into()), ..WindowPlan::default() };
    let (records, _, log) = run_logged("off-launches", "off-launches", &plan, &[]);
    assert_eq!(kernels(&records).iter().map(|k| k.correlation_id).collect::<Vec<_>>(), [2000]);
    let before = before_first_window(&log);
    // Exactly the trigger callbacks, one callback id at a time, and the node callbacks; no whole domain.
    let mut callbacks: Vec<u32> =
        before.iter().filter_map(|line| line.strip_prefix("callback ")?.strip_suffix(" 1")?.parse().ok()).collect();
    callbacks.sort();
    let mut expected = vec![
        1000 + DRIVER_PROFILER_START,
        1000 + DRIVER_PROFILER_STOP,
        2000 + RUNTIME_PROFILER_START,
        2000 + RUNTIME_PROFILER_STOP,
    ];
    expected.extend(nvtx_cbid::ALL.iter().map(|cbid| 5000 + cbid));
    expected.sort();
    assert_eq!(callbacks, expected, "{log}");
    let resource: Vec<&&str> = before.iter().filter(|l| l.starts_with("resource-callback")).collect();
    assert_eq!(resource, [&"resource-callback 13 1", &"resource-callback 20 1"]);
    assert!(!log.lines().any(|l| l.starts_with("domain") || l.starts_with("all-domains")), "{log}");
    // The one kind on from the start is the device records'; no API call is recorded before the window.
    let kinds: Vec<&&str> = before.iter().filter(|l| l.starts_with("kind")).collect();
    assert_eq!(kinds, [&format!("kind {}", cupti::CUPTI_ACTIVITY_KIND_DEVICE).as_str()]);
    assert!(!before.iter().any(|l| l.starts_with("runtime") || l.starts_with("driver")), "{log}");
}

#[test]
fn graph_level_records_one_graph_record_per_replay_and_switches_on_no_node_callback() {
    let plan = WindowPlan { cuda_profiler_api: true, ..WindowPlan::default() };
    let (records, _, log) = run_logged("graph-level", "graph-level", &plan, &[(config::GRAPH_TRACE_ENV, "graph")]);
    let graphs: Vec<u32> = records
        .iter()
        .filter_map(|r| if let SpoolRecord::GraphTrace(g) = r { Some(g.correlation_id) } else { None })
        .collect();
    assert_eq!(graphs, [1, 2, 4], "the graph-trace kind stays on; the merge keeps only the replay inside");
    assert_eq!(kernels(&records).iter().map(|k| k.correlation_id).collect::<Vec<_>>(), [3]);
    assert!(!log.contains("resource-callback"), "graph level needs no node callbacks: {log}");
    let graph_off = format!("kind_off {}", cupti::CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
    assert!(!log.lines().any(|l| l == graph_off), "the graph-trace kind went off: {log}");
    let position = |line: String| log.lines().position(|l| l == line);
    let graph_on = position(format!("kind {}", cupti::CUPTI_ACTIVITY_KIND_GRAPH_TRACE)).expect("graph kind on");
    let kernel_on = position(format!("kind {}", cupti::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)).expect("kernel kind on");
    assert!(graph_on < kernel_on, "the graph kind goes on before the kernel kind: {log}");

    let (records, _, log) = run_logged("node-level", "node-level", &plan, &[]);
    let kernels = kernels(&records);
    assert_eq!(kernels.len(), GRAPH_NODES + 1);
    assert!(!records.iter().any(|r| matches!(r, SpoolRecord::GraphTrace(_))));
    assert!(log.contains("resource-callback 13 1"), "node level keeps the node callbacks: {log}");
}

#[test]
fn the_nccl_kernel_sample_times_kernels_only_until_the_plugin_or_its_time_limit_ends_it() {
    let whole_run = WindowPlan::default();
    let comm_only = shardscope_spool::config::TraceKinds::comm_only().to_list();
    let sample = |text: &'static str| [(config::TRACE_ENV, comm_only.as_str()), (config::NCCL_KERNEL_SAMPLE_ENV, text)];
    // Ended by the plugin long before the 60 s limit; then by a 100 ms limit alone.
    for (scenario, text) in [("nccl-sample-plugin", "64/60000"), ("nccl-sample-time", "64/100")] {
        let (records, _, log) = run_logged(scenario, scenario, &whole_run, &sample(text));
        let timed: Vec<u32> = kernels(&records).iter().map(|k| k.correlation_id).collect();
        assert_eq!(timed, [1, 2], "{scenario}: the sample's kernels, the one running at its end included");
        let kernel_kind = cupti::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        assert!(log.contains(&format!("kind_off {kernel_kind}")), "{scenario}: {log}");
    }
    // In a capture that waits for its window, the sample waits too and ends with it.
    let profiler = WindowPlan { cuda_profiler_api: true, ..WindowPlan::default() };
    let (records, _, _) = run_logged("nccl-sample-window", "nccl-sample-window", &profiler, &sample("64/60000"));
    assert_eq!(kernels(&records).iter().map(|k| k.correlation_id).collect::<Vec<_>>(), [2]);
    // Without a sample, --comm-only times no kernel at all.
    let (records, _, log) = run_logged("comm-only", "comm-only", &whole_run, &[(config::TRACE_ENV, &comm_only)]);
    assert!(kernels(&records).is_empty());
    assert!(!log.contains(&format!("kind {}", cupti::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)), "{log}");
}

#[test]
fn cuda_profiler_api_windows_keep_a_kernel_still_running_at_the_stop_and_warn_once_for_a_stray_stop() {
    let plan = WindowPlan { cuda_profiler_api: true, ..WindowPlan::default() };
    let (records, stderr) = run_one("profiler", "profiler", &plan);
    let kernels = kernels(&records);
    let correlations: Vec<u32> = kernels.iter().map(|k| k.correlation_id).collect();
    assert_eq!(correlations, [2, 3, 5], "kernels launched inside the windows, and only those");
    // The kernel that was running at the stop came with its times: no forced flush lost them.
    assert!(kernels.iter().all(|k| (k.start_ns, k.end_ns) == KERNEL_NS), "{kernels:?}");
    let api_calls = records.iter().filter(|r| matches!(r, SpoolRecord::Api(_))).count();
    assert_eq!(api_calls, 3, "one launch call per recorded kernel");
    let windows = windows(&records);
    let profiler = (WindowTrigger::CudaProfilerApi, WindowTrigger::CudaProfilerApi);
    assert_eq!(triggers(&windows), [profiler, (WindowTrigger::CudaProfilerApi, WindowTrigger::ProcessExit)]);
    assert!(windows.iter().all(|w| w.end_ns >= w.start_ns));
    assert!(windows[0].end_ns <= windows[1].start_ns);
    let stray = records.iter().filter(|r| matches!(r, SpoolRecord::WindowStrayStop { .. })).count();
    assert_eq!(stray, 2);
    assert_eq!(stderr.matches("stop came while recording was off").count(), 1, "{stderr}");
    assert!(matches!(records.last(), Some(SpoolRecord::End { .. })), "the process ended cleanly");
}

#[test]
fn an_nvtx_range_by_name_opens_one_window_and_by_domain_only_in_its_domain() {
    let plan = WindowPlan { nvtx_range: Some("step".into()), ..WindowPlan::default() };
    let (records, _) = run_one("nvtx", "nvtx", &plan);
    assert_eq!(kernels(&records).iter().map(|k| k.correlation_id).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(triggers(&windows(&records)), [(WindowTrigger::Nvtx, WindowTrigger::Nvtx)]);

    let plan = WindowPlan { nvtx_range: Some("step".into()), nvtx_domain: Some("app".into()), ..WindowPlan::default() };
    let (records, _) = run_one("nvtx-domain", "nvtx-domain", &plan);
    assert_eq!(kernels(&records).iter().map(|k| k.correlation_id).collect::<Vec<_>>(), [2]);
    assert_eq!(windows(&records).len(), 1);
}

#[test]
fn started_nvtx_ranges_and_wide_names_open_windows_by_name_and_by_domain() {
    let plan = WindowPlan { nvtx_range: Some("step".into()), ..WindowPlan::default() };
    let (records, _) = run_one("nvtx-start", "nvtx-start", &plan);
    assert_eq!(kernels(&records).iter().map(|k| k.correlation_id).collect::<Vec<_>>(), [1, 2, 4, 5]);
    let nvtx = (WindowTrigger::Nvtx, WindowTrigger::Nvtx);
    assert_eq!(triggers(&windows(&records)), [nvtx, nvtx, nvtx]);

    let plan = WindowPlan { nvtx_range: Some("step".into()), nvtx_domain: Some("app".into()), ..WindowPlan::default() };
    let (records, _) = run_one("nvtx-start-domain", "nvtx-start-domain", &plan);
    assert_eq!(kernels(&records).iter().map(|k| k.correlation_id).collect::<Vec<_>>(), [2]);
    assert_eq!(triggers(&windows(&records)), [nvtx]);
}

#[test]
fn the_clock_opens_and_closes_a_window_after_the_session_start() {
    // The delay leaves the child time to start on a busy machine before the window opens.
    let plan = WindowPlan { delay_ns: Some(1_000_000_000), duration_ns: Some(400_000_000), ..WindowPlan::default() };
    let (records, _) = run_one("time", "time", &plan);
    assert_eq!(kernels(&records).iter().map(|k| k.correlation_id).collect::<Vec<_>>(), [2]);
    let windows = windows(&records);
    assert_eq!(triggers(&windows), [(WindowTrigger::Time, WindowTrigger::Time)]);
    let length_ms = (windows[0].end_ns - windows[0].start_ns) / 1_000_000;
    assert!((350..1000).contains(&length_ms), "window of {length_ms} ms for a 400 ms duration");
}

#[test]
fn detached_outside_windows_nvtx_reaches_cupti_only_inside_windows() {
    let plan = WindowPlan { cuda_profiler_api: true, ..WindowPlan::default() };
    let env = [(config::OUTSIDE_WINDOWS_ENV, "detached")];
    let (records, stderr, _) = run_logged("detached-nvtx", "detached-nvtx", &plan, &env);
    assert_eq!(windows(&records).len(), 2, "{stderr}");
    assert!(!stderr.contains("CUPTI took no NVTX functions"), "{stderr}");
}

#[test]
fn detached_outside_windows_cupti_is_attached_only_for_each_profiler_window_and_keeps_what_it_recorded() {
    let plan = WindowPlan { cuda_profiler_api: true, ..WindowPlan::default() };
    let env = [(config::OUTSIDE_WINDOWS_ENV, "detached")];
    let (records, stderr, log) = run_logged("detached-profiler", "detached-profiler", &plan, &env);
    let kernels = kernels(&records);
    assert_eq!(kernels.iter().map(|k| k.correlation_id).collect::<Vec<_>>(), [2000, 2001, 2003]);
    assert!(
        kernels.iter().all(|k| (k.start_ns, k.end_ns) == KERNEL_NS),
        "a running kernel lost its times: {kernels:?}"
    );
    let windows = windows(&records);
    let profiler = (WindowTrigger::CudaProfilerApi, WindowTrigger::CudaProfilerApi);
    assert_eq!(triggers(&windows), [profiler, (WindowTrigger::CudaProfilerApi, WindowTrigger::ProcessExit)]);
    assert!(windows[0].end_ns <= windows[1].start_ns && windows.iter().all(|w| w.end_ns >= w.start_ns));
    // Detached once, after the first window (the process started detached; the second window ends at exit).
    assert_eq!(log.lines().filter(|l| *l == "finalize 0").count(), 1, "{log}");
    // CUPTI's clock was first read at the first attach: the process record has none, the pair comes then, on
    // the clock of the windows' times.
    let header_clock =
        records.iter().find_map(|r| if let SpoolRecord::Process(p) = r { Some(p.cupti_clock_ns) } else { None });
    assert_eq!(header_clock, Some(0));
    let pairs: Vec<u64> = records
        .iter()
        .filter_map(
            |r| if let SpoolRecord::ClockPair { cupti_clock_ns, .. } = r { Some(*cupti_clock_ns) } else { None },
        )
        .collect();
    assert_eq!(pairs.len(), 1, "one clock pair, at the first attach");
    assert!(pairs[0] <= windows[0].start_ns, "the pair was read as the first window opened");
    // The device records of contexts made before the first attach come from a dump of the device kind, once.
    let device_dump = format!("kind-dump {}", cupti::CUPTI_ACTIVITY_KIND_DEVICE);
    assert_eq!(log.lines().filter(|l| *l == device_dump).count(), 1, "{log}");
    let device_on = format!("kind {}", cupti::CUPTI_ACTIVITY_KIND_DEVICE);
    assert!(!log.lines().any(|l| l == device_on), "{log}");
    // The profiler calls came through the library's own functions, not CUPTI's callbacks.
    assert!(!log.lines().any(|l| l.starts_with("callback 2007") || l.starts_with("callback 1006")), "{log}");
    assert_eq!(stderr.matches("stop came while recording was off").count(), 1, "{stderr}");
    assert!(!stderr.contains("no cudaProfilerStart reached"), "{stderr}");
    assert!(matches!(records.last(), Some(SpoolRecord::End { .. })), "the process ended cleanly");
}

#[test]
fn buffers_cupti_held_at_a_detach_come_back_so_many_windows_lose_nothing() {
    let plan = WindowPlan { cuda_profiler_api: true, ..WindowPlan::default() };
    let env = [(config::OUTSIDE_WINDOWS_ENV, "detached"), ("FAKE_CUPTI_HOLD_BUFFER", "1")];
    let (records, _, _) = run_logged("detached-many", "detached-many-windows", &plan, &env);
    assert_eq!(kernels(&records).len(), 80);
    assert_eq!(windows(&records).len(), 80);
    let refused = records.iter().any(|r| matches!(r, SpoolRecord::BuffersRefused { .. }));
    assert!(!refused, "the buffer pool ran dry");
}

#[test]
fn a_graph_that_ran_while_recording_keeps_cupti_attached_outside_windows_for_the_rest_of_the_process() {
    let plan = WindowPlan { cuda_profiler_api: true, ..WindowPlan::default() };
    let env = [(config::OUTSIDE_WINDOWS_ENV, "detached")];
    let (records, stderr, log) = run_logged("detached-graph", "detached-graph", &plan, &env);
    assert_eq!(kernels(&records).len(), GRAPH_NODES + 1);
    assert!(!log.contains("finalize"), "detached after the graph: {log}");
    assert_eq!(stderr.matches("a CUDA graph ran while recording").count(), 1, "{stderr}");
    assert_eq!(windows(&records).len(), 2);
}

/// A bad `SHARDSCOPE_OUTSIDE_WINDOWS` (set by hand: the launcher refuses one itself) is one line naming the value,
/// recording stays off and the workload runs on: nothing touches CUPTI and no spool is written.
#[test]
fn a_bad_outside_windows_value_is_one_line_and_the_workload_runs_unrecorded() {
    let plan = WindowPlan { cuda_profiler_api: true, ..WindowPlan::default() };
    let env = [(config::OUTSIDE_WINDOWS_ENV, "sometimes")];
    let (records, stderr, log) = run_logged("bad-outside-windows", "idle", &plan, &env);
    assert!(records.is_empty(), "a spool was written: {records:?}");
    let complaints: Vec<&str> = stderr.lines().filter(|l| l.starts_with("shardscope:")).collect();
    assert_eq!(complaints.len(), 1, "{stderr}");
    assert!(complaints[0].contains("recording off") && complaints[0].contains("'sometimes'"), "{stderr}");
    assert!(log.is_empty(), "CUPTI was called: {log}");
}

#[test]
fn detached_outside_windows_a_window_of_the_clock_attaches_cupti_and_detaches_it_after() {
    let plan = WindowPlan { delay_ns: Some(1_000_000_000), duration_ns: Some(400_000_000), ..WindowPlan::default() };
    // `auto` detaches here: the clock is seen without CUPTI.
    let (records, _, log) = run_logged("detached-time", "detached-time", &plan, &[]);
    assert_eq!(kernels(&records).iter().map(|k| k.correlation_id).collect::<Vec<_>>(), [2]);
    assert_eq!(triggers(&windows(&records)), [(WindowTrigger::Time, WindowTrigger::Time)]);
    assert_eq!(log.lines().filter(|l| *l == "finalize 0").count(), 1, "{log}");
}

#[test]
fn with_the_nvtx_trigger_or_asked_to_cupti_stays_attached_outside_windows() {
    let nvtx = WindowPlan { nvtx_range: Some("step".into()), ..WindowPlan::default() };
    let (_, _, log) = run_logged("attached-nvtx", "nvtx", &nvtx, &[(config::OUTSIDE_WINDOWS_ENV, "detached")]);
    assert!(!log.contains("finalize"), "{log}");
    let timed = WindowPlan { delay_ns: Some(1_000_000_000), duration_ns: Some(400_000_000), ..WindowPlan::default() };
    let (records, _, log) = run_logged("attached-time", "time", &timed, &[(config::OUTSIDE_WINDOWS_ENV, "attached")]);
    assert!(!log.contains("finalize"), "{log}");
    assert_eq!(kernels(&records).len(), 1);
}

#[test]
fn two_processes_keep_their_own_windows_and_one_external_start_reaches_both() {
    let dir = scratch("external");
    fake_cupti(&dir);
    let plan = WindowPlan { cuda_profiler_api: true, ..WindowPlan::default() };
    let children: Vec<_> =
        ["external-1", "external-2"].iter().map(|s| child(&dir, s, &plan).spawn().unwrap()).collect();
    // What `capture start` writes (capture/src/control.rs), after both have taken their own windows.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(dir.join("ready-1").exists() && dir.join("ready-2").exists()) {
        assert!(Instant::now() < deadline, "the two processes never got ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    let command = ControlCommand { recording: true, generation: 1 };
    let control = dir.join("spool").join(config::CONTROL_FILE_NAME);
    std::fs::write(dir.join("control.partial"), command.to_text()).unwrap();
    std::fs::rename(dir.join("control.partial"), &control).unwrap();
    for child in children {
        check(&child.wait_with_output().unwrap());
    }
    let spools = spools(&dir);
    assert_eq!(spools.len(), 2);
    let mut seen: Vec<(usize, Vec<u32>)> = spools
        .iter()
        .map(|records| (windows(records).len(), kernels(records).iter().map(|k| k.correlation_id).collect()))
        .collect();
    seen.sort();
    assert_eq!(seen, [(2, vec![10, 20]), (3, vec![10, 11, 20])]);
    for records in &spools {
        let last = *triggers(&windows(records)).last().unwrap();
        assert_eq!(last, (WindowTrigger::External, WindowTrigger::ProcessExit));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_the_profiler_trigger_cuda_profiler_stop_leaves_a_whole_run_capture_recording() {
    let (records, stderr) = run_one("whole-run", "whole-run", &WindowPlan::default());
    assert_eq!(kernels(&records).iter().map(|k| k.correlation_id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(triggers(&windows(&records)), [(WindowTrigger::ProcessStart, WindowTrigger::ProcessExit)]);
    assert!(!stderr.contains("stop came while recording was off"), "{stderr}");
}

#[test]
fn a_measurement_can_leave_each_part_off() {
    let plan = WindowPlan { cuda_profiler_api: true, ..WindowPlan::default() };
    let omit = |parts: &str| run_logged(&format!("omit-{parts}"), "idle", &plan, &[(OMIT_ENV, parts)]);
    let (_, stderr, log) = omit("runtime-triggers,device-kind,graph-nodes");
    let lines: Vec<&str> = log.lines().collect();
    let driver_only =
        [format!("callback {} 1", 1000 + DRIVER_PROFILER_START), format!("callback {} 1", 1000 + DRIVER_PROFILER_STOP)];
    assert_eq!(lines, driver_only, "{stderr}");
    assert!(stderr.contains("left off for a measurement"), "{stderr}");
    let (_, _, log) = omit("driver-triggers,runtime-triggers,activity");
    assert!(log.lines().all(|l| l.starts_with("resource-callback")), "{log}");
    let (records, _, log) = omit("subscribe");
    assert!(records.is_empty() && log.is_empty(), "{log}");
    let (_, stderr, _) = omit("everything");
    assert!(stderr.contains("unknown part 'everything'"), "{stderr}");
}

/// CUPTI takes single-call API selections only at the start (the stand-in plays that with
/// FAKE_CUPTI_SELECTION_AT_START_ONLY): a window opened by `cudaProfilerStart` records the runtime and driver kinds
/// whole, so the calls that launched its kernels are kept, and switches them off again at its end.
#[test]
fn a_window_opened_after_the_start_keeps_the_api_calls_of_its_launches() {
    let plan = WindowPlan { cuda_profiler_api: true, ..WindowPlan::default() };
    let env = [("FAKE_CUPTI_SELECTION_AT_START_ONLY", "1")];
    let (records, _, log) = run_logged("late-selection", "profiler", &plan, &env);
    let launched: Vec<u32> = kernels(&records).iter().map(|k| k.correlation_id).collect();
    let mut calls: Vec<u32> = records
        .iter()
        .filter_map(|r| if let SpoolRecord::Api(a) = r { Some(a.correlation_id) } else { None })
        .collect();
    calls.sort();
    calls.dedup();
    assert_eq!(launched, [2, 3, 5], "{log}");
    assert_eq!(calls, [2, 3, 5], "each kernel of a window with the call that launched it: {log}");
    let runtime_kind = format!("kind {}", cupti::CUPTI_ACTIVITY_KIND_RUNTIME);
    let runtime_off = format!("kind_off {}", cupti::CUPTI_ACTIVITY_KIND_RUNTIME);
    assert_eq!(log.lines().filter(|l| *l == runtime_kind).count(), 2, "on at each of the two openings: {log}");
    assert!(log.lines().any(|l| l == runtime_off), "off again at the stop: {log}");

    // A capture that records from the start still selects single calls, once, before any work.
    let (records, _, log) = run_logged("start-selection", "whole-run", &WindowPlan::default(), &env);
    let calls = records.iter().filter(|r| matches!(r, SpoolRecord::Api(_))).count();
    assert_eq!((kernels(&records).len(), calls), (2, 2), "{log}");
    assert!(!log.lines().any(|l| l == runtime_kind), "no whole API kind from the start: {log}");
    assert!(log.lines().any(|l| l.starts_with("runtime ") && l.ends_with(" 1")), "{log}");
}
