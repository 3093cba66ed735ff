//! The manifest of a dataset (`_shardscope_manifest.json`: every part file with its rows, bytes and CRC-32) and the
//! private folder a dataset is written in before it is renamed into place.
//!
//! Why: a dataset is many files, and a reader that simply lists folders cannot tell a whole dataset from one with
//! a deleted rank partition, a part copied twice, or the leftovers of an export that was killed. The writer lists
//! what it wrote; the reader refuses a dataset whose files differ from that list. The folder swap makes the
//! dataset at the user's path always one writer's complete output.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::MARKER_FILE;
use crate::Error;

/// The manifest file at the dataset's root, written just before the marker.
pub const MANIFEST_FILE: &str = "_shardscope_manifest.json";

/// The format name the manifest records.
const MANIFEST_FORMAT: &str = "shardscope-parquet-manifest";

/// The largest manifest read: about 200 bytes per part, so this allows several hundred thousand parts.
const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// One part file of the dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestPart {
    /// Path relative to the dataset's root, `/`-separated (`kernels/run=a/rank=0/part-0.parquet`).
    pub path: String,
    /// Rows in the file.
    pub rows: u64,
    /// Size of the file, bytes.
    pub bytes: u64,
    /// CRC-32 (IEEE) of the file's bytes: a changed byte that keeps the size and still decodes is found too.
    pub crc32: u32,
}

impl ManifestPart {
    /// The entry of the file at `file`, named `relative` in the dataset, holding `rows` rows.
    pub(super) fn of_file(relative: &Path, file: &Path, rows: u64) -> Result<ManifestPart, Error> {
        let path = relative.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
        let (bytes, crc32) = size_and_crc(file)?;
        Ok(ManifestPart { path, rows, bytes, crc32 })
    }

    /// The run the part belongs to: its second path component, `run=<run>`.
    fn run(&self) -> Option<&str> {
        self.path.split('/').nth(1)?.strip_prefix("run=")
    }
}

#[derive(Serialize, Deserialize)]
struct Manifest {
    format: String,
    parts: Vec<ManifestPart>,
}

/// Writes the manifest of `parts` into `folder`.
pub(super) fn write(folder: &Path, parts: &[ManifestPart]) -> Result<(), Error> {
    let path = folder.join(MANIFEST_FILE);
    let mut sorted = parts.to_vec();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let manifest = Manifest { format: MANIFEST_FORMAT.to_string(), parts: sorted };
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| Error::format(&path, e.to_string()))?;
    std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))
}

/// The parts listed by the manifest of the dataset at `root`.
pub(super) fn read(root: &Path) -> Result<Vec<ManifestPart>, Error> {
    let path = root.join(MANIFEST_FILE);
    let file = File::open(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::format(root, format!("incomplete dataset: its marker names {MANIFEST_FILE}, which is missing"))
        } else {
            Error::io(&path, e)
        }
    })?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_MANIFEST_BYTES + 1), &mut text)
        .map_err(|e| Error::io(&path, e))?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(Error::format(&path, format!("manifest larger than {MAX_MANIFEST_BYTES} bytes")));
    }
    let manifest: Manifest =
        serde_json::from_str(&text).map_err(|e| Error::format(&path, format!("not a dataset manifest: {e}")))?;
    if manifest.format != MANIFEST_FORMAT {
        return Err(Error::format(&path, format!("not a dataset manifest: its format is not {MANIFEST_FORMAT:?}")));
    }
    let mut seen = BTreeSet::new();
    for part in &manifest.parts {
        if !is_plain_relative(&part.path) {
            return Err(Error::format(&path, format!("part path {:?} leaves the dataset folder", part.path)));
        }
        if !seen.insert(part.path.as_str()) {
            return Err(Error::format(&path, format!("part {} is listed twice", part.path)));
        }
    }
    Ok(manifest.parts)
}

/// The size and CRC-32 of the file at `path`, read once.
fn size_and_crc(path: &Path) -> Result<(u64, u32), Error> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = std::io::Read::read(&mut file, &mut buffer).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            return Ok((bytes, hasher.finalize()));
        }
        hasher.update(&buffer[..n]);
        bytes += n as u64;
    }
}

/// A relative path of plain names only: no root, no `..`, no `.`.
fn is_plain_relative(path: &str) -> bool {
    !path.is_empty() && Path::new(path).components().all(|c| matches!(c, Component::Normal(_)))
}

/// Checks that the part files of `run` in the dataset at `root` are exactly those of its manifest, with the sizes
/// written. Returns each part's rows by its full path, for the reader to check the rows it decodes.
pub(super) fn verify_run(root: &Path, run: &str, parts: &[ManifestPart]) -> Result<BTreeMap<PathBuf, u64>, Error> {
    let listed: BTreeMap<&str, &ManifestPart> =
        parts.iter().filter(|p| p.run() == Some(run)).map(|p| (p.path.as_str(), p)).collect();
    let present = run_files(root, run)?;
    let incomplete = |cause: String| Error::format(root, format!("incomplete or altered dataset: {cause}"));
    for path in present.keys() {
        if !listed.contains_key(path.as_str()) {
            return Err(incomplete(format!("{path} is not in its manifest (a stray or duplicated part file)")));
        }
    }
    let mut rows = BTreeMap::new();
    for (path, part) in listed {
        let Some(&bytes) = present.get(path) else {
            return Err(incomplete(format!("{path} is missing (a deleted table or rank partition?)")));
        };
        if bytes != part.bytes {
            return Err(incomplete(format!("{path} has {bytes} bytes, its manifest says {}", part.bytes)));
        }
        let (_, crc32) = size_and_crc(&root.join(path))?;
        if crc32 != part.crc32 {
            return Err(incomplete(format!(
                "{path} has other bytes than written (CRC-32 {crc32:08x}, its manifest \
                                           says {:08x})",
                part.crc32
            )));
        }
        rows.insert(root.join(path), part.rows);
    }
    Ok(rows)
}

/// Every Parquet file under `root/<table>/run=<run>/`, by its `/`-separated path relative to `root`, with its size.
fn run_files(root: &Path, run: &str) -> Result<BTreeMap<String, u64>, Error> {
    fn walk(folder: &Path, relative: &str, out: &mut BTreeMap<String, u64>) -> Result<(), Error> {
        for entry in std::fs::read_dir(folder).map_err(|e| Error::io(folder, e))? {
            let entry = entry.map_err(|e| Error::io(folder, e))?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            // Follows links, like reading the file would.
            let metadata = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?;
            if metadata.is_dir() {
                walk(&path, &format!("{relative}/{name}"), out)?;
            } else if name.ends_with(".parquet") {
                out.insert(format!("{relative}/{name}"), metadata.len());
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    for table in std::fs::read_dir(root).map_err(|e| Error::io(root, e))? {
        let table = table.map_err(|e| Error::io(root, e))?;
        let folder = table.path().join(format!("run={run}"));
        if folder.is_dir() {
            let table_name = table.file_name().to_string_lossy().into_owned();
            walk(&folder, &format!("{table_name}/run={run}"), &mut out)?;
        }
    }
    Ok(out)
}

/// Links the parts of the runs other than `run` of the dataset at `root` (if there is one) into `partial`, and
/// returns their manifest entries. A dataset written before manifests existed has its other runs' files listed
/// from its folders.
pub(super) fn link_other_runs(root: &Path, partial: &Path, run: &str) -> Result<Vec<ManifestPart>, Error> {
    if !super::is_dataset(root) {
        return Ok(Vec::new());
    }
    let parts = if root.join(MANIFEST_FILE).is_file() { read(root)? } else { unlisted_parts(root)? };
    let others: Vec<ManifestPart> = parts.into_iter().filter(|p| p.run().is_some_and(|r| r != run)).collect();
    for part in &others {
        let (from, to) = (root.join(&part.path), partial.join(&part.path));
        if let Some(folder) = to.parent() {
            std::fs::create_dir_all(folder).map_err(|e| Error::io(folder, e))?;
        }
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to).map_err(|e| Error::io(&from, e))?;
        }
    }
    Ok(others)
}

/// The parts of a dataset without a manifest, listed from its folders (rows from each file's footer).
fn unlisted_parts(root: &Path) -> Result<Vec<ManifestPart>, Error> {
    let mut runs = BTreeSet::new();
    for table in std::fs::read_dir(root).map_err(|e| Error::io(root, e))? {
        let table = table.map_err(|e| Error::io(root, e))?.path();
        if let Ok(entries) = std::fs::read_dir(&table) {
            for entry in entries.flatten() {
                if let Some(run) = entry.file_name().to_str().and_then(|n| n.strip_prefix("run=")) {
                    runs.insert(run.to_string());
                }
            }
        }
    }
    let mut parts = Vec::new();
    for run in runs {
        for path in run_files(root, &run)?.into_keys() {
            let file = root.join(&path);
            let handle = File::open(&file).map_err(|e| Error::io(&file, e))?;
            let rows = super::read::guarded(&file, || {
                parquet::file::reader::FileReader::metadata(
                    &parquet::file::reader::SerializedFileReader::new(handle)
                        .map_err(|e| Error::format(&file, format!("not a readable Parquet file: {e}")))?,
                )
                .file_metadata()
                .num_rows()
                .try_into()
                .map_err(|_| Error::format(&file, "negative row count"))
            })?;
            parts.push(ManifestPart::of_file(Path::new(&path), &file, rows)?);
        }
    }
    Ok(parts)
}

/// The folder that holds `root` (`.` for a bare name).
pub(super) fn parent_of(root: &Path) -> PathBuf {
    match root.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Refuses a destination that is a file, a link, or a folder that is neither empty nor a dataset.
pub(super) fn check_destination(root: &Path) -> Result<(), Error> {
    match std::fs::symlink_metadata(root) {
        Ok(metadata) if metadata.file_type().is_symlink() => {
            Err(Error::format(root, "is a symbolic link: name the dataset folder itself"))
        }
        Ok(metadata) if !metadata.is_dir() => Err(Error::format(root, "exists and is not a folder")),
        Ok(_) if super::is_dataset(root) => Ok(()),
        Ok(_) => {
            let mut entries = std::fs::read_dir(root).map_err(|e| Error::io(root, e))?;
            if entries.next().is_some() {
                return Err(Error::format(
                    root,
                    format!("is not empty and not a dataset (no {MARKER_FILE}); name a new or empty folder"),
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(root, e)),
    }
}

/// A private folder beside the dataset, removed when dropped unless it was put in place.
pub(super) struct PartialDir {
    path: PathBuf,
    placed: bool,
}

impl PartialDir {
    /// Creates `.<name>.partial-<pid>-<n>` beside `root`, after removing such folders left by processes that no
    /// longer run (an export killed with SIGKILL cannot remove its own).
    pub(super) fn create(root: &Path) -> Result<PartialDir, Error> {
        let parent = parent_of(root);
        std::fs::create_dir_all(&parent).map_err(|e| Error::io(&parent, e))?;
        let name = root.file_name().map_or("dataset".into(), |n| n.to_string_lossy().into_owned());
        remove_stale(&parent, &name);
        let pid = std::process::id();
        for n in 0u32.. {
            let path = parent.join(format!(".{name}.partial-{pid}-{n}"));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(PartialDir { path, placed: false }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => continue,
                Err(e) => return Err(Error::io(&path, e)),
            }
        }
        unreachable!("the loop returns")
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the folder to `root`; a folder already there (an empty one, or the dataset before) is moved aside
    /// first and removed after.
    pub(super) fn put_in_place(mut self, root: &Path) -> Result<(), Error> {
        if std::fs::symlink_metadata(root).is_err() {
            std::fs::rename(&self.path, root).map_err(|e| Error::io(root, e))?;
            self.placed = true;
            return Ok(());
        }
        let old = self.path.with_file_name(
            self.path.file_name().map_or("old".into(), |n| n.to_string_lossy().replacen(".partial-", ".old-", 1)),
        );
        std::fs::rename(root, &old).map_err(|e| Error::io(root, e))?;
        if let Err(e) = std::fs::rename(&self.path, root) {
            let _ = std::fs::rename(&old, root);
            return Err(Error::io(root, e));
        }
        self.placed = true;
        std::fs::remove_dir_all(&old).map_err(|e| Error::io(&old, e))
    }
}

impl Drop for PartialDir {
    fn drop(&mut self) {
        if !self.placed {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Removes `.<name>.partial-<pid>-*` and `.<name>.old-<pid>-*` folders in `parent` whose process is gone (Linux:
/// no `/proc/<pid>`). Elsewhere nothing is removed.
fn remove_stale(parent: &Path, name: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let rest = [".partial-", ".old-"]
            .iter()
            .find_map(|kind| file_name.strip_prefix(&format!(".{name}{kind}")))
            .and_then(|rest| rest.split('-').next()?.parse::<u32>().ok());
        if let Some(pid) = rest
            && pid != std::process::id()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
