//! `capture --torch-modules`: a Python start-up hook that records every PyTorch module forward as an NVTX range.
//!
//! The hook is a `sitecustomize.py` (kept beside this file and built into the binary) that the launcher writes
//! into a folder of its own and puts first on the workload's `PYTHONPATH`; Python's `site` imports it in every
//! Python process of the job. Once the program imports torch, it wraps `nn.Module._call_impl` so that each module
//! call pushes and pops a range named `model.layers.3.self_attn.q_proj (Linear)` (see the file's own docstring).
//! A `sitecustomize` that the workload's path already had is imported after ours, so both run.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The hook's source.
pub const SITECUSTOMIZE: &str = include_str!("torch_modules/sitecustomize.py");
/// The environment variable that switches the hook on and carries its settings.
pub const SETTINGS_ENV: &str = "SHARDSCOPE_TORCH_MODULES";

/// What `--torch-modules[=DEPTH][,memory]` asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModuleSettings {
    /// Only modules whose qualified path has at most this many dotted parts (the root module has 0); all when
    /// `None`.
    pub depth: Option<u32>,
    /// Also the caching allocator's allocated and reserved bytes at each module's entry and exit.
    pub memory: bool,
}

impl ModuleSettings {
    /// Parses the option's value: empty, a depth, `memory`, or both separated by a comma (`3,memory`).
    pub fn parse(text: &str) -> Result<ModuleSettings, String> {
        let mut settings = ModuleSettings::default();
        for item in text.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            if item == "memory" {
                settings.memory = true;
            } else if let Ok(depth) = item.parse::<u32>() {
                settings.depth = Some(depth);
            } else {
                return Err(format!("{item:?} is neither a depth (a number) nor `memory`"));
            }
        }
        Ok(settings)
    }

    /// The settings as the hook reads them from [`SETTINGS_ENV`].
    pub fn env_text(&self) -> String {
        let mut items = vec!["on".to_string()];
        if let Some(depth) = self.depth {
            items.push(format!("depth={depth}"));
        }
        if self.memory {
            items.push("memory=1".into());
        }
        items.join(";")
    }
}

/// The folder that holds the hook while the workload runs, and the variables that make Python import it.
#[derive(Debug)]
pub struct HookFolder {
    /// The folder (removed by [`HookFolder::remove`]).
    pub folder: PathBuf,
    /// `PYTHONPATH` with the folder first, and [`SETTINGS_ENV`].
    pub env: Vec<(String, OsString)>,
}

impl HookFolder {
    /// Writes the hook into `folder` (created) and returns the environment that puts it ahead of
    /// `existing_pythonpath`, the workload's own `PYTHONPATH`, which stays after it.
    pub fn create(
        folder: &Path,
        settings: &ModuleSettings,
        existing_pythonpath: Option<OsString>,
    ) -> std::io::Result<HookFolder> {
        std::fs::create_dir_all(folder)?;
        std::fs::write(folder.join("sitecustomize.py"), SITECUSTOMIZE)?;
        let mut pythonpath = folder.as_os_str().to_owned();
        if let Some(existing) = existing_pythonpath.filter(|path| !path.is_empty()) {
            pythonpath.push(":");
            pythonpath.push(existing);
        }
        let env = vec![("PYTHONPATH".to_string(), pythonpath), (SETTINGS_ENV.to_string(), settings.env_text().into())];
        Ok(HookFolder { folder: folder.to_path_buf(), env })
    }

    /// Removes the folder and the hook in it.
    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.folder);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_values_parse_to_depth_and_memory() {
        assert_eq!(ModuleSettings::parse(""), Ok(ModuleSettings::default()));
        assert_eq!(ModuleSettings::parse("4"), Ok(ModuleSettings { depth: Some(4), memory: false }));
        assert_eq!(ModuleSettings::parse("memory, 2"), Ok(ModuleSettings { depth: Some(2), memory: true }));
        assert!(ModuleSettings::parse("deep").is_err());
        assert_eq!(ModuleSettings { depth: Some(3), memory: true }.env_text(), "on;depth=3;memory=1");
        assert_eq!(ModuleSettings::default().env_text(), "on");
    }

    #[test]
    fn hook_folder_goes_first_and_keeps_the_existing_path() {
        let folder = std::env::temp_dir().join(format!("shardscope-hook-unit-{}", std::process::id()));
        let hook = HookFolder::create(&folder, &ModuleSettings::default(), Some("/a:/b".into())).unwrap();
        let pythonpath = &hook.env.iter().find(|(name, _)| name == "PYTHONPATH").unwrap().1;
        assert_eq!(pythonpath.to_string_lossy(), format!("{}:/a:/b", folder.display()));
        assert_eq!(std::fs::read_to_string(folder.join("sitecustomize.py")).unwrap(), SITECUSTOMIZE);
        hook.remove();
        assert!(!folder.exists());
        let alone = HookFolder::create(&folder, &ModuleSettings::default(), Some("".into())).unwrap();
        assert_eq!(alone.env[0].1, folder.as_os_str());
        alone.remove();
    }
}
