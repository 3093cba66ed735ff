//! Capture windows inside one process: whether recording is on, and what switches it.
//!
//! [`WindowMachine`] is the state machine every trigger goes through (`cudaProfilerStart`/`Stop`, the
//! named NVTX range, the time schedule, `capture start`/`stop`); it decides, and the live side
//! (`switch.rs`) does what it decided: CUPTI kinds on or off, a window record, a flush. It holds no
//! CUPTI state, so the tests drive it directly. [`TimeSchedule`] says when the time trigger opens and
//! closes windows, and [`nvtx_push_message`] reads the message of an NVTX push or start (ASCII, wide or
//! registered) from CUPTI's callback data.
//!
//! Rules: a start while recording is on does nothing (the window stays open, opened by its first
//! trigger); a stop while recording is off is a *stray stop*, reported once and otherwise ignored;
//! after `repeat` windows no trigger opens another. Nested pushes of the named NVTX range keep one
//! window open until the outermost pop; a started range (`nvtxRangeStart*`, closed by its id on any thread)
//! counts as one more open range until its end.

use std::ffi::{CStr, c_char, c_void};

use shardscope_spool::config::{WindowPlan, WindowTrigger};
use shardscope_spool::cupti::WindowRecord;

/// What a trigger changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing: already in the asked state, or no windows left.
    Unchanged,
    /// Recording switched on.
    Opened,
    /// Recording switched off; the window that closed.
    Closed(WindowRecord),
    /// A stop while recording was off; `first` is true the first time in this process (say it once).
    StrayStop {
        /// The first stray stop of the process.
        first: bool,
    },
}

/// Whether recording is on in this process, and the windows taken so far.
#[derive(Debug, Clone)]
pub struct WindowMachine {
    repeat: u32,
    recording: bool,
    opened_at_ns: u64,
    opened_by: WindowTrigger,
    windows_taken: u32,
    nvtx_ranges_open: u32,
    stray_stops: u64,
}

impl WindowMachine {
    /// The state at the process's start (`now_ns`): on unless the plan waits for a trigger.
    pub fn new(plan: &WindowPlan, now_ns: u64) -> WindowMachine {
        let recording = !plan.starts_off();
        WindowMachine {
            repeat: plan.repeat,
            recording,
            opened_at_ns: now_ns,
            opened_by: WindowTrigger::ProcessStart,
            windows_taken: u32::from(recording),
            nvtx_ranges_open: 0,
            stray_stops: 0,
        }
    }

    /// Recording is on.
    pub fn recording(&self) -> bool {
        self.recording
    }

    /// Windows opened so far.
    pub fn windows_taken(&self) -> u32 {
        self.windows_taken
    }

    /// Stops that came while recording was off.
    pub fn stray_stops(&self) -> u64 {
        self.stray_stops
    }

    /// No trigger may open another window (`repeat` reached).
    pub fn exhausted(&self) -> bool {
        self.repeat > 0 && self.windows_taken >= self.repeat
    }

    /// `trigger` asks for recording at `now_ns`.
    pub fn start(&mut self, trigger: WindowTrigger, now_ns: u64) -> Transition {
        if self.recording || self.exhausted() {
            return Transition::Unchanged;
        }
        self.recording = true;
        self.opened_at_ns = now_ns;
        self.opened_by = trigger;
        self.windows_taken += 1;
        Transition::Opened
    }

    /// `trigger` asks for recording to end at `now_ns`.
    pub fn stop(&mut self, trigger: WindowTrigger, now_ns: u64) -> Transition {
        if !self.recording {
            self.stray_stops += 1;
            return Transition::StrayStop { first: self.stray_stops == 1 };
        }
        self.recording = false;
        Transition::Closed(WindowRecord {
            start_ns: self.opened_at_ns,
            end_ns: now_ns.max(self.opened_at_ns),
            start_trigger: self.opened_by as u8,
            end_trigger: trigger as u8,
        })
    }

    /// A push of the named NVTX range: the first one open opens a window.
    pub fn nvtx_push(&mut self, now_ns: u64) -> Transition {
        self.nvtx_ranges_open += 1;
        if self.nvtx_ranges_open == 1 { self.start(WindowTrigger::Nvtx, now_ns) } else { Transition::Unchanged }
    }

    /// The pop of a named NVTX range: the last one closing closes the window (when one is open; another
    /// trigger may have closed it already, which is not a stray stop).
    pub fn nvtx_pop(&mut self, now_ns: u64) -> Transition {
        if self.nvtx_ranges_open == 0 {
            return Transition::Unchanged;
        }
        self.nvtx_ranges_open -= 1;
        if self.nvtx_ranges_open == 0 && self.recording {
            self.stop(WindowTrigger::Nvtx, now_ns)
        } else {
            Transition::Unchanged
        }
    }

    /// At exit: the window still open, closed at `now_ns`.
    pub fn at_exit(&mut self, now_ns: u64) -> Option<WindowRecord> {
        match self.stop(WindowTrigger::ProcessExit, now_ns) {
            Transition::Closed(window) => Some(window),
            _ => {
                // Not a stray stop: nothing asked for it.
                self.stray_stops = self.stray_stops.saturating_sub(1);
                None
            }
        }
    }
}

/// When the time trigger opens and closes windows, on the wall clock (ns since the Unix epoch): the first
/// opening `delay` after the session start, each closing `duration` after its opening, the next opening
/// `every` after the previous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeSchedule {
    /// Next opening, if any.
    pub next_open_ns: Option<u64>,
    /// Closing of the window the schedule opened, if open.
    pub close_ns: Option<u64>,
    duration_ns: Option<u64>,
    every_ns: Option<u64>,
}

/// What the schedule asks for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeAction {
    /// Open a window.
    Open,
    /// Close the window.
    Close,
}

impl TimeSchedule {
    /// The schedule of `plan` for a session that started at `session_start_ns`; `None` without a time trigger.
    pub fn new(plan: &WindowPlan, session_start_ns: u64) -> Option<TimeSchedule> {
        plan.timed().then(|| TimeSchedule {
            next_open_ns: Some(session_start_ns.saturating_add(plan.delay_ns.unwrap_or(0))),
            close_ns: None,
            duration_ns: plan.duration_ns,
            every_ns: plan.every_ns.filter(|&every| every > 0),
        })
    }

    /// The earliest time the schedule needs looking at again.
    pub fn next_deadline_ns(&self) -> Option<u64> {
        [self.next_open_ns, self.close_ns].into_iter().flatten().min()
    }

    /// What is due at `now_ns` (a closing before an opening), advancing the schedule past it.
    pub fn due(&mut self, now_ns: u64) -> Option<TimeAction> {
        if let Some(close) = self.close_ns
            && now_ns >= close
        {
            self.close_ns = None;
            return Some(TimeAction::Close);
        }
        let open = self.next_open_ns.filter(|&open| now_ns >= open)?;
        // A late wake-up takes the latest opening it missed instead of opening them all one after another.
        let slot = self.every_ns.map_or(open, |every| open.saturating_add((now_ns - open) / every * every));
        self.close_ns = self.duration_ns.map(|d| slot.saturating_add(d));
        self.next_open_ns = self.every_ns.map(|every| slot.saturating_add(every));
        Some(TimeAction::Open)
    }
}

/// NVTX callback ids (CUPTI's `CUpti_nvtx_api_trace_cbid`) that the NVTX trigger follows.
pub mod nvtx_cbid {
    /// `nvtxRangeStartA(const char*)`.
    pub const RANGE_START_A: u32 = 4;
    /// `nvtxRangeStartW(const wchar_t*)`.
    pub const RANGE_START_W: u32 = 5;
    /// `nvtxRangeStartEx(const nvtxEventAttributes_t*)`.
    pub const RANGE_START_EX: u32 = 6;
    /// `nvtxRangeEnd(nvtxRangeId_t)`.
    pub const RANGE_END: u32 = 7;
    /// `nvtxRangePushA(const char*)`.
    pub const RANGE_PUSH_A: u32 = 8;
    /// `nvtxRangePushW(const wchar_t*)`.
    pub const RANGE_PUSH_W: u32 = 9;
    /// `nvtxRangePushEx(const nvtxEventAttributes_t*)`.
    pub const RANGE_PUSH_EX: u32 = 10;
    /// `nvtxRangePop()`.
    pub const RANGE_POP: u32 = 11;
    /// `nvtxDomainRangeStartEx(domain, const nvtxEventAttributes_t*)`.
    pub const DOMAIN_RANGE_START_EX: u32 = 31;
    /// `nvtxDomainRangeEnd(domain, nvtxRangeId_t)`.
    pub const DOMAIN_RANGE_END: u32 = 32;
    /// `nvtxDomainRangePushEx(domain, const nvtxEventAttributes_t*)`.
    pub const DOMAIN_RANGE_PUSH_EX: u32 = 33;
    /// `nvtxDomainRangePop(domain)`.
    pub const DOMAIN_RANGE_POP: u32 = 34;
    /// `nvtxDomainRegisterStringA(domain, const char*)`.
    pub const DOMAIN_REGISTER_STRING_A: u32 = 39;
    /// `nvtxDomainRegisterStringW(domain, const wchar_t*)`.
    pub const DOMAIN_REGISTER_STRING_W: u32 = 40;
    /// `nvtxDomainCreateA(const char*)`.
    pub const DOMAIN_CREATE_A: u32 = 41;
    /// `nvtxDomainCreateW(const wchar_t*)`.
    pub const DOMAIN_CREATE_W: u32 = 42;
    /// Every id above, to switch their callbacks on (and no other NVTX callback: marks, names and categories
    /// never reach the library).
    pub const ALL: [u32; 16] = [
        RANGE_START_A,
        RANGE_START_W,
        RANGE_START_EX,
        RANGE_END,
        RANGE_PUSH_A,
        RANGE_PUSH_W,
        RANGE_PUSH_EX,
        RANGE_POP,
        DOMAIN_RANGE_START_EX,
        DOMAIN_RANGE_END,
        DOMAIN_RANGE_PUSH_EX,
        DOMAIN_RANGE_POP,
        DOMAIN_REGISTER_STRING_A,
        DOMAIN_REGISTER_STRING_W,
        DOMAIN_CREATE_A,
        DOMAIN_CREATE_W,
    ];
}

/// `CUpti_NvtxData`, what CUPTI passes to an NVTX-domain callback.
#[repr(C)]
pub struct NvtxData {
    /// The NVTX function's name.
    pub function_name: *const c_char,
    /// Its parameter struct (`nvtxRangePushA_params`, …).
    pub function_params: *const c_void,
    /// Its return value (a domain or string handle for the create and register calls).
    pub function_return_value: *const c_void,
}

/// The head of NVTX's `nvtxEventAttributes_t` (version 3), up to the message.
#[repr(C)]
pub struct NvtxEventAttributes {
    /// Struct version.
    pub version: u16,
    /// Struct size, bytes.
    pub size: u16,
    /// Category.
    pub category: u32,
    /// Colour type.
    pub color_type: i32,
    /// Colour.
    pub color: u32,
    /// Payload type.
    pub payload_type: i32,
    /// Reserved.
    pub reserved0: i32,
    /// Payload (a union of 8 bytes).
    pub payload: u64,
    /// `NVTX_MESSAGE_TYPE_ASCII` (1), `UNICODE` (2) or `REGISTERED` (3).
    pub message_type: i32,
    /// The message: a C string, a wide string or a registered string handle.
    pub message: *const c_void,
}

/// `NVTX_MESSAGE_TYPE_ASCII`.
const MESSAGE_ASCII: i32 = 1;
/// `NVTX_MESSAGE_TYPE_UNICODE`: a `wchar_t` string (32-bit units on Linux).
const MESSAGE_UNICODE: i32 = 2;
/// `NVTX_MESSAGE_TYPE_REGISTERED`.
const MESSAGE_REGISTERED: i32 = 3;

/// Longest NVTX name read, in characters: a range name is short, and a longer text is never the named range.
const MAX_NAME_CHARS: usize = 4096;

/// An NVTX range's message and domain handle (0: the default domain) from its callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushMessage {
    /// A plain message (from an ASCII or a wide string).
    Text(String),
    /// A string registered earlier in the domain, by its handle.
    Registered(usize),
    /// A missing or unreadable message: never the named range.
    Unreadable,
}

/// How a range opens: pushed (nests per thread, closed by the pop of its domain) or started (closed by the
/// end of the id its start returned, on any thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOpen {
    /// `nvtxRangePush*`, `nvtxDomainRangePushEx`.
    Push,
    /// `nvtxRangeStart*`, `nvtxDomainRangeStartEx`.
    Start,
}

/// Whether callback `cbid` opens a range, and how.
pub fn range_open_kind(cbid: u32) -> Option<RangeOpen> {
    match cbid {
        nvtx_cbid::RANGE_PUSH_A
        | nvtx_cbid::RANGE_PUSH_W
        | nvtx_cbid::RANGE_PUSH_EX
        | nvtx_cbid::DOMAIN_RANGE_PUSH_EX => Some(RangeOpen::Push),
        nvtx_cbid::RANGE_START_A
        | nvtx_cbid::RANGE_START_W
        | nvtx_cbid::RANGE_START_EX
        | nvtx_cbid::DOMAIN_RANGE_START_EX => Some(RangeOpen::Start),
        _ => None,
    }
}

/// Reads the message (and domain handle) of the push or start that callback `cbid` reports.
///
/// # Safety
/// `data` is the `CUpti_NvtxData` CUPTI passed with `cbid`, valid for the call.
pub unsafe fn nvtx_push_message(cbid: u32, data: &NvtxData) -> Option<(usize, PushMessage)> {
    let params = data.function_params;
    if params.is_null() {
        return None;
    }
    let text = |read: Option<String>| read.map_or(PushMessage::Unreadable, PushMessage::Text);
    // SAFETY: every read below reads the parameter struct of `cbid`, as NVTX declares it: the `A` and `W` calls'
    // params hold one string pointer, the `Ex` calls' one attributes pointer, the domain calls' a domain handle
    // then the attributes pointer.
    unsafe {
        let (domain, attributes) = match cbid {
            nvtx_cbid::RANGE_PUSH_A | nvtx_cbid::RANGE_START_A => {
                return Some((0, text(c_text(*(params as *const *const c_char)))));
            }
            nvtx_cbid::RANGE_PUSH_W | nvtx_cbid::RANGE_START_W => {
                return Some((0, text(wide_text(*(params as *const *const u32)))));
            }
            nvtx_cbid::RANGE_PUSH_EX | nvtx_cbid::RANGE_START_EX => (0, *(params as *const *const NvtxEventAttributes)),
            nvtx_cbid::DOMAIN_RANGE_PUSH_EX | nvtx_cbid::DOMAIN_RANGE_START_EX => {
                let words = params as *const usize;
                (*words, *(words.add(1) as *const *const NvtxEventAttributes))
            }
            _ => return None,
        };
        if attributes.is_null() {
            return Some((domain, PushMessage::Unreadable));
        }
        let attributes = &*attributes;
        let message = match attributes.message_type {
            MESSAGE_ASCII => text(c_text(attributes.message as *const c_char)),
            MESSAGE_UNICODE => text(wide_text(attributes.message as *const u32)),
            MESSAGE_REGISTERED => PushMessage::Registered(attributes.message as usize),
            _ => PushMessage::Unreadable,
        };
        Some((domain, message))
    }
}

/// The range id an end callback closes, and its domain handle (0: the default domain).
///
/// # Safety
/// `data` is the `CUpti_NvtxData` CUPTI passed with `cbid`, valid for the call.
pub unsafe fn nvtx_end_id(cbid: u32, data: &NvtxData) -> Option<(usize, u64)> {
    let params = data.function_params;
    if params.is_null() {
        return None;
    }
    // SAFETY: `nvtxRangeEnd_params` holds the 64-bit range id; `nvtxDomainRangeEnd_params` a domain handle, then
    // the id (8-byte aligned on 64-bit Linux).
    unsafe {
        match cbid {
            nvtx_cbid::RANGE_END => Some((0, *(params as *const u64))),
            nvtx_cbid::DOMAIN_RANGE_END => {
                let words = params as *const usize;
                Some((*words, *(words.add(1) as *const u64)))
            }
            _ => None,
        }
    }
}

/// The wide (`wchar_t`, UTF-32 on Linux) string at `ptr`, if any and if it is valid text of at most
/// [`MAX_NAME_CHARS`] characters.
///
/// # Safety
/// `ptr` is null or a NUL-terminated `wchar_t` string.
pub unsafe fn wide_text(ptr: *const u32) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    let mut text = String::new();
    for i in 0..=MAX_NAME_CHARS {
        // SAFETY: the caller's promise: every unit up to the terminating NUL is readable.
        let unit = unsafe { *ptr.add(i) };
        if unit == 0 {
            return Some(text);
        }
        text.push(char::from_u32(unit)?);
    }
    None
}

/// The C string at `ptr`, if any.
///
/// # Safety
/// `ptr` is null or a NUL-terminated string.
pub unsafe fn c_text(ptr: *const c_char) -> Option<String> {
    // SAFETY: the caller's promise.
    (!ptr.is_null()).then(|| unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> WindowPlan {
        WindowPlan::parse(text).unwrap()
    }

    #[test]
    fn without_a_trigger_recording_is_on_from_the_start() {
        let mut machine = WindowMachine::new(&WindowPlan::default(), 10);
        assert!(machine.recording());
        let Transition::Closed(window) = machine.stop(WindowTrigger::External, 30) else { panic!() };
        assert_eq!((window.start_ns, window.end_ns), (10, 30));
        assert_eq!(window.start_trigger, WindowTrigger::ProcessStart as u8);
        assert_eq!(machine.start(WindowTrigger::External, 40), Transition::Opened);
    }

    #[test]
    fn repeat_limits_the_windows_and_a_stray_stop_is_said_once() {
        let mut machine = WindowMachine::new(&plan("cuda-profiler-api=1\nrepeat=2"), 0);
        assert!(!machine.recording());
        assert_eq!(machine.stop(WindowTrigger::CudaProfilerApi, 1), Transition::StrayStop { first: true });
        assert_eq!(machine.stop(WindowTrigger::CudaProfilerApi, 2), Transition::StrayStop { first: false });
        for t in [10, 30] {
            assert_eq!(machine.start(WindowTrigger::CudaProfilerApi, t), Transition::Opened);
            assert_eq!(machine.start(WindowTrigger::CudaProfilerApi, t + 1), Transition::Unchanged);
            assert!(matches!(machine.stop(WindowTrigger::CudaProfilerApi, t + 5), Transition::Closed(_)));
        }
        assert!(machine.exhausted());
        assert_eq!(machine.start(WindowTrigger::CudaProfilerApi, 50), Transition::Unchanged);
        assert_eq!(machine.stray_stops(), 2);
        assert_eq!(machine.at_exit(60), None);
        assert_eq!(machine.stray_stops(), 2);
    }

    #[test]
    fn nested_nvtx_ranges_make_one_window_and_an_open_window_closes_at_exit() {
        let mut machine = WindowMachine::new(&plan("nvtx-range=step"), 0);
        assert_eq!(machine.nvtx_push(5), Transition::Opened);
        assert_eq!(machine.nvtx_push(6), Transition::Unchanged);
        assert_eq!(machine.nvtx_pop(7), Transition::Unchanged);
        let Transition::Closed(window) = machine.nvtx_pop(9) else { panic!() };
        assert_eq!((window.start_ns, window.end_ns, window.end_trigger), (5, 9, WindowTrigger::Nvtx as u8));
        assert_eq!(machine.nvtx_pop(10), Transition::Unchanged, "an unmatched pop is not a stray stop");
        machine.nvtx_push(11);
        let window = machine.at_exit(20).unwrap();
        assert_eq!(window.end_trigger, WindowTrigger::ProcessExit as u8);
    }

    #[test]
    fn the_time_schedule_opens_every_period_and_skips_missed_openings() {
        let plan = plan("delay-ns=100\nduration-ns=10\nevery-ns=50");
        let mut schedule = TimeSchedule::new(&plan, 1000).unwrap();
        assert_eq!(schedule.next_deadline_ns(), Some(1100));
        assert_eq!(schedule.due(1099), None);
        assert_eq!(schedule.due(1100), Some(TimeAction::Open));
        assert_eq!(schedule.next_deadline_ns(), Some(1110));
        assert_eq!(schedule.due(1112), Some(TimeAction::Close));
        assert_eq!(schedule.due(1149), None);
        assert_eq!(schedule.due(1260), Some(TimeAction::Open), "1150 and 1200 missed, 1250 taken");
        assert_eq!(schedule.close_ns, Some(1260));
        assert_eq!(schedule.next_open_ns, Some(1300));
        assert!(TimeSchedule::new(&WindowPlan::default(), 0).is_none());
    }

    /// NVTX event attributes carrying `message` of `message_type`.
    fn attributes(message_type: i32, message: *const c_void) -> NvtxEventAttributes {
        NvtxEventAttributes {
            version: 3,
            size: std::mem::size_of::<NvtxEventAttributes>() as u16,
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

    /// The callback data CUPTI passes with `params`.
    fn data(params: *const c_void) -> NvtxData {
        NvtxData { function_name: std::ptr::null(), function_params: params, function_return_value: std::ptr::null() }
    }

    #[test]
    fn push_messages_are_read_from_each_push_callback() {
        let text = c"step 3";
        let attributes = attributes(MESSAGE_ASCII, text.as_ptr() as *const c_void);
        let plain = text.as_ptr();
        // SAFETY: each parameter struct is laid out as NVTX declares it for its callback id.
        unsafe {
            let read = nvtx_push_message(nvtx_cbid::RANGE_PUSH_A, &data(&plain as *const _ as *const c_void));
            assert_eq!(read, Some((0, PushMessage::Text("step 3".into()))));
            let pointer: *const NvtxEventAttributes = &attributes;
            let read = nvtx_push_message(nvtx_cbid::RANGE_PUSH_EX, &data(&pointer as *const _ as *const c_void));
            assert_eq!(read, Some((0, PushMessage::Text("step 3".into()))));
            let domain_params: [usize; 2] = [0xd0, pointer as usize];
            let read =
                nvtx_push_message(nvtx_cbid::DOMAIN_RANGE_PUSH_EX, &data(domain_params.as_ptr() as *const c_void));
            assert_eq!(read, Some((0xd0, PushMessage::Text("step 3".into()))));
            assert_eq!(nvtx_push_message(nvtx_cbid::RANGE_POP, &data(plain as *const c_void)), None);
        }
    }

    #[test]
    fn starts_and_wide_messages_are_read_and_ends_give_their_ids() {
        let wide: Vec<u32> = "step 3".chars().map(u32::from).chain([0]).collect();
        let attributes = attributes(MESSAGE_UNICODE, wide.as_ptr() as *const c_void);
        let text = PushMessage::Text("step 3".into());
        let plain = c"step 3".as_ptr();
        let wide_ptr = wide.as_ptr();
        let pointer: *const NvtxEventAttributes = &attributes;
        // SAFETY: each parameter struct is laid out as NVTX declares it for its callback id.
        unsafe {
            let read = |cbid, params: *const c_void| nvtx_push_message(cbid, &data(params));
            assert_eq!(read(nvtx_cbid::RANGE_START_A, &plain as *const _ as *const c_void), Some((0, text.clone())));
            assert_eq!(read(nvtx_cbid::RANGE_START_W, &wide_ptr as *const _ as *const c_void), Some((0, text.clone())));
            assert_eq!(read(nvtx_cbid::RANGE_PUSH_W, &wide_ptr as *const _ as *const c_void), Some((0, text.clone())));
            assert_eq!(read(nvtx_cbid::RANGE_START_EX, &pointer as *const _ as *const c_void), Some((0, text.clone())));
            let domain_params: [usize; 2] = [0xd0, pointer as usize];
            let read_domain = read(nvtx_cbid::DOMAIN_RANGE_START_EX, domain_params.as_ptr() as *const c_void);
            assert_eq!(read_domain, Some((0xd0, text.clone())));
            let end: u64 = 0x1_0000_0007;
            assert_eq!(nvtx_end_id(nvtx_cbid::RANGE_END, &data(&end as *const _ as *const c_void)), Some((0, end)));
            let domain_end: [u64; 2] = [0xd0, end];
            let read_end = nvtx_end_id(nvtx_cbid::DOMAIN_RANGE_END, &data(domain_end.as_ptr() as *const c_void));
            assert_eq!(read_end, Some((0xd0, end)));
            assert_eq!(nvtx_end_id(nvtx_cbid::RANGE_POP, &data(&end as *const _ as *const c_void)), None);
            // Not text: a surrogate code unit, and a string longer than any range name.
            assert_eq!(wide_text([0xd800u32, 0].as_ptr()), None);
            let long: Vec<u32> = std::iter::repeat_n(u32::from('a'), MAX_NAME_CHARS + 1).chain([0]).collect();
            assert_eq!(wide_text(long.as_ptr()), None);
        }
        assert_eq!(range_open_kind(nvtx_cbid::RANGE_START_W), Some(RangeOpen::Start));
        assert_eq!(range_open_kind(nvtx_cbid::RANGE_PUSH_W), Some(RangeOpen::Push));
        assert_eq!(range_open_kind(nvtx_cbid::RANGE_END), None);
    }
}
