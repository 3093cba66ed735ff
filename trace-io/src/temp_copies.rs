//! Private temporary copies (an unpacked `.sqlite.gz`, a pipe read once) removed on every way out, and pipes and
//! devices that would otherwise block or never end.
//!
//! A copy is removed when dropped (normal end, error, panic). On SIGINT, SIGTERM or SIGHUP a handler — installed
//! by the program with [`remove_copies_on_signals`], never by the library on its own, since the Python module
//! must keep the interpreter's handlers — unlinks every live copy and then lets the signal end the process as it
//! would have. SIGKILL cannot be handled: each copy's name carries the process id
//! (`shardscope-<pid>-…` in the temporary folder), and the next copy made removes those of processes that no
//! longer run ([`remove_stale`]).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::Error;

/// Copies that may be live at once (each reader holds one while it reads): more are still removed on drop.
const SLOTS: usize = 64;

/// The paths of live copies as C strings, for the signal handler (which may not lock or allocate).
static LIVE: [AtomicPtr<libc::c_char>; SLOTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];

/// The prefix of every copy's name, before the process id.
const PREFIX: &str = "shardscope-";

/// Environment variable: seconds to wait for a writer to open a named pipe given as input (default 60).
pub const PIPE_WAIT_ENV: &str = "SHARDSCOPE_PIPE_WAIT_S";
const DEFAULT_PIPE_WAIT_S: u64 = 60;

/// A private temporary copy, registered for removal on signals while it lives.
pub(crate) struct TempCopy {
    file: tempfile::NamedTempFile,
    slot: Option<usize>,
}

impl TempCopy {
    /// Creates an empty copy in the temporary folder, after removing those left by killed processes.
    pub(crate) fn create() -> std::io::Result<TempCopy> {
        let folder = std::env::temp_dir();
        remove_stale(&folder);
        let file = tempfile::Builder::new().prefix(&format!("{PREFIX}{}-", std::process::id())).tempfile_in(folder)?;
        let slot = CString::new(file.path().as_os_str().as_bytes()).ok().and_then(|path| {
            let raw = path.into_raw();
            let slot = LIVE.iter().position(|s| {
                s.compare_exchange(std::ptr::null_mut(), raw, Ordering::SeqCst, Ordering::SeqCst).is_ok()
            });
            if slot.is_none() {
                // SAFETY: `raw` came from `CString::into_raw` just above and was not stored.
                drop(unsafe { CString::from_raw(raw) });
            }
            slot
        });
        Ok(TempCopy { file, slot })
    }

    pub(crate) fn path(&self) -> &Path {
        self.file.path()
    }

    pub(crate) fn as_file_mut(&mut self) -> &mut std::fs::File {
        self.file.as_file_mut()
    }
}

impl Drop for TempCopy {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            let raw = LIVE[slot].swap(std::ptr::null_mut(), Ordering::SeqCst);
            if !raw.is_null() {
                // SAFETY: every non-null pointer in `LIVE` came from `CString::into_raw`, and the swap took it out.
                drop(unsafe { CString::from_raw(raw) });
            }
        }
        // The file itself is removed by `NamedTempFile`'s own drop.
    }
}

/// Installs handlers for SIGINT, SIGTERM and SIGHUP that remove every live copy, then end the process by the
/// same signal. For programs (the analyzer, the viewer); a library embedding the readers keeps its own handlers.
pub fn remove_copies_on_signals() {
    extern "C" fn on_signal(signal: libc::c_int) {
        for slot in &LIVE {
            let path = slot.load(Ordering::SeqCst);
            if !path.is_null() {
                // SAFETY: `path` is a NUL-terminated string that stays allocated while it is in `LIVE`; `unlink`
                // is async-signal-safe.
                unsafe { libc::unlink(path) };
            }
        }
        // SAFETY: restoring the default action and raising the signal again are async-signal-safe.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: `on_signal` only calls async-signal-safe functions.
        unsafe { libc::signal(signal, on_signal as *const () as libc::sighandler_t) };
    }
}

/// Removes `shardscope-<pid>-…` files in `folder` whose process no longer runs (Linux: no `/proc/<pid>`).
pub(crate) fn remove_stale(folder: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(folder) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let ours = entry.metadata().is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            // Only our own user's files: another user's are not ours to remove (and we could not).
            m.is_file() && std::fs::metadata("/proc/self").is_ok_and(|me| me.uid() == m.uid())
        });
        if ours && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Opens an input that is not a regular file: a device is refused (`/dev/zero` never ends, `/dev/tty` waits for
/// typing), a named pipe is opened without blocking and given [`PIPE_WAIT_ENV`] seconds for a writer.
pub(crate) fn open_special(path: &Path, metadata: &std::fs::Metadata) -> Result<std::fs::File, Error> {
    use std::os::unix::fs::FileTypeExt;
    let kind = metadata.file_type();
    if kind.is_char_device() || kind.is_block_device() {
        return Err(Error::format(path, "is a device, not a trace file"));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    if kind.is_fifo() {
        wait_for_writer(path, &file)?;
    }
    // Reading blocks again from here: the copy waits for the writer's data as any reader of a pipe does.
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is open for the life of `file`; F_GETFL/F_SETFL only change its status flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// Waits until a writer has opened the pipe (data or end of file can be read), at most the configured time.
fn wait_for_writer(path: &Path, file: &std::fs::File) -> Result<(), Error> {
    let wait_s = std::env::var(PIPE_WAIT_ENV).ok().and_then(|v| v.trim().parse::<u64>().ok());
    let wait_s = wait_s.unwrap_or(DEFAULT_PIPE_WAIT_S);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait_s);
    loop {
        let left_ms = deadline.saturating_duration_since(std::time::Instant::now()).as_millis();
        let mut poll = libc::pollfd { fd: file.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid `pollfd` for a descriptor open for the life of `file`.
        let ready = unsafe { libc::poll(&mut poll, 1, left_ms.min(i32::MAX as u128) as i32) };
        match ready {
            n if n > 0 => return Ok(()),
            0 => {
                return Err(Error::format(
                    path,
                    format!("no writer opened the pipe within {wait_s} s (set {PIPE_WAIT_ENV} to wait longer)"),
                ));
            }
            _ => {
                let error = std::io::Error::last_os_error();
                if error.kind() != std::io::ErrorKind::Interrupted {
                    return Err(Error::io(path, error));
                }
            }
        }
    }
}
