//! Output files of every command: never one of its inputs, never written through a link.
//!
//! [`check_outputs`] refuses an output that is an input or holds one, or lies inside an input folder, comparing
//! files by device and inode (so another name for the same file, a hard link or a symbolic link to it, is found
//! too). [`OutputFile`] writes into a fresh private file beside the target (created exclusively, so a link planted
//! under its name is never followed) and renames it over the target when complete: a link at the target's name is
//! replaced rather than written through, and a failed write leaves the old file as it was.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::Error;

/// A file's identity: (device, inode).
type Identity = (u64, u64);

fn identity(path: &Path) -> Option<Identity> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The identities of `path` (when it exists) and of every folder above it, following links.
fn chain(path: &Path) -> Vec<Identity> {
    let existing = path.canonicalize().ok().or_else(|| {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        parent.canonicalize().ok()
    });
    existing.iter().flat_map(|p| p.ancestors()).filter_map(identity).collect()
}

/// Refuses any of `outputs` that is one of `inputs`, lies inside an input folder, or is a folder holding an input.
/// The error names the output and the input.
pub fn check_outputs(outputs: &[&Path], inputs: &[&Path]) -> Result<(), Error> {
    for output in outputs {
        let output_chain = chain(output);
        let output_is_dir = std::fs::metadata(output).is_ok_and(|m| m.is_dir());
        for input in inputs {
            let Some(input_id) = identity(input) else { continue };
            let clash = if output_chain.contains(&input_id) {
                Some("is, or lies inside, the input")
            } else if output_is_dir && identity(output).is_some_and(|o| chain(input).contains(&o)) {
                Some("is a folder holding the input")
            } else {
                None
            };
            if let Some(how) = clash {
                return Err(Error::format(
                    output,
                    format!("the output {how} {}; refusing to write over an input", input.display()),
                ));
            }
        }
    }
    Ok(())
}

/// Creates `dir` (and its parents) for output files, refusing a symbolic link at its own name: files are written
/// into it, and a link there (planted by another user in a shared folder) would send them elsewhere.
pub fn output_dir(dir: &Path) -> Result<(), Error> {
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(Error::format(dir, "is a symbolic link: name the output folder itself"));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))
}

/// An output file being written: a private file beside the target until [`OutputFile::commit`] renames it into
/// place. Dropped without `commit` (an error on the way), it is removed and the target is untouched.
pub struct OutputFile {
    target: PathBuf,
    temp: tempfile::NamedTempFile,
}

impl OutputFile {
    /// Opens a new file for `target`.
    pub fn create(target: &Path) -> Result<OutputFile, Error> {
        let folder = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let name = target.file_name().map_or("output".into(), |n| n.to_string_lossy().into_owned());
        // Mode 0666 before the umask: the file gets the permissions a plain create would give it.
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .tempfile_in(folder)
            .map_err(|e| Error::io(target, e))?;
        Ok(OutputFile { target: target.to_path_buf(), temp })
    }

    /// The file the output goes to.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Flushes the file and renames it over the target.
    pub fn commit(mut self) -> Result<(), Error> {
        self.temp.flush().map_err(|e| Error::io(&self.target, e))?;
        let target = self.target;
        self.temp.persist(&target).map_err(|e| Error::io(&target, e.error))?;
        Ok(())
    }
}

impl Write for OutputFile {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.temp.write(bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.temp.flush()
    }
}

/// Writes `bytes` as the file `target` through an [`OutputFile`].
pub fn write_output(target: &Path, bytes: &[u8]) -> Result<(), Error> {
    let mut file = OutputFile::create(target)?;
    file.write_all(bytes).map_err(|e| Error::io(target, e))?;
    file.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_that_is_an_input_by_another_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("run.sqlite");
        std::fs::write(&input, b"x").unwrap();
        let hard = dir.path().join("hard.html");
        std::fs::hard_link(&input, &hard).unwrap();
        let link = dir.path().join("link.html");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        for output in [&input, &hard, &link] {
            let error = check_outputs(&[output], &[&input]).unwrap_err().to_string();
            assert!(error.contains("refusing to write over an input"), "{error}");
        }
        // Inside an input folder, and a folder holding an input.
        let error = check_outputs(&[&dir.path().join("new.html")], &[dir.path()]).unwrap_err().to_string();
        assert!(error.contains("lies inside"), "{error}");
        let error = check_outputs(&[dir.path()], &[&input]).unwrap_err().to_string();
        assert!(error.contains("holding the input"), "{error}");
        assert!(check_outputs(&[&dir.path().join("other.html")], &[&input]).is_ok());
    }

    #[test]
    fn a_planted_link_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let planted = dir.path().join("report.html");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        write_output(&planted, b"<html>").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(!std::fs::symlink_metadata(&planted).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&planted).unwrap(), b"<html>");
        let linked_dir = dir.path().join("charts");
        std::os::unix::fs::symlink(dir.path(), &linked_dir).unwrap();
        assert!(output_dir(&linked_dir).unwrap_err().to_string().contains("symbolic link"));
        // Nothing but the files named is left.
        let mut left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        left.sort();
        assert_eq!(left, ["charts", "report.html", "victim"]);
    }

    #[test]
    fn a_file_dropped_before_commit_leaves_the_target_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.pftrace");
        std::fs::write(&target, b"old").unwrap();
        let mut file = OutputFile::create(&target).unwrap();
        file.write_all(b"half").unwrap();
        drop(file);
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
