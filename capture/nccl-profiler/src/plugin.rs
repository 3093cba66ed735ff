//! The plugin itself: the exported `ncclProfiler_v5`/`_v4`/`_v3` tables and the recorder behind them.
//!
//! Design choices, each for a reason:
//! - **Handles are numbers, not pointers.** Every handle and context given to NCCL is a tagged
//!   64-bit number (`tag << 56 | id`). NCCL stops a collective as soon as it is enqueued, yet
//!   later passes that collective's handle as the parent of its kernel-channel events; with
//!   numbers there is nothing to free or to dangle, and a parent is identified without reading
//!   memory. The records refer to each other by these ids and the reader joins them.
//! - **NCCL's threads never wait on I/O.** Callbacks encode a fixed-size record into a
//!   buffer under a mutex held only for that copy. A background thread swaps the buffer out
//!   and writes it as one frame every `SHARDSCOPE_FLUSH_MS` (default 200 ms); `finalize` and
//!   process exit flush too. A full buffer drops records and counts them.
//! - **Nothing unwinds into NCCL**: every entry point runs under `catch_unwind` and returns
//!   `ncclSuccess`.
//! - **The library pins itself** (`RTLD_NODELETE`) on first use: NCCL unloads the plugin when its
//!   last communicator is destroyed, and the flush thread and exit handler live in its code.
//!
//! - **Only the events the analysis uses are asked for**: groups, collectives and point-to-point
//!   operations. Kernel-channel events (per-channel GPU timers) make NCCL post proxy work for every
//!   collective, which lengthens the launch path of a tensor-parallel decode; they are opt-in.
//!
//! - **Outside a capture window no event starts**: the injection library's `shardscope_recording_on` is
//!   asked before each new event (events started inside a window still end normally).
//!
//! Configuration (environment): `SHARDSCOPE_SPOOL_DIR` (required; without it the plugin prints
//! one line to stderr and asks NCCL for no events), `SHARDSCOPE_NCCL_KERNEL_TIMERS=1` (also ask
//! for kernel-channel events, which carry the GPU timers), `SHARDSCOPE_NCCL_KERNEL_SAMPLE` (with the timers:
//! after this many collectives are launched, tell the injection library to stop timing kernels), `SHARDSCOPE_FLUSH_MS`.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::ffi::{self, NCCL_SUCCESS, NcclDebugLogger, NcclResult, event};
/// The environment names both libraries share: the spool folder, the flush interval, and `1` to turn
/// kernel-channel events (GPU timers) on.
pub use shardscope_spool::config::{FLUSH_MS_ENV, NCCL_KERNEL_TIMERS_ENV as KERNEL_TIMERS_ENV, SPOOL_DIR_ENV};
use shardscope_spool::config::{NCCL_KERNEL_SAMPLE_ENV, NcclKernelSample};
use shardscope_spool::hostname;
use shardscope_spool::nccl::{
    self as spool, CollStart, CommunicatorRecord, FixedName, NcclRecord, P2pStart, ProcessRecord, ShortName,
};

/// Longest the pending buffer may grow before records are dropped (a stalled disk must not
/// make the workload run out of memory).
const MAX_PENDING_BYTES: usize = 16 << 20;
/// Default time between background flushes.
const DEFAULT_FLUSH_MS: u64 = 200;

/// What a handle stands for, in its top byte.
mod tag {
    pub const COMM: u64 = 1;
    pub const GROUP: u64 = 2;
    pub const COLL: u64 = 3;
    pub const P2P: u64 = 4;
    pub const KERNEL_CH: u64 = 5;
}
const TAG_SHIFT: u32 = 56;
const ID_MASK: u64 = (1 << TAG_SHIFT) - 1;

/// Ids for events and communicator contexts; 0 is never handed out.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn new_handle(tag: u64) -> (u64, *mut c_void) {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed) & ID_MASK;
    (id, ((tag << TAG_SHIFT) | id) as usize as *mut c_void)
}

/// The (tag, id) of a handle this plugin made; `None` for null or anything else (user-space
/// pointers have a zero top byte).
fn decode_handle(handle: *const c_void) -> Option<(u64, u64)> {
    let value = handle as usize as u64;
    let tag = value >> TAG_SHIFT;
    ((tag::COMM..=tag::KERNEL_CH).contains(&tag) && value & ID_MASK != 0).then_some((tag, value & ID_MASK))
}

/// The id of `handle` if it carries one of `tags`, else 0.
fn id_if(handle: *const c_void, tags: &[u64]) -> u64 {
    match decode_handle(handle) {
        Some((t, id)) if tags.contains(&t) => id,
        _ => 0,
    }
}

/// `CLOCK_MONOTONIC` in ns.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only into `ts`.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The spool file and the buffer of encoded records waiting for it.
struct Recorder {
    pid: u32,
    path: PathBuf,
    /// Encoded records, after 8 bytes reserved for the frame header.
    pending: Mutex<Vec<u8>>,
    /// The file and a second buffer; held for the whole write so frames never interleave.
    output: Mutex<Output>,
    dropped: AtomicU64,
    kernel_timers: bool,
}

struct Output {
    file: File,
    frame: Vec<u8>,
}

/// Locks even a poisoned mutex: the data (bytes) stays consistent whatever panicked.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Recorder {
    fn open(dir: &Path) -> std::io::Result<Recorder> {
        let pid = std::process::id();
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{}{pid}{}", spool::FILE_PREFIX, spool::FILE_SUFFIX));
        let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
        // A file left by an earlier process with the same pid: start over.
        file.set_len(0)?;
        file.write_all(spool::MAGIC)?;
        let mut pending = Vec::with_capacity(256 << 10);
        pending.extend_from_slice(&[0; 8]);
        let kernel_timers = std::env::var(KERNEL_TIMERS_ENV).is_ok_and(|v| v.trim() == "1");
        let recorder = Recorder {
            pid,
            path,
            pending: Mutex::new(pending),
            output: Mutex::new(Output { file, frame: Vec::with_capacity(256 << 10) }),
            dropped: AtomicU64::new(0),
            kernel_timers,
        };
        if kernel_timers {
            start_sample();
        }
        let process = process_record(pid);
        if kernel_timers && let Some(note) = spool::costly_kernel_timers(process.nccl_version) {
            eprintln!("shardscope-nccl-profiler: warning: {note}");
        }
        recorder.push(&NcclRecord::Process(process));
        recorder.flush();
        Ok(recorder)
    }

    /// Buffers one record; drops it (counted) when the buffer is full.
    fn push(&self, record: &NcclRecord) {
        let mut pending = lock(&self.pending);
        if pending.len() > MAX_PENDING_BYTES {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        record.encode(&mut pending);
    }

    /// Writes everything buffered as one frame, with a clock pair and the drop count.
    fn flush(&self) {
        let mut output = lock(&self.output);
        let Output { file, frame } = &mut *output;
        {
            let mut pending = lock(&self.pending);
            if pending.len() <= 8 && self.dropped.load(Ordering::Relaxed) == 0 {
                return;
            }
            frame.clear();
            frame.extend_from_slice(&[0; 8]);
            // Swap rather than copy so the callbacks wait only for a pointer exchange.
            std::mem::swap(&mut *pending, frame);
        }
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            NcclRecord::Dropped { records: dropped }.encode(frame);
        }
        let (monotonic_ns, realtime_ns) = clock_pair();
        NcclRecord::ClockSync { monotonic_ns, realtime_ns }.encode(frame);
        NcclRecord::CallbackCost {
            callback_ns: CALLBACK_NS.load(Ordering::Relaxed),
            callbacks: CALLBACKS.load(Ordering::Relaxed),
        }
        .encode(frame);
        spool::seal_frame(frame);
        // A failed write loses this batch only; there is nobody to report it to but stderr,
        // and printing on every flush would flood it, so the next frame simply goes on.
        let _ = file.write_all(frame);
    }
}

/// `CLOCK_MONOTONIC` and `CLOCK_REALTIME`, read back to back.
fn clock_pair() -> (u64, u64) {
    let monotonic = monotonic_ns();
    let realtime = clock_ns(libc::CLOCK_REALTIME);
    (monotonic, realtime)
}

fn process_record(pid: u32) -> ProcessRecord {
    let (monotonic_ns, realtime_ns) = clock_pair();
    let (nccl_version, nccl_library) = loaded_nccl();
    ProcessRecord {
        pid,
        monotonic_ns,
        realtime_ns,
        nccl_version,
        hostname: FixedName::from_text(&hostname()),
        nccl_library: FixedName::from_text(&nccl_library),
    }
}

/// The version (`ncclGetVersion`) and path of the `libnccl` loaded in this process, where found.
fn loaded_nccl() -> (u32, String) {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid info whose name is null or a C string; `data` is the
        // Vec passed below.
        unsafe {
            let name = (*info).dlpi_name;
            if !name.is_null() {
                let name = CStr::from_ptr(name).to_string_lossy();
                let file = name.rsplit('/').next().unwrap_or("");
                if file.starts_with("libnccl.so") {
                    (*data.cast::<Vec<String>>()).push(name.into_owned());
                }
            }
        }
        0
    }
    let mut found: Vec<String> = Vec::new();
    // SAFETY: `visit` only reads the loader's records and pushes into `found`.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut found as *mut Vec<String>).cast()) };
    type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
    let call = |sym: *mut c_void| -> u32 {
        if sym.is_null() {
            return 0;
        }
        let mut version: c_int = 0;
        // SAFETY: `ncclGetVersion(int*)` only stores the version.
        unsafe { std::mem::transmute::<*mut c_void, GetVersion>(sym)(&mut version) };
        version.max(0) as u32
    };
    for path in &found {
        let Ok(c_path) = CString::new(path.as_str()) else { continue };
        // SAFETY: RTLD_NOLOAD only returns a handle to an object that is already loaded.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            continue;
        }
        // SAFETY: a valid handle and a C string.
        let version = call(unsafe { libc::dlsym(handle, c"ncclGetVersion".as_ptr()) });
        // SAFETY: drops only the reference RTLD_NOLOAD added.
        unsafe { libc::dlclose(handle) };
        if version != 0 {
            return (version, path.clone());
        }
    }
    // NCCL linked into another library, or found under another name.
    // SAFETY: RTLD_DEFAULT lookup of a C string.
    let version = call(unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"ncclGetVersion".as_ptr()) });
    (version, found.into_iter().next().unwrap_or_default())
}

/// The CUDA device of the calling thread's current context and its UUID, through the driver NCCL already
/// loaded (never loads it): which GPU a communicator runs on, so that its GPU times land on that GPU when
/// nothing else records kernels. Called once per communicator, at `init`, where NCCL has made the
/// communicator's device current.
fn current_cuda_device() -> Option<(i32, [u8; 16])> {
    type CtxGetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
    type DeviceGetUuid = unsafe extern "C" fn(*mut [u8; 16], c_int) -> c_int;
    // SAFETY: RTLD_NOLOAD only returns a handle to an object that is already loaded.
    let handle = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: a valid handle and C strings.
    let (get_device, mut get_uuid) = unsafe {
        (libc::dlsym(handle, c"cuCtxGetDevice".as_ptr()), libc::dlsym(handle, c"cuDeviceGetUuid_v2".as_ptr()))
    };
    if get_uuid.is_null() {
        // Drivers before CUDA 11.4 have only the first version (same arguments).
        // SAFETY: as above.
        get_uuid = unsafe { libc::dlsym(handle, c"cuDeviceGetUuid".as_ptr()) };
    }
    let mut result = None;
    if !get_device.is_null() {
        let mut ordinal: c_int = -1;
        // SAFETY: `cuCtxGetDevice(CUdevice*)` only stores the ordinal; CUdevice is an int.
        let status = unsafe { std::mem::transmute::<*mut c_void, CtxGetDevice>(get_device)(&mut ordinal) };
        if status == 0 && ordinal >= 0 {
            let mut uuid = [0u8; 16];
            if !get_uuid.is_null() {
                // SAFETY: `cuDeviceGetUuid(CUuuid*, CUdevice)` writes 16 bytes; on failure they stay zero.
                let status = unsafe { std::mem::transmute::<*mut c_void, DeviceGetUuid>(get_uuid)(&mut uuid, ordinal) };
                if status != 0 {
                    uuid = [0; 16];
                }
            }
            result = Some((ordinal, uuid));
        }
    }
    // SAFETY: drops only the reference RTLD_NOLOAD added.
    unsafe { libc::dlclose(handle) };
    result
}

/// Keeps this library mapped after NCCL's `dlclose`.
fn pin_library() {
    // SAFETY: `Dl_info` is plain data (pointers and integers); all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = pin_library as *const c_void;
    // SAFETY: dladdr fills `info` for an address inside a loaded object.
    if unsafe { libc::dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: RTLD_NOLOAD|RTLD_NODELETE only marks the already loaded object as never unloaded.
    unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE) };
}

static RECORDER: OnceLock<Option<Recorder>> = OnceLock::new();

/// The recorder, opened on first use; `None` when disabled or in a forked child.
fn recorder() -> Option<&'static Recorder> {
    let recorder = RECORDER
        .get_or_init(|| {
            let Some(dir) = std::env::var_os(SPOOL_DIR_ENV).filter(|d| !d.is_empty()) else {
                eprintln!("shardscope-nccl-profiler: {SPOOL_DIR_ENV} is not set; recording nothing");
                return None;
            };
            match Recorder::open(Path::new(&dir)) {
                Ok(recorder) => {
                    // SAFETY: registers a plain function without arguments, run in the child after fork.
                    unsafe { libc::pthread_atfork(None, None, Some(mark_forked_child)) };
                    pin_library();
                    start_flush_thread();
                    // SAFETY: registers a plain function without arguments.
                    unsafe { libc::atexit(flush_at_exit) };
                    Some(recorder)
                }
                Err(e) => {
                    eprintln!(
                        "shardscope-nccl-profiler: cannot write a spool file in {}: {e}; recording nothing",
                        Path::new(&dir).display()
                    );
                    None
                }
            }
        })
        .as_ref()?;
    // A forked child shares the parent's state but must not write into the parent's file (init is rare:
    // the system call here is no cost).
    (recorder.pid == std::process::id() && !IN_FORKED_CHILD.load(Ordering::Relaxed)).then_some(recorder)
}

/// The recorder if it already exists (never opens it: for callbacks after `init`).
///
/// A forked child must not write into its parent's file. Comparing `getpid()` on every event would
/// cost a system call per callback on NCCL's launch path, so a fork handler marks the child instead.
fn active() -> Option<&'static Recorder> {
    if IN_FORKED_CHILD.load(Ordering::Relaxed) {
        return None;
    }
    RECORDER.get()?.as_ref()
}

/// The recorder, for starting a new event: none while the injection library of this process has recording
/// switched off (outside a capture window), so that NCCL's per-event work is not done then. Events started
/// inside a window are still stopped and updated after it ends.
fn active_for_new_events() -> Option<&'static Recorder> {
    if !injection_recording_on() {
        return None;
    }
    active()
}

/// `shardscope_recording_on` of the injection library.
type RecordingOn = unsafe extern "C" fn() -> c_int;
static RECORDING_ON: OnceLock<Option<RecordingOn>> = OnceLock::new();

/// A symbol of the injection library, or null when it is not loaded. Preloaded (the default), the library
/// is in the global scope; loaded by the CUDA driver alone, it is found by its path without loading it again.
fn injection_symbol(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym and dlopen with C strings; RTLD_NOLOAD never loads anything new.
    let mut symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if symbol.is_null()
        && let Some(path) = std::env::var_os("CUDA_INJECTION64_PATH")
        && let Ok(path) = CString::new(path.into_encoded_bytes())
    {
        // SAFETY: as above.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if !handle.is_null() {
            // SAFETY: as above.
            symbol = unsafe { libc::dlsym(handle, name.as_ptr()) };
        }
    }
    symbol
}

/// Whether the injection library records now; true when it is not loaded (nothing switches the plugin then).
fn injection_recording_on() -> bool {
    let query = RECORDING_ON.get_or_init(|| {
        let symbol = injection_symbol(c"shardscope_recording_on");
        // SAFETY: the injection library exports the symbol with this signature.
        (!symbol.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, RecordingOn>(symbol) })
    });
    // SAFETY: the function reads one atomic.
    query.is_none_or(|recording_on| unsafe { recording_on() } != 0)
}

/// Collectives of the NCCL kernel sample still to be launched (`capture --comm-only`); 0: no sample, or it is
/// over.
static SAMPLE_LEFT: AtomicU64 = AtomicU64::new(0);

/// Reads the sample's size from the environment (once, at the first communicator).
fn start_sample() {
    let sample = std::env::var(NCCL_KERNEL_SAMPLE_ENV).ok().and_then(|t| NcclKernelSample::parse(&t).ok());
    SAMPLE_LEFT.store(sample.map_or(0, |s| u64::from(s.collectives)), Ordering::Relaxed);
}

/// Collectives of the NCCL kernel sample not launched yet (0 without a sample, or once it is over).
pub fn nccl_sample_left() -> u64 {
    SAMPLE_LEFT.load(Ordering::Relaxed)
}

/// One collective or point-to-point operation was enqueued (NCCL stops its event then, before the launch): at
/// the last of the sample, the injection library is told to stop timing kernels. Its background thread does
/// so a moment later; a kernel launched before that keeps its record.
fn sample_one_ended() {
    let before = SAMPLE_LEFT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(1));
    if before == Ok(1) {
        let symbol = injection_symbol(c"shardscope_nccl_sample_done");
        if !symbol.is_null() {
            // SAFETY: the injection library exports the symbol as `extern "C" fn()`; it sets a flag.
            unsafe { std::mem::transmute::<*mut c_void, extern "C" fn()>(symbol)() };
        }
    }
}

/// Set in a child forked after the recorder was opened (see [`active`]).
static IN_FORKED_CHILD: AtomicBool = AtomicBool::new(false);

extern "C" fn mark_forked_child() {
    IN_FORKED_CHILD.store(true, Ordering::Relaxed);
}

fn start_flush_thread() {
    let interval_ms = std::env::var(FLUSH_MS_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .unwrap_or(DEFAULT_FLUSH_MS);
    let spawned = std::thread::Builder::new().name("shardscope-nccl-flush".into()).spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(interval_ms));
            if let Some(r) = active() {
                r.flush();
            }
        }
    });
    if let Err(e) = spawned {
        eprintln!("shardscope-nccl-profiler: no flush thread ({e}); records are written at finalize and exit");
    }
}

extern "C" fn flush_at_exit() {
    let _ = catch_unwind(|| {
        if let Some(r) = active() {
            r.flush();
        }
    });
}

/// Writes everything buffered so far (for tests and embedding programs).
pub fn flush_now() {
    if let Some(r) = active() {
        r.flush();
    }
}

/// The spool file this process writes, once a communicator was initialised.
pub fn spool_path() -> Option<PathBuf> {
    active().map(|r| r.path.clone())
}

thread_local! {
    /// When the callback running on this thread started: the event's time, so that each callback
    /// reads the clock twice in all (start and end), not once more for its record.
    static CALLBACK_STARTED_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The time of the event being recorded: the start of the running timed callback.
fn event_ns() -> u64 {
    CALLBACK_STARTED_NS.get()
}

/// Wall time NCCL's threads spent in the event callbacks, and how many ran (see
/// [`NcclRecord::CallbackCost`]).
static CALLBACK_NS: AtomicU64 = AtomicU64::new(0);
static CALLBACKS: AtomicU64 = AtomicU64::new(0);

/// Runs an entry point, turning a panic into `ncclSuccess` (a profiler must never fail NCCL).
fn guarded(body: impl FnOnce() -> NcclResult) -> NcclResult {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(NCCL_SUCCESS)
}

/// [`guarded`] for the per-event entry points, adding their wall time to the cost counters (two clock
/// reads through the vDSO, tens of ns, against the microseconds of a collective's launch).
fn guarded_timed(body: impl FnOnce() -> NcclResult) -> NcclResult {
    let started = monotonic_ns();
    CALLBACK_STARTED_NS.set(started);
    let result = guarded(body);
    CALLBACK_NS.fetch_add(monotonic_ns().saturating_sub(started), Ordering::Relaxed);
    CALLBACKS.fetch_add(1, Ordering::Relaxed);
    result
}

/// Stores `value` through NCCL's out-pointer if it is not null.
///
/// # Safety
/// `out` is null or valid for a write.
unsafe fn set_out(out: *mut *mut c_void, value: *mut c_void) {
    if !out.is_null() {
        // SAFETY: checked non-null; NCCL passes a valid slot.
        unsafe { *out = value };
    }
}

/// Shared `init`: records the communicator, hands out its context, sets the activation mask.
///
/// # Safety
/// Pointers are null or valid as NCCL documents them.
#[allow(clippy::too_many_arguments)]
unsafe fn init_common(
    context: *mut *mut c_void,
    activation_mask: *mut c_int,
    comm_id: u64,
    comm_name: *const c_char,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    interface_version: u32,
    log: NcclDebugLogger,
) -> NcclResult {
    // SAFETY: forwarded from the caller.
    unsafe { set_out(context, std::ptr::null_mut()) };
    let Some(recorder) = recorder() else {
        if !activation_mask.is_null() {
            // SAFETY: checked non-null.
            unsafe { *activation_mask = 0 };
        }
        return NCCL_SUCCESS;
    };
    let (comm_ref, handle) = new_handle(tag::COMM);
    recorder.push(&NcclRecord::Communicator(CommunicatorRecord {
        comm_ref,
        comm_id,
        cpu_ns: monotonic_ns(),
        rank,
        n_ranks,
        n_nodes,
        interface_version,
        // SAFETY: NCCL passes null or a C string.
        name: unsafe { FixedName::from_c_str(comm_name) },
    }));
    if let Some((cuda_ordinal, uuid)) = current_cuda_device() {
        recorder.push(&NcclRecord::CommDevice { comm_ref, cuda_ordinal, uuid });
    }
    let mut mask = event::GROUP | event::COLL | event::P2P;
    if recorder.kernel_timers && interface_version >= 4 {
        mask |= event::KERNEL_CH;
    }
    if !activation_mask.is_null() {
        // SAFETY: checked non-null. NCCL keeps one mask for all communicators; every init
        // stores the same value.
        unsafe { *activation_mask = mask as c_int };
    }
    // SAFETY: forwarded from the caller.
    unsafe { set_out(context, handle) };
    if let Some(log) = log {
        let text = format!(
            "shardscope NCCL profiler (interface v{interface_version}): comm {comm_id:#x} rank {rank}/{n_ranks} -> {}",
            recorder.path.display()
        );
        if let Ok(text) = CString::new(text) {
            // SAFETY: NCCL's logger takes a printf format; "%s" with one C string.
            unsafe {
                log(ffi::NCCL_LOG_INFO, ffi::NCCL_SUBSYS_INIT, c"shardscope".as_ptr(), 0, c"%s".as_ptr(), text.as_ptr())
            };
        }
    }
    NCCL_SUCCESS
}

/// Fields of a collective start, common to all interface versions.
struct CollFields {
    comm_id: u64,
    group: *const c_void,
    seq: u64,
    count: usize,
    root: c_int,
    rank: c_int,
    n_channels: u8,
    n_warps: u8,
    func: *const c_char,
    datatype: *const c_char,
    algo: *const c_char,
    proto: *const c_char,
}

/// # Safety
/// The string pointers are null or C strings.
unsafe fn start_coll(recorder: &Recorder, context: *mut c_void, f: CollFields) -> *mut c_void {
    let (event, handle) = new_handle(tag::COLL);
    // SAFETY: the four name pointers are the caller's, null or C strings (this function's contract).
    let record = unsafe {
        CollStart {
            event,
            comm_ref: id_if(context, &[tag::COMM]),
            comm_id: f.comm_id,
            group: id_if(f.group, &[tag::GROUP]),
            seq: f.seq,
            count: f.count as u64,
            cpu_ns: event_ns(),
            root: f.root,
            rank: f.rank,
            n_channels: f.n_channels,
            n_warps: f.n_warps,
            func: ShortName::from_c_str(f.func),
            datatype: ShortName::from_c_str(f.datatype),
            algo: ShortName::from_c_str(f.algo),
            proto: ShortName::from_c_str(f.proto),
        }
    };
    recorder.push(&NcclRecord::CollStart(record));
    handle
}

/// Fields of a point-to-point start.
struct P2pFields {
    comm_id: u64,
    group: *const c_void,
    count: usize,
    peer: c_int,
    rank: c_int,
    n_channels: u8,
    func: *const c_char,
    datatype: *const c_char,
}

/// # Safety
/// The string pointers are null or C strings.
unsafe fn start_p2p(recorder: &Recorder, context: *mut c_void, f: P2pFields) -> *mut c_void {
    let (event, handle) = new_handle(tag::P2P);
    // SAFETY: forwarded from the caller.
    let (func, datatype) = unsafe { (ShortName::from_c_str(f.func), ShortName::from_c_str(f.datatype)) };
    recorder.push(&NcclRecord::P2pStart(P2pStart {
        event,
        comm_ref: id_if(context, &[tag::COMM]),
        comm_id: f.comm_id,
        group: id_if(f.group, &[tag::GROUP]),
        count: f.count as u64,
        cpu_ns: event_ns(),
        peer: f.peer,
        rank: f.rank,
        n_channels: f.n_channels,
        func,
        datatype,
    }));
    handle
}

fn start_kernel_ch(recorder: &Recorder, parent: *const c_void, channel: u8, gpu_start_ns: u64) -> *mut c_void {
    let (event, handle) = new_handle(tag::KERNEL_CH);
    recorder.push(&NcclRecord::KernelChStart {
        event,
        parent: id_if(parent, &[tag::COLL, tag::P2P]),
        gpu_start_ns,
        cpu_ns: event_ns(),
        channel,
    });
    handle
}

fn group_handle() -> *mut c_void {
    new_handle(tag::GROUP).1
}

// ------------------------------------------------------------------ entry points, all versions

unsafe extern "C" fn stop_event(handle: *mut c_void) -> NcclResult {
    guarded_timed(|| {
        if let (Some(recorder), Some((t, event))) = (active(), decode_handle(handle))
            && (t == tag::COLL || t == tag::P2P)
        {
            recorder.push(&NcclRecord::OpStop { event, cpu_ns: event_ns() });
            sample_one_ended();
        }
        NCCL_SUCCESS
    })
}

unsafe extern "C" fn record_event_state_v4(
    handle: *mut c_void,
    state: c_int,
    args: *mut ffi::StateArgsV4,
) -> NcclResult {
    guarded_timed(|| {
        if state == ffi::STATE_KERNEL_CH_STOP
            && !args.is_null()
            && let (Some(recorder), Some((tag::KERNEL_CH, event))) = (active(), decode_handle(handle))
        {
            // SAFETY: checked non-null; for this state NCCL fills the kernel-channel member.
            let gpu_stop_ns = unsafe { (*args).kernel_ch_p_timer };
            recorder.push(&NcclRecord::KernelChStop { event, gpu_stop_ns, cpu_ns: event_ns() });
        }
        NCCL_SUCCESS
    })
}

unsafe extern "C" fn finalize(context: *mut c_void) -> NcclResult {
    guarded(|| {
        if let (Some(recorder), Some((tag::COMM, comm_ref))) = (active(), decode_handle(context)) {
            recorder.push(&NcclRecord::CommunicatorEnd { comm_ref, cpu_ns: monotonic_ns() });
            recorder.flush();
        }
        NCCL_SUCCESS
    })
}

// ------------------------------------------------------------------ v5

unsafe extern "C" fn init_v5(
    context: *mut *mut c_void,
    comm_id: u64,
    activation_mask: *mut c_int,
    comm_name: *const c_char,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    log: NcclDebugLogger,
) -> NcclResult {
    // SAFETY: NCCL's arguments, forwarded.
    guarded(|| unsafe { init_common(context, activation_mask, comm_id, comm_name, n_nodes, n_ranks, rank, 5, log) })
}

/// What every version's `startEvent` does around reading its descriptor: the handle slot cleared first (NCCL reads
/// it even when nothing starts), no event while recording is off or without a descriptor, the new handle stored.
fn start_event_with<D>(
    handle: *mut *mut c_void,
    descr: *mut D,
    start: impl FnOnce(&'static Recorder, &D) -> *mut c_void,
) -> NcclResult {
    guarded_timed(|| {
        // SAFETY: NCCL passes a valid slot (or null, which set_out ignores).
        unsafe { set_out(handle, std::ptr::null_mut()) };
        let Some(recorder) = active_for_new_events() else { return NCCL_SUCCESS };
        if descr.is_null() {
            return NCCL_SUCCESS;
        }
        // SAFETY: checked non-null; NCCL's descriptor is valid for the call.
        let new = start(recorder, unsafe { &*descr });
        // SAFETY: as above.
        unsafe { set_out(handle, new) };
        NCCL_SUCCESS
    })
}

/// [`CollFields`] from any version's collective descriptor `$c` (the same field names in every version), with what
/// differs between versions passed in: the rank, the communicator id, the group and the channel count.
macro_rules! coll_fields {
    ($c:expr, $rank:expr, $comm_id:expr, $group:expr, $n_channels:expr) => {
        CollFields {
            comm_id: $comm_id,
            group: $group,
            seq: $c.seq_number,
            count: $c.count,
            root: $c.root,
            rank: $rank,
            n_channels: $n_channels,
            n_warps: $c.n_warps,
            func: $c.func,
            datatype: $c.datatype,
            algo: $c.algo,
            proto: $c.proto,
        }
    };
}

/// [`P2pFields`] from any version's point-to-point descriptor `$p`, as [`coll_fields`] does for collectives.
macro_rules! p2p_fields {
    ($p:expr, $rank:expr, $comm_id:expr, $group:expr, $n_channels:expr) => {
        P2pFields {
            comm_id: $comm_id,
            group: $group,
            count: $p.count,
            peer: $p.peer,
            rank: $rank,
            n_channels: $n_channels,
            func: $p.func,
            datatype: $p.datatype,
        }
    };
}

unsafe extern "C" fn start_event_v5(
    context: *mut c_void,
    handle: *mut *mut c_void,
    descr: *mut ffi::EventDescrV5,
) -> NcclResult {
    start_event_with(handle, descr, |recorder, d| {
        // SAFETY: the union member read matches `event_type`; the strings are NCCL's C strings or null.
        unsafe {
            match d.event_type {
                event::GROUP => group_handle(),
                event::COLL => {
                    let c = d.u.coll;
                    let group = c.parent_group;
                    start_coll(recorder, context, coll_fields!(c, d.rank, 0, group, c.n_channels))
                }
                event::P2P => {
                    let p = d.u.p2p;
                    start_p2p(recorder, context, p2p_fields!(p, d.rank, 0, p.parent_group, p.n_channels))
                }
                event::KERNEL_CH => {
                    start_kernel_ch(recorder, d.parent_obj, d.u.kernel_ch.channel_id, d.u.kernel_ch.p_timer)
                }
                _ => std::ptr::null_mut(),
            }
        }
    })
}

/// The table NCCL 2.28 (and later, without v6) looks up.
#[allow(non_upper_case_globals)]
#[unsafe(no_mangle)]
pub static ncclProfiler_v5: ffi::ProfilerV5 = ffi::ProfilerV5 {
    name: c"shardscope".as_ptr(),
    init: init_v5,
    start_event: start_event_v5,
    stop_event,
    record_event_state: record_event_state_v4,
    finalize,
};

// ------------------------------------------------------------------ v4

unsafe extern "C" fn init_v4(
    context: *mut *mut c_void,
    activation_mask: *mut c_int,
    comm_name: *const c_char,
    comm_hash: u64,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    log: NcclDebugLogger,
) -> NcclResult {
    // SAFETY: NCCL's arguments, forwarded.
    guarded(|| unsafe { init_common(context, activation_mask, comm_hash, comm_name, n_nodes, n_ranks, rank, 4, log) })
}

unsafe extern "C" fn start_event_v4(
    context: *mut c_void,
    handle: *mut *mut c_void,
    descr: *mut ffi::EventDescrV4,
) -> NcclResult {
    start_event_with(handle, descr, |recorder, d| {
        // SAFETY: as in v5. In v4 an operation's parent is its group.
        unsafe {
            match u64::from(d.event_type) {
                event::GROUP => group_handle(),
                event::COLL => {
                    let c = d.u.coll;
                    start_coll(recorder, context, coll_fields!(c, d.rank, 0, d.parent_obj, c.n_channels))
                }
                event::P2P => {
                    let p = d.u.p2p;
                    start_p2p(recorder, context, p2p_fields!(p, d.rank, 0, d.parent_obj, p.n_channels))
                }
                event::KERNEL_CH => {
                    start_kernel_ch(recorder, d.parent_obj, d.u.kernel_ch.channel_id, d.u.kernel_ch.p_timer)
                }
                _ => std::ptr::null_mut(),
            }
        }
    })
}

/// The table NCCL 2.26 and 2.27 look up.
#[allow(non_upper_case_globals)]
#[unsafe(no_mangle)]
pub static ncclProfiler_v4: ffi::ProfilerV4 = ffi::ProfilerV4 {
    name: c"shardscope".as_ptr(),
    init: init_v4,
    start_event: start_event_v4,
    stop_event,
    record_event_state: record_event_state_v4,
    finalize,
};

// ------------------------------------------------------------------ v3

unsafe extern "C" fn init_v3(context: *mut *mut c_void, activation_mask: *mut c_int) -> NcclResult {
    // v3 tells nothing about the communicator here; its operations carry the comm hash.
    // SAFETY: NCCL's arguments, forwarded.
    guarded(|| unsafe { init_common(context, activation_mask, 0, std::ptr::null(), 0, 0, -1, 3, None) })
}

unsafe extern "C" fn start_event_v3(
    context: *mut c_void,
    handle: *mut *mut c_void,
    descr: *mut ffi::EventDescrV3,
) -> NcclResult {
    start_event_with(handle, descr, |recorder, d| {
        // SAFETY: as in v5. v3 names the communicator in each operation and gives a collective's largest channel
        // count, a point-to-point operation's none.
        unsafe {
            match u64::from(d.event_type) {
                event::GROUP => group_handle(),
                event::COLL => {
                    let c = d.u.coll;
                    start_coll(recorder, context, coll_fields!(c, d.rank, c.comm_hash, d.parent_obj, c.n_max_channels))
                }
                event::P2P => {
                    let p = d.u.p2p;
                    start_p2p(recorder, context, p2p_fields!(p, d.rank, p.comm_hash, d.parent_obj, 0))
                }
                _ => std::ptr::null_mut(),
            }
        }
    })
}

unsafe extern "C" fn record_event_state_v3(_handle: *mut c_void, _state: c_int, _args: *mut c_void) -> NcclResult {
    NCCL_SUCCESS
}

/// The table NCCL 2.25 looks up.
#[allow(non_upper_case_globals)]
#[unsafe(no_mangle)]
pub static ncclProfiler_v3: ffi::ProfilerV3 = ffi::ProfilerV3 {
    name: c"shardscope".as_ptr(),
    init: init_v3,
    start_event: start_event_v3,
    stop_event,
    record_event_state: record_event_state_v3,
    finalize,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_foreign_pointers_are_ignored() {
        let (id, handle) = new_handle(tag::COLL);
        assert_eq!(decode_handle(handle), Some((tag::COLL, id)));
        assert_eq!(id_if(handle, &[tag::COLL, tag::P2P]), id);
        assert_eq!(id_if(handle, &[tag::GROUP]), 0);
        assert_eq!(decode_handle(std::ptr::null()), None);
        let real = Box::new(5u64);
        assert_eq!(decode_handle(&*real as *const u64 as *const c_void), None);
    }
}
