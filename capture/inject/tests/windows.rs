//! Capture windows inside the workload, checked without a GPU against the stand-in libcupti
//! (`tests/data/fake_cupti.c`), which plays the workload's launches and calls: a launch gets a record only
//! while its kind is switched on, a record of a running kernel is delivered by an unforced flush only once
//! the kernel has finished, and a forced flush hands it over with zero timestamps.
//!
//! Each scenario runs in a child process (the library's state is per process): the cudaProfilerStart/Stop
//! trigger with a window that ends while a kernel is still running and a stop without a start; the NVTX
//! trigger by name and by domain, pushed or started (ended by id on another thread), ASCII, wide or
//! registered; the clock; two processes with different windows, both switched on again
//! by one external start command through the spool folder's control file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use shardscope_cupti_sys::v13 as cupti;
use shardscope_inject::window::nvtx_cbid;
use shardscope_spool::config::{self, ControlCommand, WindowPlan, WindowTrigger};
use shardscope_spool::cupti::{KernelRecord, SpoolRecord, WindowRecord};

const SCENARIO_ENV: &str = "SHARDSCOPE_TEST_WINDOW_SCENARIO";
const RUNTIME_DOMAIN: i32 = 2;
// The stand-in's callback ids (see fake_cupti.c).
const RUNTIME_LAUNCH_KERNEL: u32 = 2;
const RUNTIME_PROFILER_START: u32 = 7;
const RUNTIME_PROFILER_STOP: u32 = 8;
const SITE_ENTER: u32 = 0;
const SITE_EXIT: u32 = 1;
/// Kernel start and end the child gives its kernels, CUPTI clock.
const KERNEL_NS: (u64, u64) = (5_000, 9_000);

type Activity = unsafe extern "C" fn(i32, u32, *const u8, usize, usize, i32) -> i32;
type ApiCall = unsafe extern "C" fn(i32, u32, u32);
type Nvtx = unsafe extern "C" fn(u32, *const std::ffi::c_void, *const std::ffi::c_void);
type Complete = unsafe extern "C" fn();

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

    fn complete_all(&self) {
        let complete: Complete = self.symbol(b"fake_complete_all\0");
        // SAFETY: plain call into the stand-in.
        unsafe { complete() };
    }
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
    let attributes = shardscope_inject::window::NvtxEventAttributes {
        version: 3,
        size: 48,
        category: 0,
        color_type: 0,
        color: 0,
        payload_type: 0,
        reserved0: 0,
        payload: 0,
        message_type: 1,
        message: c"step".as_ptr() as *const _,
    };
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
        scope.spawn(|| end(5));
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
        "nvtx-start-domain" => nvtx_start_domain_scenario(&workload),
        "time" => time_scenario(&workload),
        "whole-run" => {
            assert!(workload.launch(1, true));
            workload.profiler(false);
            assert!(workload.launch(2, true), "cudaProfilerStop switched a whole-run capture off");
        }
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
    let dir = scratch(name);
    fake_cupti(&dir);
    let output = child(&dir, scenario, plan).output().unwrap();
    check(&output);
    let mut spools = spools(&dir);
    assert_eq!(spools.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
    (spools.remove(0), String::from_utf8_lossy(&output.stderr).into_owned())
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
