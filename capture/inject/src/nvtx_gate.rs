//! NVTX handed to CUPTI only while CUPTI is attached.
//!
//! NVTX calls the library named by `NVTX_INJECTION64_PATH` once per NVTX instance (the program, each library
//! that carries the NVTX headers), and the library fills that instance's function slots. Handing the instance
//! straight to CUPTI's own `InitializeInjectionNvtx2` attaches CUPTI to the process for good: measured on an
//! H200 with turn-taking pairs on one CPU (BENCHMARKS.md, capture windows, sitting 24), a bare launch outside
//! every window cost 1.025× uncaptured with NVTX handed to CUPTI, 1.001× without, and 1.032× with nothing but
//! the NVTX hand-over. So where CUPTI is detached outside windows, NVTX's slots get this module's functions
//! instead, and CUPTI's NVTX functions sit behind them:
//!
//! - CUPTI's `InitializeInjectionNvtx2` is called once, at the first attach that finds an NVTX instance, with an
//!   export table of this module, so CUPTI fills slots of ours ([`CuptiSlots`]), never the program's.
//! - While attached ([`open`] to [`close`]) a range, mark or domain call goes on to CUPTI's function; while
//!   detached it returns at once (a push or pop says level 0, a start says id 0).
//! - Domains are this module's handles: made whatever the state, made again in CUPTI at each attach (CUPTI's
//!   handles do not outlive `cuptiFinalize`), and swapped for CUPTI's handle on the way. A registered string
//!   goes to CUPTI as the text it stands for, so strings registered before a window name its ranges.
//!
//! Left as no-ops (NVTX's own default when a tool does not fill a slot): naming categories, threads, CUDA and
//! OpenCL objects, resources and the synchronisation module; the capture records none of them.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// NVTX's `InitializeInjectionNvtx2` (CUPTI's, here): takes an instance's export-table function.
pub(crate) type NvtxInit = unsafe extern "C" fn(GetExportTable) -> c_int;
/// An NVTX instance's `nvtxGetExportTable`.
pub(crate) type GetExportTable = unsafe extern "C" fn(u32) -> *const c_void;
type GetModuleFunctionTable = unsafe extern "C" fn(u32, *mut *mut *mut usize, *mut u32) -> c_int;

/// NVTX's export-table ids and callback modules (`nvtxTypes.h`).
const ETID_CALLBACKS: u32 = 1;
const ETID_VERSIONINFO: u32 = 3;
const MODULE_CORE: u32 = 1;
const MODULE_CORE2: u32 = 5;
/// The callback modules 1..=6 (core, CUDA, OpenCL, CUDA runtime, core 2, sync) and their slot counts.
const MODULE_SLOTS: [usize; 6] = [16, 9, 15, 7, 16, 7];
/// The NVTX version this module speaks (`NVTX_VERSION`).
const NVTX_VERSION: u32 = 3;

/// Slot ids of the core module (`NvtxCallbackIdCore`).
mod core_id {
    pub const MARK_EX: usize = 1;
    pub const MARK_A: usize = 2;
    pub const MARK_W: usize = 3;
    pub const RANGE_START_EX: usize = 4;
    pub const RANGE_START_A: usize = 5;
    pub const RANGE_START_W: usize = 6;
    pub const RANGE_END: usize = 7;
    pub const RANGE_PUSH_EX: usize = 8;
    pub const RANGE_PUSH_A: usize = 9;
    pub const RANGE_PUSH_W: usize = 10;
    pub const RANGE_POP: usize = 11;
    /// Not filled: naming a thread stays NVTX's no-op.
    #[cfg(test)]
    pub const NAME_OS_THREAD_A: usize = 14;
}

/// Slot ids of the core-2 (domain) module (`NvtxCallbackIdCore2`).
mod domain_id {
    pub const MARK_EX: usize = 1;
    pub const RANGE_START_EX: usize = 2;
    pub const RANGE_END: usize = 3;
    pub const RANGE_PUSH_EX: usize = 4;
    pub const RANGE_POP: usize = 5;
    pub const REGISTER_STRING_A: usize = 10;
    pub const REGISTER_STRING_W: usize = 11;
    pub const CREATE_A: usize = 12;
    pub const CREATE_W: usize = 13;
    pub const DESTROY: usize = 14;
}

/// `nvtxEventAttributes_t`: where the message type and the message sit, and the smallest size that has them.
const ATTRIBUTES_MESSAGE_TYPE_AT: usize = 32;
const ATTRIBUTES_MESSAGE_AT: usize = 40;
const ATTRIBUTES_MIN_SIZE: usize = 48;
/// The largest attributes copied to swap a registered string for its text; larger ones go on unchanged.
const ATTRIBUTES_MAX_COPY: usize = 256;
const MESSAGE_ASCII: i32 = 1;
const MESSAGE_UNICODE: i32 = 2;
const MESSAGE_REGISTERED: i32 = 3;

/// A name as NVTX gave it: narrow or wide (`wchar_t` is 32 bits on Linux), with its terminating zero.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Text {
    Narrow(Vec<u8>),
    Wide(Vec<u32>),
}

impl Text {
    /// Copies a zero-terminated string; None for a null pointer.
    ///
    /// # Safety
    /// `narrow` is null or a zero-terminated string.
    unsafe fn narrow(narrow: *const c_char) -> Option<Text> {
        // SAFETY: as the caller promises.
        (!narrow.is_null())
            .then(|| Text::Narrow(unsafe { std::ffi::CStr::from_ptr(narrow) }.to_bytes_with_nul().to_vec()))
    }

    /// # Safety
    /// `wide` is null or a zero-terminated wide string.
    unsafe fn wide(wide: *const u32) -> Option<Text> {
        if wide.is_null() {
            return None;
        }
        let mut units = Vec::new();
        for at in 0.. {
            // SAFETY: the string goes on up to and including its zero.
            let unit = unsafe { *wide.add(at) };
            units.push(unit);
            if unit == 0 {
                break;
            }
        }
        Some(Text::Wide(units))
    }

    fn message(&self) -> (i32, *const c_void) {
        match self {
            Text::Narrow(bytes) => (MESSAGE_ASCII, bytes.as_ptr().cast()),
            Text::Wide(units) => (MESSAGE_UNICODE, units.as_ptr().cast()),
        }
    }
}

/// A domain as the program holds it: its name and, while attached, CUPTI's handle for it.
struct Domain {
    name: Text,
    cupti: AtomicUsize,
    destroyed: AtomicBool,
}

/// A registered string: the text it stands for. Leaked, as the program may use it for the rest of the run.
struct Registered {
    text: Text,
}

/// Where CUPTI's NVTX functions land: one slot array per module and the tables of pointers to them that the
/// export table hands out. Leaked once made.
struct CuptiSlots {
    slots: Vec<Box<[AtomicUsize]>>,
    tables: Vec<Box<[*mut usize]>>,
}

// SAFETY: the table pointers point into `slots`, which never move (boxed, leaked) and are atomics.
unsafe impl Send for CuptiSlots {}
// SAFETY: as above.
unsafe impl Sync for CuptiSlots {}

impl CuptiSlots {
    fn new() -> CuptiSlots {
        let slots: Vec<Box<[AtomicUsize]>> =
            MODULE_SLOTS.iter().map(|&n| (0..n).map(|_| AtomicUsize::new(0)).collect()).collect();
        let tables = slots
            .iter()
            .map(|module| {
                // Entry 0 is the invalid id and the last one a null, as in NVTX's own tables.
                let mut table: Vec<*mut usize> = vec![std::ptr::null_mut()];
                table.extend(module.iter().skip(1).map(|slot| slot.as_ptr()));
                table.push(std::ptr::null_mut());
                table.into_boxed_slice()
            })
            .collect();
        CuptiSlots { slots, tables }
    }

    fn get(&self, module: u32, id: usize) -> usize {
        self.slots[module as usize - 1][id].load(Ordering::Acquire)
    }
}

/// The state behind the lock: what NVTX and the attach/detach calls share.
struct Gate {
    /// CUPTI's `InitializeInjectionNvtx2`, given at the first [`open`].
    cupti_init: Option<NvtxInit>,
    /// CUPTI's NVTX functions were loaded into [`CuptiSlots`] (tried once).
    cupti_loaded: Option<bool>,
    /// NVTX instances that came to this module.
    instances: usize,
    domains: Vec<&'static Domain>,
    registered: std::collections::BTreeMap<(usize, Text), &'static Registered>,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    cupti_init: None,
    cupti_loaded: None,
    instances: 0,
    domains: Vec::new(),
    registered: std::collections::BTreeMap::new(),
});
static SLOTS: OnceLock<CuptiSlots> = OnceLock::new();
/// CUPTI's slots while calls go on to CUPTI; null while they return at once.
static FORWARD: AtomicPtr<CuptiSlots> = AtomicPtr::new(std::ptr::null_mut());
/// CUPTI is attached. Outside the lock, so that [`close`], called inside a CUPTI callback, never waits on a thread
/// that holds the lock while it calls CUPTI (making a domain).
static ATTACHED: AtomicBool = AtomicBool::new(false);

fn gate() -> std::sync::MutexGuard<'static, Gate> {
    GATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// NVTX's call for one instance: puts this module's functions in its core and domain slots. Returns NVTX's
/// success (1), or 0 when the instance offers no callback table (NVTX then makes every call a no-op).
///
/// # Safety
/// `get_export_table` is an NVTX instance's `nvtxGetExportTable`, as NVTX passes it.
pub(crate) unsafe fn initialize(get_export_table: GetExportTable) -> c_int {
    // SAFETY: as the caller promises.
    if !unsafe { install(get_export_table, MODULE_CORE, &core_functions()) } {
        return 0;
    }
    // SAFETY: as above. An old instance without the domain module still gets the core functions.
    unsafe { install(get_export_table, MODULE_CORE2, &domain_functions()) };
    let mut gate = gate();
    gate.instances += 1;
    if ATTACHED.load(Ordering::SeqCst) {
        forward(&mut gate);
    }
    1
}

/// CUPTI is attached: calls go on to it from now on. `cupti_init` is CUPTI's `InitializeInjectionNvtx2`.
pub(crate) fn open(cupti_init: Option<NvtxInit>) {
    let mut gate = gate();
    if gate.cupti_init.is_none() {
        gate.cupti_init = cupti_init;
    }
    ATTACHED.store(true, Ordering::SeqCst);
    if gate.instances > 0 {
        forward(&mut gate);
    }
}

/// CUPTI is about to be detached: calls return at once from now on. Takes no lock (see [`ATTACHED`]).
pub(crate) fn close() {
    ATTACHED.store(false, Ordering::SeqCst);
    FORWARD.store(std::ptr::null_mut(), Ordering::SeqCst);
}

/// Loads CUPTI's NVTX functions (once), makes every live domain in CUPTI and sends calls on.
fn forward(gate: &mut Gate) {
    let slots = SLOTS.get_or_init(CuptiSlots::new);
    if gate.cupti_loaded.is_none() {
        let loaded = gate.cupti_init.is_some_and(|init| {
            // SAFETY: CUPTI's NVTX entry point, given this module's export table, fills only our slots.
            unsafe { init(export_table) != 0 }
        });
        if !loaded {
            eprintln!(
                "shardscope: process {}: CUPTI took no NVTX functions: NVTX ranges are not recorded",
                std::process::id()
            );
        }
        gate.cupti_loaded = Some(loaded);
    }
    if gate.cupti_loaded != Some(true) {
        return;
    }
    for domain in gate.domains.iter().filter(|d| !d.destroyed.load(Ordering::Acquire)) {
        domain.cupti.store(create_in_cupti(slots, &domain.name), Ordering::Release);
    }
    FORWARD.store((slots as *const CuptiSlots).cast_mut(), Ordering::SeqCst);
    // A `close` that came meanwhile (it takes no lock) wins: its store of ATTACHED came before this check.
    if !ATTACHED.load(Ordering::SeqCst) {
        FORWARD.store(std::ptr::null_mut(), Ordering::SeqCst);
    }
}

/// CUPTI's handle for a new domain named `name` (0 when CUPTI has no such function).
fn create_in_cupti(slots: &CuptiSlots, name: &Text) -> usize {
    let (id, text) = match name {
        Text::Narrow(bytes) => (domain_id::CREATE_A, bytes.as_ptr().cast::<c_void>()),
        Text::Wide(units) => (domain_id::CREATE_W, units.as_ptr().cast::<c_void>()),
    };
    let function = slots.get(MODULE_CORE2, id);
    if function == 0 {
        return 0;
    }
    // SAFETY: CUPTI filled this slot with its DomainCreateA/W, which takes one zero-terminated string.
    let create: unsafe extern "C" fn(*const c_void) -> usize = unsafe { std::mem::transmute(function) };
    // SAFETY: `text` is zero-terminated and lives as long as the domain.
    unsafe { create(text) }
}

/// Writes `functions` (slot id, function) into an instance's slots of `module`. False when the instance has
/// no callback table.
///
/// # Safety
/// `get_export_table` is an NVTX instance's `nvtxGetExportTable`.
unsafe fn install(get_export_table: GetExportTable, module: u32, functions: &[(usize, usize)]) -> bool {
    // SAFETY: NVTX's export-table function, asked for its callbacks table.
    let callbacks = unsafe { get_export_table(ETID_CALLBACKS) }.cast::<CallbacksTable>();
    // SAFETY: NVTX returns null or its callbacks table, whose size says which fields it has.
    let Some(callbacks) = (unsafe { callbacks.as_ref() }) else { return false };
    if callbacks.struct_size < std::mem::size_of::<CallbacksTable>() {
        return false;
    }
    let (mut table, mut size) = (std::ptr::null_mut(), 0u32);
    // SAFETY: NVTX's own function with out-parameters of the types it writes.
    if unsafe { (callbacks.get_module_function_table)(module, &mut table, &mut size) } == 0 || table.is_null() {
        return false;
    }
    for &(id, function) in functions {
        if id >= size as usize {
            continue;
        }
        // SAFETY: NVTX's table has `size` entries, each null or a pointer to one of its slots.
        let slot = unsafe { *table.add(id) };
        if !slot.is_null() {
            // SAFETY: the slot is NVTX's function pointer for this id, which a tool fills during its init.
            unsafe { slot.write(function) };
        }
    }
    true
}

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct CallbacksTable {
    struct_size: usize,
    get_module_function_table: GetModuleFunctionTable,
}

/// `NvtxExportTableVersionInfo`.
#[repr(C)]
struct VersionInfo {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: unsafe extern "C" fn(u32),
}

static CALLBACKS: CallbacksTable =
    CallbacksTable { struct_size: std::mem::size_of::<CallbacksTable>(), get_module_function_table: module_table };
static VERSION: VersionInfo = VersionInfo {
    struct_size: std::mem::size_of::<VersionInfo>(),
    version: NVTX_VERSION,
    reserved0: 0,
    set_injection_nvtx_version: set_version,
};

/// The export table this module shows CUPTI, in place of an NVTX instance's.
unsafe extern "C" fn export_table(id: u32) -> *const c_void {
    match id {
        ETID_CALLBACKS => (&CALLBACKS as *const CallbacksTable).cast(),
        ETID_VERSIONINFO => (&VERSION as *const VersionInfo).cast(),
        _ => std::ptr::null(),
    }
}

unsafe extern "C" fn set_version(_version: u32) {}

unsafe extern "C" fn module_table(module: u32, out_table: *mut *mut *mut usize, out_size: *mut u32) -> c_int {
    let Some(slots) = SLOTS.get() else { return 0 };
    let Some(table) = (module as usize).checked_sub(1).and_then(|i| slots.tables.get(i)) else { return 0 };
    if !out_table.is_null() {
        // SAFETY: CUPTI's out-parameter; the table is leaked with the slots and never moves.
        unsafe { *out_table = table.as_ptr().cast_mut() };
    }
    if !out_size.is_null() {
        // SAFETY: CUPTI's out-parameter. The size leaves out the trailing null, as NVTX's does.
        unsafe { *out_size = (table.len() - 1) as u32 };
    }
    1
}

/// CUPTI's slots while calls go on to CUPTI.
fn forwarding() -> Option<&'static CuptiSlots> {
    // SAFETY: FORWARD is null or the leaked slots.
    unsafe { FORWARD.load(Ordering::Acquire).as_ref() }
}

/// CUPTI's function in `module`'s slot `id` while calls go on to CUPTI.
fn cupti_function(module: u32, id: usize) -> Option<usize> {
    let function = forwarding()?.get(module, id);
    (function != 0).then_some(function)
}

/// CUPTI's handle for the program's `domain` (null stays null: the default domain).
fn cupti_domain(domain: *const Domain) -> usize {
    // SAFETY: every domain handle the program holds came from `domain_create`, which leaks it.
    unsafe { domain.as_ref() }.map_or(0, |d| d.cupti.load(Ordering::Acquire))
}

/// Event attributes as CUPTI should see them: a registered string swapped for its text. `buffer` holds the
/// copy when one is made.
///
/// # Safety
/// `attributes` is null or NVTX event attributes as the program passed them.
unsafe fn with_text(attributes: *const c_void, buffer: &mut [u64; ATTRIBUTES_MAX_COPY / 8]) -> *const c_void {
    if attributes.is_null() {
        return attributes;
    }
    // SAFETY: the attributes start with their version (u16) and size (u16).
    let size = usize::from(unsafe { attributes.cast::<u16>().add(1).read_unaligned() });
    if !(ATTRIBUTES_MIN_SIZE..=ATTRIBUTES_MAX_COPY).contains(&size) {
        return attributes;
    }
    // SAFETY: `size` bytes of attributes, at least up to the message.
    let message_type =
        unsafe { attributes.cast::<u8>().add(ATTRIBUTES_MESSAGE_TYPE_AT).cast::<i32>().read_unaligned() };
    if message_type != MESSAGE_REGISTERED {
        return attributes;
    }
    // SAFETY: as above.
    let handle =
        unsafe { attributes.cast::<u8>().add(ATTRIBUTES_MESSAGE_AT).cast::<*const Registered>().read_unaligned() };
    // SAFETY: every registered handle the program holds came from `register`, which leaks it.
    let Some(registered) = (unsafe { handle.as_ref() }) else { return attributes };
    let (kind, text) = registered.text.message();
    let copy = buffer.as_mut_ptr().cast::<u8>();
    // SAFETY: `size` ≤ the buffer's bytes; the writes stay inside the copy.
    unsafe {
        std::ptr::copy_nonoverlapping(attributes.cast::<u8>(), copy, size);
        copy.add(ATTRIBUTES_MESSAGE_TYPE_AT).cast::<i32>().write_unaligned(kind);
        copy.add(ATTRIBUTES_MESSAGE_AT).cast::<*const c_void>().write_unaligned(text);
    }
    copy.cast_const().cast()
}

/// Calls CUPTI's `$module` function `$id` with the types and arguments given, or returns `$idle`.
macro_rules! on_to_cupti {
    ($module:expr, $id:expr, fn($($ty:ty),*) -> $ret:ty, ($($arg:expr),*), $idle:expr) => {
        match cupti_function($module, $id) {
            // SAFETY: CUPTI filled this slot with its NVTX function of exactly this signature.
            Some(f) => unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($ty),*) -> $ret>(f)($($arg),*) },
            None => $idle,
        }
    };
}

unsafe extern "C" fn mark_ex(attributes: *const c_void) {
    let mut buffer = [0u64; ATTRIBUTES_MAX_COPY / 8];
    // SAFETY: NVTX passes the program's attributes.
    let attributes = unsafe { with_text(attributes, &mut buffer) };
    on_to_cupti!(MODULE_CORE, core_id::MARK_EX, fn(*const c_void) -> (), (attributes), ())
}

unsafe extern "C" fn mark_a(message: *const c_void) {
    on_to_cupti!(MODULE_CORE, core_id::MARK_A, fn(*const c_void) -> (), (message), ())
}

unsafe extern "C" fn mark_w(message: *const c_void) {
    on_to_cupti!(MODULE_CORE, core_id::MARK_W, fn(*const c_void) -> (), (message), ())
}

unsafe extern "C" fn range_start_ex(attributes: *const c_void) -> u64 {
    let mut buffer = [0u64; ATTRIBUTES_MAX_COPY / 8];
    // SAFETY: NVTX passes the program's attributes.
    let attributes = unsafe { with_text(attributes, &mut buffer) };
    on_to_cupti!(MODULE_CORE, core_id::RANGE_START_EX, fn(*const c_void) -> u64, (attributes), 0)
}

unsafe extern "C" fn range_start_a(message: *const c_void) -> u64 {
    on_to_cupti!(MODULE_CORE, core_id::RANGE_START_A, fn(*const c_void) -> u64, (message), 0)
}

unsafe extern "C" fn range_start_w(message: *const c_void) -> u64 {
    on_to_cupti!(MODULE_CORE, core_id::RANGE_START_W, fn(*const c_void) -> u64, (message), 0)
}

unsafe extern "C" fn range_end(id: u64) {
    // Id 0 is what a start returned while detached: CUPTI never saw that range.
    if id != 0 {
        on_to_cupti!(MODULE_CORE, core_id::RANGE_END, fn(u64) -> (), (id), ())
    }
}

unsafe extern "C" fn range_push_ex(attributes: *const c_void) -> c_int {
    let mut buffer = [0u64; ATTRIBUTES_MAX_COPY / 8];
    // SAFETY: NVTX passes the program's attributes.
    let attributes = unsafe { with_text(attributes, &mut buffer) };
    on_to_cupti!(MODULE_CORE, core_id::RANGE_PUSH_EX, fn(*const c_void) -> c_int, (attributes), 0)
}

unsafe extern "C" fn range_push_a(message: *const c_void) -> c_int {
    on_to_cupti!(MODULE_CORE, core_id::RANGE_PUSH_A, fn(*const c_void) -> c_int, (message), 0)
}

unsafe extern "C" fn range_push_w(message: *const c_void) -> c_int {
    on_to_cupti!(MODULE_CORE, core_id::RANGE_PUSH_W, fn(*const c_void) -> c_int, (message), 0)
}

unsafe extern "C" fn range_pop() -> c_int {
    on_to_cupti!(MODULE_CORE, core_id::RANGE_POP, fn() -> c_int, (), 0)
}

unsafe extern "C" fn domain_mark_ex(domain: *const Domain, attributes: *const c_void) {
    let mut buffer = [0u64; ATTRIBUTES_MAX_COPY / 8];
    // SAFETY: NVTX passes the program's attributes.
    let attributes = unsafe { with_text(attributes, &mut buffer) };
    let domain = cupti_domain(domain);
    on_to_cupti!(MODULE_CORE2, domain_id::MARK_EX, fn(usize, *const c_void) -> (), (domain, attributes), ())
}

unsafe extern "C" fn domain_range_start_ex(domain: *const Domain, attributes: *const c_void) -> u64 {
    let mut buffer = [0u64; ATTRIBUTES_MAX_COPY / 8];
    // SAFETY: NVTX passes the program's attributes.
    let attributes = unsafe { with_text(attributes, &mut buffer) };
    let domain = cupti_domain(domain);
    on_to_cupti!(MODULE_CORE2, domain_id::RANGE_START_EX, fn(usize, *const c_void) -> u64, (domain, attributes), 0)
}

unsafe extern "C" fn domain_range_end(domain: *const Domain, id: u64) {
    if id != 0 {
        let domain = cupti_domain(domain);
        on_to_cupti!(MODULE_CORE2, domain_id::RANGE_END, fn(usize, u64) -> (), (domain, id), ())
    }
}

unsafe extern "C" fn domain_range_push_ex(domain: *const Domain, attributes: *const c_void) -> c_int {
    let mut buffer = [0u64; ATTRIBUTES_MAX_COPY / 8];
    // SAFETY: NVTX passes the program's attributes.
    let attributes = unsafe { with_text(attributes, &mut buffer) };
    let domain = cupti_domain(domain);
    on_to_cupti!(MODULE_CORE2, domain_id::RANGE_PUSH_EX, fn(usize, *const c_void) -> c_int, (domain, attributes), 0)
}

unsafe extern "C" fn domain_range_pop(domain: *const Domain) -> c_int {
    let domain = cupti_domain(domain);
    on_to_cupti!(MODULE_CORE2, domain_id::RANGE_POP, fn(usize) -> c_int, (domain), 0)
}

unsafe extern "C" fn domain_create_a(name: *const c_char) -> *const Domain {
    // SAFETY: NVTX passes the program's zero-terminated name.
    unsafe { Text::narrow(name) }.map_or(std::ptr::null(), domain_create)
}

unsafe extern "C" fn domain_create_w(name: *const u32) -> *const Domain {
    // SAFETY: NVTX passes the program's zero-terminated wide name.
    unsafe { Text::wide(name) }.map_or(std::ptr::null(), domain_create)
}

/// The handle of the domain named `name`: one per name for the whole run (a destroyed one comes back to life),
/// so that a program creating its domain in a loop holds one; made in CUPTI at once when attached.
fn domain_create(name: Text) -> *const Domain {
    let mut gate = gate();
    let domain = match gate.domains.iter().find(|d| d.name == name) {
        Some(&known) => known,
        None => {
            let domain: &'static Domain =
                Box::leak(Box::new(Domain { name, cupti: AtomicUsize::new(0), destroyed: AtomicBool::new(false) }));
            gate.domains.push(domain);
            domain
        }
    };
    let revived = domain.destroyed.swap(false, Ordering::AcqRel);
    if (revived || domain.cupti.load(Ordering::Acquire) == 0)
        && let Some(slots) = forwarding()
    {
        domain.cupti.store(create_in_cupti(slots, &domain.name), Ordering::Release);
    }
    domain
}

unsafe extern "C" fn domain_destroy(domain: *const Domain) {
    // SAFETY: every domain handle the program holds came from `domain_create`.
    let Some(domain) = (unsafe { domain.as_ref() }) else { return };
    let _gate = gate();
    domain.destroyed.store(true, Ordering::Release);
    let cupti = domain.cupti.swap(0, Ordering::AcqRel);
    if cupti != 0 {
        on_to_cupti!(MODULE_CORE2, domain_id::DESTROY, fn(usize) -> (), (cupti), ())
    }
}

unsafe extern "C" fn register_string_a(domain: *const Domain, text: *const c_char) -> *const Registered {
    // SAFETY: NVTX passes the program's zero-terminated string.
    unsafe { Text::narrow(text) }.map_or(std::ptr::null(), |text| register(domain, text))
}

unsafe extern "C" fn register_string_w(domain: *const Domain, text: *const u32) -> *const Registered {
    // SAFETY: NVTX passes the program's zero-terminated wide string.
    unsafe { Text::wide(text) }.map_or(std::ptr::null(), |text| register(domain, text))
}

/// The handle of `text` in `domain`: the same for the same string, so that registering in a loop stays bounded.
fn register(domain: *const Domain, text: Text) -> *const Registered {
    let mut gate = gate();
    let key = (domain as usize, text);
    if let Some(&registered) = gate.registered.get(&key) {
        return registered;
    }
    let registered: &'static Registered = Box::leak(Box::new(Registered { text: key.1.clone() }));
    gate.registered.insert(key, registered);
    registered
}

fn core_functions() -> [(usize, usize); 11] {
    [
        (core_id::MARK_EX, mark_ex as *const () as usize),
        (core_id::MARK_A, mark_a as *const () as usize),
        (core_id::MARK_W, mark_w as *const () as usize),
        (core_id::RANGE_START_EX, range_start_ex as *const () as usize),
        (core_id::RANGE_START_A, range_start_a as *const () as usize),
        (core_id::RANGE_START_W, range_start_w as *const () as usize),
        (core_id::RANGE_END, range_end as *const () as usize),
        (core_id::RANGE_PUSH_EX, range_push_ex as *const () as usize),
        (core_id::RANGE_PUSH_A, range_push_a as *const () as usize),
        (core_id::RANGE_PUSH_W, range_push_w as *const () as usize),
        (core_id::RANGE_POP, range_pop as *const () as usize),
    ]
}

fn domain_functions() -> [(usize, usize); 10] {
    [
        (domain_id::MARK_EX, domain_mark_ex as *const () as usize),
        (domain_id::RANGE_START_EX, domain_range_start_ex as *const () as usize),
        (domain_id::RANGE_END, domain_range_end as *const () as usize),
        (domain_id::RANGE_PUSH_EX, domain_range_push_ex as *const () as usize),
        (domain_id::RANGE_POP, domain_range_pop as *const () as usize),
        (domain_id::REGISTER_STRING_A, register_string_a as *const () as usize),
        (domain_id::REGISTER_STRING_W, register_string_w as *const () as usize),
        (domain_id::CREATE_A, domain_create_a as *const () as usize),
        (domain_id::CREATE_W, domain_create_w as *const () as usize),
        (domain_id::DESTROY, domain_destroy as *const () as usize),
    ]
}

#[cfg(test)]
mod tests {
    //! An NVTX instance and a CUPTI made here: what the program's NVTX calls reach, closed and open.
    use super::*;

    /// The instance's core and domain slots, as an NVTX client's globals hold them.
    static CLIENT_CORE: [AtomicUsize; 16] = [const { AtomicUsize::new(0) }; 16];
    static CLIENT_DOMAIN: [AtomicUsize; 16] = [const { AtomicUsize::new(0) }; 16];
    static CLIENT_TABLES: OnceLock<(Vec<usize>, Vec<usize>)> = OnceLock::new();
    static CLIENT_CALLBACKS: CallbacksTable =
        CallbacksTable { struct_size: std::mem::size_of::<CallbacksTable>(), get_module_function_table: client_module };
    /// What the stand-in CUPTI was called with, in order.
    static CUPTI_LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());
    static CUPTI_DOMAINS: AtomicUsize = AtomicUsize::new(0x1000);

    fn log(line: String) {
        CUPTI_LOG.lock().unwrap().push(line);
    }

    fn taken_log() -> Vec<String> {
        std::mem::take(&mut *CUPTI_LOG.lock().unwrap())
    }

    unsafe extern "C" fn client_module(module: u32, out_table: *mut *mut *mut usize, out_size: *mut u32) -> c_int {
        let (core, domain) = CLIENT_TABLES.get_or_init(|| {
            let table = |slots: &'static [AtomicUsize; 16]| {
                let mut table = vec![0usize];
                table.extend(slots.iter().skip(1).map(|s| s.as_ptr() as usize));
                table.push(0);
                table
            };
            (table(&CLIENT_CORE), table(&CLIENT_DOMAIN))
        });
        let table = match module {
            MODULE_CORE => core,
            MODULE_CORE2 => domain,
            _ => return 0,
        };
        // SAFETY: out-parameters of the caller; the tables live in a static.
        unsafe {
            *out_table = table.as_ptr().cast::<*mut usize>().cast_mut();
            *out_size = (table.len() - 1) as u32;
        }
        1
    }

    unsafe extern "C" fn client_export_table(id: u32) -> *const c_void {
        if id == ETID_CALLBACKS { (&CLIENT_CALLBACKS as *const CallbacksTable).cast() } else { std::ptr::null() }
    }

    unsafe extern "C" fn cupti_push_a(message: *const c_char) -> c_int {
        // SAFETY: the program's zero-terminated message.
        log(format!("push {}", unsafe { std::ffi::CStr::from_ptr(message) }.to_string_lossy()));
        1
    }

    unsafe extern "C" fn cupti_pop() -> c_int {
        log("pop".into());
        0
    }

    unsafe extern "C" fn cupti_end(id: u64) {
        log(format!("end {id}"));
    }

    unsafe extern "C" fn cupti_domain_create(name: *const c_char) -> usize {
        let handle = CUPTI_DOMAINS.fetch_add(1, Ordering::SeqCst) + 1;
        // SAFETY: a zero-terminated name.
        log(format!("create {} -> {handle:#x}", unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy()));
        handle
    }

    unsafe extern "C" fn cupti_domain_push(domain: usize, attributes: *const u8) -> c_int {
        // SAFETY: attributes of at least 48 bytes, as the gate passes them.
        let (kind, message) = unsafe {
            (
                attributes.add(ATTRIBUTES_MESSAGE_TYPE_AT).cast::<i32>().read_unaligned(),
                attributes.add(ATTRIBUTES_MESSAGE_AT).cast::<*const c_char>().read_unaligned(),
            )
        };
        // SAFETY: an ASCII message is a zero-terminated string.
        let text = unsafe { std::ffi::CStr::from_ptr(message) }.to_string_lossy();
        log(format!("domain push {domain:#x} type {kind} {text}"));
        2
    }

    /// The stand-in CUPTI's NVTX hook: fills the core and domain slots it is shown.
    unsafe extern "C" fn cupti_init(get_export_table: GetExportTable) -> c_int {
        log("cupti init".into());
        // SAFETY: the gate's export table.
        let callbacks = unsafe { &*get_export_table(ETID_CALLBACKS).cast::<CallbacksTable>() };
        let fill = |module: u32, functions: &[(usize, usize)]| {
            let (mut table, mut size) = (std::ptr::null_mut(), 0u32);
            // SAFETY: the gate's module table with out-parameters.
            assert_eq!(unsafe { (callbacks.get_module_function_table)(module, &mut table, &mut size) }, 1);
            for &(id, function) in functions {
                assert!(id < size as usize);
                // SAFETY: the gate's table entry for `id` points at one of its slots.
                unsafe { (*table.add(id)).write(function) };
            }
        };
        fill(
            MODULE_CORE,
            &[
                (core_id::RANGE_PUSH_A, cupti_push_a as *const () as usize),
                (core_id::RANGE_POP, cupti_pop as *const () as usize),
                (core_id::RANGE_END, cupti_end as *const () as usize),
            ],
        );
        fill(
            MODULE_CORE2,
            &[
                (domain_id::CREATE_A, cupti_domain_create as *const () as usize),
                (domain_id::RANGE_PUSH_EX, cupti_domain_push as *const () as usize),
            ],
        );
        1
    }

    /// The program's call through its own slot, as NVTX's inline functions make it.
    fn client<F: Copy>(slots: &[AtomicUsize; 16], id: usize) -> F {
        let function = slots[id].load(Ordering::SeqCst);
        assert_ne!(function, 0, "slot {id} left empty");
        // SAFETY: the gate filled this slot with its function of type F.
        unsafe { std::mem::transmute_copy::<usize, F>(&function) }
    }

    /// Event attributes with a registered message (48 bytes, version 3).
    fn registered_attributes(handle: *const Registered) -> [u64; 6] {
        let mut attributes = [0u64; 6];
        let bytes = attributes.as_mut_ptr().cast::<u8>();
        // SAFETY: writes inside the 48 bytes.
        unsafe {
            bytes.cast::<u16>().write(3);
            bytes.add(2).cast::<u16>().write(48);
            bytes.add(ATTRIBUTES_MESSAGE_TYPE_AT).cast::<i32>().write(MESSAGE_REGISTERED);
            bytes.add(ATTRIBUTES_MESSAGE_AT).cast::<*const Registered>().write(handle);
        }
        attributes
    }

    type PushA = unsafe extern "C" fn(*const c_char) -> c_int;
    type Pop = unsafe extern "C" fn() -> c_int;
    type End = unsafe extern "C" fn(u64);
    type CreateA = unsafe extern "C" fn(*const c_char) -> *const Domain;
    type RegisterA = unsafe extern "C" fn(*const Domain, *const c_char) -> *const Registered;
    type DomainPushEx = unsafe extern "C" fn(*const Domain, *const c_void) -> c_int;
    type Destroy = unsafe extern "C" fn(*const Domain);

    /// One sequence, as the gate's state is the process's: NVTX before CUDA, a domain and a string made before
    /// the first window, two windows with a detach between.
    #[test]
    fn nvtx_reaches_cupti_only_while_attached_with_domains_and_strings_made_before() {
        // SAFETY: the instance's export table made above.
        assert_eq!(unsafe { initialize(client_export_table) }, 1);
        let push_a: PushA = client(&CLIENT_CORE, core_id::RANGE_PUSH_A);
        let pop: Pop = client(&CLIENT_CORE, core_id::RANGE_POP);
        let end: End = client(&CLIENT_CORE, core_id::RANGE_END);
        let create: CreateA = client(&CLIENT_DOMAIN, domain_id::CREATE_A);
        let register: RegisterA = client(&CLIENT_DOMAIN, domain_id::REGISTER_STRING_A);
        let domain_push: DomainPushEx = client(&CLIENT_DOMAIN, domain_id::RANGE_PUSH_EX);
        assert_eq!(CLIENT_CORE[core_id::NAME_OS_THREAD_A].load(Ordering::SeqCst), 0, "naming stays NVTX's no-op");

        // Before any window: nothing reaches CUPTI, and CUPTI's hook is not called.
        // SAFETY: the program's calls with valid strings and handles.
        unsafe {
            assert_eq!(push_a(c"outside".as_ptr()), 0);
            assert_eq!(pop(), 0);
        }
        // SAFETY: as above.
        let (domain, step) = unsafe {
            let domain = create(c"app".as_ptr());
            (domain, register(domain, c"step".as_ptr()))
        };
        // SAFETY: as above; the same string registered twice, or the same domain created twice, is one handle.
        unsafe {
            assert_eq!(register(domain, c"step".as_ptr()), step);
            assert_eq!(create(c"app".as_ptr()), domain);
        }
        assert!(taken_log().is_empty());

        open(Some(cupti_init));
        assert_eq!(taken_log(), ["cupti init", "create app -> 0x1001"]);
        let attributes = registered_attributes(step);
        // SAFETY: as above.
        unsafe {
            assert_eq!(domain_push(domain, attributes.as_ptr().cast()), 2);
            assert_eq!(push_a(c"inside".as_ptr()), 1);
            end(0);
            end(7);
        }
        assert_eq!(taken_log(), ["domain push 0x1001 type 1 step", "push inside", "end 7"]);

        close();
        // SAFETY: as above.
        unsafe { assert_eq!(push_a(c"between".as_ptr()), 0) };
        assert!(taken_log().is_empty());

        // A second window: CUPTI's hook is not called again; the domain is made again in the new attachment.
        open(Some(cupti_init));
        // SAFETY: as above.
        unsafe { domain_push(domain, attributes.as_ptr().cast()) };
        assert_eq!(taken_log(), ["create app -> 0x1002", "domain push 0x1002 type 1 step"]);

        // Destroyed and created again: the same handle, made again in CUPTI.
        let destroy: Destroy = client(&CLIENT_DOMAIN, domain_id::DESTROY);
        // SAFETY: as above.
        unsafe {
            destroy(domain);
            assert_eq!(create(c"app".as_ptr()), domain);
        }
        assert_eq!(taken_log(), ["create app -> 0x1003"]);
        close();
    }

    #[test]
    fn attributes_without_a_registered_string_pass_unchanged() {
        let mut buffer = [0u64; ATTRIBUTES_MAX_COPY / 8];
        let mut ascii = registered_attributes(std::ptr::null());
        // SAFETY: writes inside the 48 bytes.
        unsafe { ascii.as_mut_ptr().cast::<u8>().add(ATTRIBUTES_MESSAGE_TYPE_AT).cast::<i32>().write(MESSAGE_ASCII) };
        let passed = ascii.as_ptr().cast::<c_void>();
        // SAFETY: valid attributes, then a registered one with a null handle, then one too small to hold a message.
        unsafe {
            assert_eq!(with_text(passed, &mut buffer), passed);
            let null_handle = registered_attributes(std::ptr::null());
            assert_eq!(with_text(null_handle.as_ptr().cast(), &mut buffer), null_handle.as_ptr().cast());
            let mut small = registered_attributes(std::ptr::null());
            small.as_mut_ptr().cast::<u16>().add(1).write(16);
            assert_eq!(with_text(small.as_ptr().cast(), &mut buffer), small.as_ptr().cast());
            assert_eq!(with_text(std::ptr::null(), &mut buffer), std::ptr::null());
        }
    }
}
