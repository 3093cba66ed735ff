//! `capture start` / `capture stop` from another shell: switching recording in every process of a running
//! capture.
//!
//! A running capture is known by its spool folder. The launcher notes that folder in a registry file named
//! after its own pid (`<runtime dir>/shardscope-captures/<pid>`), so that `capture start` with no
//! `--session` finds the one capture running. The command writes the control file of the folder
//! (`shardscope_spool::config::CONTROL_FILE_NAME`: `start N` or `stop N`, N one more than before) by
//! writing a new file and renaming it over the old one, so a process never reads half a command. The
//! injection library's background thread in every process looks at the file every 100 ms and acts on a
//! generation it has not seen; a process that starts later takes the state the file holds.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use shardscope_spool::config::{CONTROL_FILE_NAME, ControlCommand};

/// The folder of registry files: `$XDG_RUNTIME_DIR` or the temporary folder, then `shardscope-captures`.
pub fn registry_dir() -> PathBuf {
    let base = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    base.join("shardscope-captures")
}

/// Notes that this launcher records into `spool_dir`; the note is removed when the returned guard drops.
pub struct Registration {
    path: PathBuf,
}

impl Registration {
    /// Writes the note (a capture that cannot be found by `capture start` still records: errors are ignored,
    /// `--session` then names the folder).
    pub fn new(spool_dir: &Path) -> Registration {
        let dir = registry_dir();
        let path = dir.join(std::process::id().to_string());
        let _ = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&path, spool_dir.as_os_str().as_encoded_bytes()));
        Registration { path }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The spool folders of the captures running now (launcher still alive), from the registry.
pub fn running_sessions() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(registry_dir()) else { return Vec::new() };
    let mut sessions: Vec<PathBuf> = entries
        .flatten()
        .filter(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<u32>().ok();
            pid.is_some_and(|pid| Path::new("/proc").join(pid.to_string()).exists())
        })
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok().map(PathBuf::from))
        .filter(|dir| dir.is_dir())
        .collect();
    sessions.sort();
    sessions
}

/// The spool folder to control: `session` when given, else the one running capture.
pub fn find_session(session: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = session {
        if !dir.is_dir() {
            bail!("{}: not a spool folder of a capture (no such folder)", dir.display());
        }
        return Ok(dir.to_path_buf());
    }
    let mut sessions = running_sessions();
    match sessions.len() {
        0 => bail!("no running capture found (in {}); name its spool folder with --session", registry_dir().display()),
        1 => Ok(sessions.remove(0)),
        _ => bail!(
            "{} captures are running ({}); name one with --session",
            sessions.len(),
            sessions.iter().map(|s| s.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Writes the next command to `spool_dir`'s control file and returns it.
pub fn send(spool_dir: &Path, recording: bool) -> anyhow::Result<ControlCommand> {
    let path = spool_dir.join(CONTROL_FILE_NAME);
    let previous = std::fs::read_to_string(&path).ok().and_then(|text| ControlCommand::parse(&text));
    let command = ControlCommand { recording, generation: previous.map_or(1, |p| p.generation + 1) };
    let partial = spool_dir.join(format!("{CONTROL_FILE_NAME}.{}", std::process::id()));
    std::fs::write(&partial, command.to_text()).with_context(|| format!("{}: cannot write", partial.display()))?;
    std::fs::rename(&partial, &path).with_context(|| format!("{}: cannot write", path.display()))?;
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_command_advances_the_generation_and_replaces_the_file_whole() {
        let dir = std::env::temp_dir().join(format!("shardscope-control-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(send(&dir, false).unwrap(), ControlCommand { recording: false, generation: 1 });
        assert_eq!(send(&dir, true).unwrap(), ControlCommand { recording: true, generation: 2 });
        let text = std::fs::read_to_string(dir.join(CONTROL_FILE_NAME)).unwrap();
        assert_eq!(ControlCommand::parse(&text), Some(ControlCommand { recording: true, generation: 2 }));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no partial file left");
        assert!(find_session(Some(&dir.join("missing"))).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
