//! The report one trace at a time: each trace is analysed as far as it can be alone and dropped before the next one
//! is read, so that a job of many rank files needs the memory of a few traces and of what is kept of each, not of
//! all of them.
//!
//! What is kept of a trace ([`TraceDigest`]): per GPU its [`RankReport`] before collectives are matched (as
//! [`partial::trace_part`](super::partial::trace_part) makes it), its HTA figures for a job with profiler steps,
//! its memory section, and its communication kernels as the matcher reads them ([`CommKernel`], one row per
//! collective kernel: the only part that grows with the trace); per trace its identity, warnings and step names.
//! [`Streaming::finish`] numbers the ranks, matches the collectives of all ranks from the kept rows, and applies each
//! matched kernel's wait and transfer to its rank, its phase and its steady state exactly as [`analyze`](super::analyze)
//! does kernel by kernel, so that the [`Report`] is the same, field for field and byte for byte once printed.
//!
//! The findings of `analyzer report` are not made here: they replay the dependency model of every event of every
//! rank, which needs the traces themselves.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;
use shardscope_model::{DeviceIdx, Trace};

use super::{
    CollectiveReport, DeviceContext, Figures, FileWarning, Options, Report, RunFacts, analyze_device,
    capture_mode_note, kept_instances, memory, report_of,
};
use crate::figures::categories;
use crate::figures::collectives::{self, CommKernel, RankKey, RankShare};
use crate::figures::hta::HtaFigures;
use crate::figures::run::{RunIdentity, number_ranks};
use crate::figures::window::clip;
use crate::figures::workers;

/// What one trace leaves behind once analysed alone.
#[derive(Debug, Clone)]
pub struct TraceDigest {
    source: String,
    identity: RunIdentity,
    warnings: Vec<FileWarning>,
    capture_note: Option<String>,
    step_names: BTreeSet<String>,
    recorded_ranks: BTreeSet<u32>,
    has_gpu_work: bool,
    devices: Vec<DeviceDigest>,
}

impl TraceDigest {
    /// What the trace records about its run.
    pub fn identity(&self) -> &RunIdentity {
        &self.identity
    }

    /// The trace's import warnings.
    pub fn warnings(&self) -> &[FileWarning] {
        &self.warnings
    }

    /// True when the trace holds a kernel, a copy or set, or a whole-graph record.
    pub fn has_gpu_work(&self) -> bool {
        self.has_gpu_work
    }

    /// Communication kernels kept of the trace (what the digest grows with).
    pub fn comm_kernels(&self) -> u64 {
        self.devices.iter().map(|d| d.comm.len() as u64).sum()
    }
}

/// One GPU with work: a rank.
#[derive(Debug, Clone)]
struct DeviceDigest {
    recorded_rank: Option<u32>,
    /// Its report before matching (rank 0, not recorded; matched kernels counted whole as `comm.<type>`).
    report: super::RankReport,
    /// Its HTA figures for a job with profiler steps, when the trace alone has fewer than two step names.
    hta_if_job_has_steps: Option<HtaFigures>,
    /// Its memory section (rank 0 until numbered).
    memory: Option<memory::RankMemory>,
    /// Its communication kernels, in time order, as the matcher reads them.
    comm: Vec<CommKernel>,
    /// Beside each of `comm`: where its share goes.
    targets: Vec<ShareTarget>,
    /// The report labels of its communication kernels (`comm.<type>`), by [`ShareTarget::label`].
    labels: Vec<String>,
}

/// Where a matched kernel's wait and transfer go in its rank's report (one per communication kernel of a job, so
/// kept small: what the finish needs of the kernel's times is only whether it lies in the steady state).
#[derive(Debug, Clone, Copy)]
struct ShareTarget {
    /// Index of the kernel in its trace.
    kernel: u32,
    /// Its label's position in [`DeviceDigest::labels`].
    label: u32,
    /// Its phase's position in the rank's phases.
    phase: Option<u32>,
    /// Cut by the analysis window: matched, but its time is not split into wait and transfer.
    clipped: bool,
    /// Inside the rank's steady state whole, where the steady state's figures take its share too.
    in_steady_state: bool,
}

/// Analyses `trace` alone into what the run's report needs of it, on the analyzer's worker threads.
pub fn digest(trace: &Trace, options: &Options) -> TraceDigest {
    workers::run(|| digest_here(trace, options))
}

fn digest_here(trace: &Trace, options: &Options) -> TraceDigest {
    let (step_names, devices) = super::partial::per_device(trace, options, device_digest);
    TraceDigest {
        source: trace.source.path.clone(),
        identity: RunIdentity::of(trace),
        warnings: trace
            .warnings
            .iter()
            .map(|w| FileWarning { source: trace.source.path.clone(), what: w.what.clone(), count: w.count })
            .collect(),
        capture_note: capture_mode_note(trace),
        step_names,
        recorded_ranks: (0..trace.devices.len()).filter_map(|d| trace.device_rank(DeviceIdx(d as u32))).collect(),
        has_gpu_work: !(trace.kernels.is_empty() && trace.memops.is_empty() && trace.graph_launches.is_empty()),
        devices,
    }
}

fn device_digest(context: &DeviceContext, options: &Options) -> DeviceDigest {
    let DeviceContext { trace, device, filter_steps: trace_has_steps, .. } = *context;
    let report = analyze_device(context, 0, false, options);
    let hta_if_job_has_steps = (!trace_has_steps).then(|| super::partial::device_hta(context, options));
    let rows = super::partial::comm_rows(context, options);
    let labels: Vec<String> = rows.iter().map(|row| &row.label).collect::<BTreeSet<_>>().into_iter().cloned().collect();
    let steady_window = report.steady_state.as_ref().map(|s| s.window_ns);
    let (comm, targets): (Vec<CommKernel>, Vec<ShareTarget>) = rows
        .into_iter()
        .map(|row| {
            let whole = (row.kernel.start_ns, row.kernel.end_ns);
            let target = ShareTarget {
                kernel: row.kernel.kernel,
                in_steady_state: steady_window
                    .is_some_and(|window| clip(whole.0, whole.1, Some(window)) == Some(whole)),
                label: labels.binary_search(&row.label).map_or(0, |i| i as u32),
                phase: row
                    .kernel
                    .phase
                    .as_deref()
                    .and_then(|name| report.phases.iter().position(|p| p.name == name))
                    .map(|i| i as u32),
                clipped: row.clipped,
            };
            (row.kernel, target)
        })
        .unzip();
    DeviceDigest {
        recorded_rank: trace.device_rank(device),
        memory: memory::rank_memory(trace, device, 0, &options.phase_pattern),
        report,
        hta_if_job_has_steps,
        comm,
        targets,
        labels,
    }
}

/// A report made one trace at a time: [`Streaming::push`] each trace's [`digest`] in input order, then
/// [`Streaming::finish`].
#[derive(Debug, Clone, Default)]
pub struct Streaming {
    digests: Vec<TraceDigest>,
}

impl Streaming {
    /// Nothing analysed yet.
    pub fn new() -> Streaming {
        Streaming::default()
    }

    /// Adds the next trace's digest (traces in input order).
    pub fn push(&mut self, digest: TraceDigest) {
        self.digests.push(digest);
    }

    /// The digests so far, in input order.
    pub fn digests(&self) -> &[TraceDigest] {
        &self.digests
    }

    /// The report of all traces pushed: the one [`analyze`](super::analyze) gives for them together.
    pub fn finish(self, options: &Options) -> Report {
        workers::run(|| finish_here(self.digests, options))
    }
}

/// [`analyze`](super::analyze) one trace at a time: `traces` yields the traces in input order (each read when
/// asked for), and each is dropped once digested.
pub fn analyze_each<E>(traces: impl IntoIterator<Item = Result<Trace, E>>, options: &Options) -> Result<Report, E> {
    let mut streaming = Streaming::new();
    for trace in traces {
        streaming.push(digest(&trace?, options));
    }
    Ok(streaming.finish(options))
}

fn finish_here(mut digests: Vec<TraceDigest>, options: &Options) -> Report {
    // Ranks as `analyze` numbers them: recorded, else in input order skipping recorded numbers.
    let recorded: BTreeSet<u32> = digests.iter().flat_map(|d| d.recorded_ranks.iter().copied()).collect();
    let keys: Vec<RankKey> = (digests.iter().enumerate())
        .flat_map(|(trace, d)| {
            (0..d.devices.len()).map(move |device| RankKey { trace, device: DeviceIdx(device as u32) })
        })
        .collect();
    let gpus = digests.iter().flat_map(|d| d.devices.iter().map(|g| g.recorded_rank));
    let numbers = number_ranks(&recorded, gpus);
    let rank_keys: Vec<(RankKey, u32)> = keys.iter().zip(&numbers).map(|(&key, &(rank, _))| (key, rank)).collect();
    let hosts: BTreeSet<&String> = digests.iter().flat_map(|d| d.identity.hosts.iter()).collect();
    let hosts_differ = hosts.len() > 1;
    let job_has_steps = digests.iter().flat_map(|d| &d.step_names).collect::<BTreeSet<_>>().len() >= 2;
    // The kept rows go to the matcher; the share targets stay beside the rank reports.
    let kernels: Vec<Vec<CommKernel>> =
        digests.iter_mut().flat_map(|d| d.devices.iter_mut().map(|g| std::mem::take(&mut g.comm))).collect();
    let matching = collectives::match_comm_kernels(&rank_keys, kernels, hosts_differ);
    let mut facts = RunFacts::default();
    let mut devices = Vec::with_capacity(keys.len());
    for (trace, digest) in digests.into_iter().enumerate() {
        devices.extend(digest.devices.into_iter().map(|device| (trace, device)));
        facts.inputs.push(digest.source);
        facts.warnings.extend(digest.warnings);
        facts.identities.push(digest.identity);
        facts.capture_notes.extend(digest.capture_note);
    }
    // Each rank's report takes only its own kernels' shares: the ranks are finished side by side.
    let (mut ranks, rank_memory): (Vec<super::RankReport>, Vec<Option<memory::RankMemory>>) = devices
        .into_par_iter()
        .zip(numbers)
        .map(|((trace, device), (rank, rank_recorded))| {
            let DeviceDigest { mut report, hta_if_job_has_steps, memory, targets, labels, .. } = device;
            report.rank = rank;
            report.rank_recorded = rank_recorded;
            if job_has_steps && let Some(hta) = hta_if_job_has_steps {
                report.hta = hta;
            }
            apply_shares(&mut report, &targets, &labels, |kernel| matching.shares.get(&(trace, kernel)).copied());
            (report, memory.map(|m| memory::RankMemory { rank, ..m }))
        })
        .unzip();
    let mut rank_memory: Vec<memory::RankMemory> = rank_memory.into_iter().flatten().collect();
    // As `analyze`: by rank, input order among equals.
    ranks.sort_by_key(|r| r.rank);
    rank_memory.sort_by_key(|r| r.rank);
    facts.memory = rank_memory;
    let collectives = CollectiveReport::of(&matching, options);
    report_of(facts, ranks, collectives, kept_instances(Arc::new(matching), options), job_has_steps, options)
}

/// What [`figures`](super::figures) does with the shares of a rank's matched kernels, kernel by kernel in time
/// order: to the whole rank, to the kernel's phase, and to the steady state (and its phase there) when the kernel
/// lies inside it whole.
fn apply_shares(
    report: &mut super::RankReport,
    targets: &[ShareTarget],
    labels: &[String],
    share_of: impl Fn(u32) -> Option<RankShare>,
) {
    for target in targets.iter().filter(|t| !t.clipped) {
        let Some(share) = share_of(target.kernel) else { continue };
        let label = labels.get(target.label as usize).map_or("", String::as_str);
        add_share(&mut report.figures, label, share);
        if let Some(phase) = target.phase.and_then(|p| report.phases.get_mut(p as usize)) {
            add_share(&mut phase.figures, label, share);
        }
        if target.in_steady_state
            && let Some(steady) = report.steady_state.as_mut()
        {
            add_share(&mut steady.figures, label, share);
            // The steady state's phases are its own list: the kernel's phase is found there by name.
            let phase_name = target.phase.and_then(|p| report.phases.get(p as usize)).map(|p| p.name.as_str());
            if let Some(phase) = steady.phases.iter_mut().find(|p| Some(p.name.as_str()) == phase_name) {
                add_share(&mut phase.figures, label, share);
            }
        }
    }
}

/// One matched kernel's share added to `figures`: its wait and transfer counted, its lateness noted, and a
/// positive wait moved from `comm.<type>` to `wait.<type>`.
fn add_share(figures: &mut Figures, label: &str, share: RankShare) {
    figures.comm_wait_ns = figures.comm_wait_ns.saturating_add(share.wait_ns);
    figures.comm_transfer_ns = figures.comm_transfer_ns.saturating_add(share.transfer_ns);
    figures.late_count += u64::from(share.late);
    if share.wait_ns <= 0 {
        return;
    }
    let Some(op) = label.strip_prefix(categories::COMM_PREFIX) else { return };
    if let Some(comm_ns) = figures.categories.get_mut(label) {
        *comm_ns -= share.wait_ns;
    }
    *figures.categories.entry(format!("{}{op}", categories::WAIT_PREFIX)).or_default() += share.wait_ns;
}

/// One file the report reads on its own: a file given, or a member of a folder given (a folder of rank files is
/// read file by file too; a Parquet dataset is read whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamedFile {
    /// The file (or dataset).
    pub path: PathBuf,
    /// The warnings about members its folder skipped: given to its first trace, as reading the folder whole does.
    pub folder_warnings: Vec<(String, u64)>,
}

/// The files `paths` stand for, in the order the report reads them: a folder's trace files sorted by name where it
/// stands. An error where a folder cannot be listed or holds no trace.
pub fn streamed_files(paths: &[PathBuf]) -> Result<Vec<StreamedFile>, shardscope_io::Error> {
    let mut files = Vec::new();
    for path in paths {
        if !path.is_dir() || shardscope_io::parquet::is_dataset(path) {
            files.push(StreamedFile { path: path.clone(), folder_warnings: Vec::new() });
            continue;
        }
        let members = shardscope_io::folder_members(path)?;
        let mut folder_warnings = Some(members.skipped);
        for file in members.files {
            files.push(StreamedFile { path: file, folder_warnings: folder_warnings.take().unwrap_or_default() });
        }
    }
    Ok(files)
}

/// Reads and digests `files` in order, up to `jobs` at a time (each on a worker of the analyzer's pool, its traces
/// dropped once digested): at most `jobs` files' traces are in memory at once. The first file that cannot be read,
/// in input order, is the error.
pub fn digest_files(files: &[StreamedFile], options: &Options, jobs: usize) -> Result<Streaming, shardscope_io::Error> {
    let mut streaming = Streaming::new();
    for group in files.chunks(jobs.max(1)) {
        let digested: Vec<Result<Vec<TraceDigest>, shardscope_io::Error>> =
            workers::run(|| group.par_iter().map(|file| digest_file(file, options)).collect());
        for file in digested {
            file?.into_iter().for_each(|d| streaming.push(d));
        }
    }
    Ok(streaming)
}

/// How many of `files` the streamed report reads at once: `asked` where given (`--streaming-files`), else one per
/// core, fewer where that many of the largest file's traces (estimated as [`estimated_memory_bytes`] does) would
/// take more than half of `available_bytes` (a job that streams because it does not fit must not then read as many
/// files at once as there are cores); at least one, at most the files.
pub fn files_at_once(
    asked: Option<usize>,
    cores: usize,
    files: &[StreamedFile],
    available_bytes: Option<u64>,
) -> usize {
    let most = files.len().max(1);
    if let Some(asked) = asked {
        return asked.clamp(1, most);
    }
    let largest = files.iter().map(|f| estimated_memory_bytes(std::slice::from_ref(&f.path))).max().unwrap_or(0);
    let fitting = match available_bytes {
        Some(free) if largest > 0 => usize::try_from(free / 2 / largest).unwrap_or(usize::MAX),
        _ => usize::MAX,
    };
    cores.min(fitting).clamp(1, most)
}

/// The digests of one file's traces.
fn digest_file(file: &StreamedFile, options: &Options) -> Result<Vec<TraceDigest>, shardscope_io::Error> {
    let mut traces = shardscope_io::load(&file.path)?;
    if let Some(first) = traces.first_mut() {
        for (what, count) in &file.folder_warnings {
            first.warn_n(what, *count);
        }
    }
    Ok(traces.iter().map(|trace| digest(trace, options)).collect())
}

/// How many bytes the traces of `paths` take in memory, estimated from their files: an uncompressed file about
/// [`MEMORY_PER_FILE_BYTE`] times its size, a gzipped one [`MEMORY_PER_GZIP_BYTE`] times (folders: their files).
pub fn estimated_memory_bytes(paths: &[PathBuf]) -> u64 {
    fn file_bytes(path: &Path, depth: u32) -> u64 {
        let Ok(metadata) = std::fs::metadata(path) else { return 0 };
        if metadata.is_file() {
            let gzipped = path.extension().is_some_and(|e| e == "gz");
            let factor = if gzipped { MEMORY_PER_GZIP_BYTE } else { MEMORY_PER_FILE_BYTE };
            return metadata.len().saturating_mul(factor);
        }
        // A folder of rank files (Kineto, a Parquet dataset); not followed deeper than a few levels.
        if depth >= 4 {
            return 0;
        }
        let Ok(entries) = std::fs::read_dir(path) else { return 0 };
        entries.flatten().map(|e| file_bytes(&e.path(), depth + 1)).fold(0, u64::saturating_add)
    }
    paths.iter().map(|p| file_bytes(p, 0)).fold(0, u64::saturating_add)
}

/// Peak memory of `report` holding every trace per byte of the uncompressed files (nsys SQLite, JSON): 7.6 on
/// generated nsys rank files, findings included (BENCHMARKS.md, "The report file by file").
pub const MEMORY_PER_FILE_BYTE: u64 = 8;
/// The same per byte of a gzipped file: gzip shrinks nsys SQLite about 3 times and Kineto JSON about 14 times,
/// and a JSON trace takes less memory than its text.
pub const MEMORY_PER_GZIP_BYTE: u64 = 16;

/// The memory this process may still use: the smaller of the system's available memory and what its control group
/// leaves (Linux); `None` where neither can be read.
pub fn available_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| {
        let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib.saturating_mul(1024))
    });
    let read = |path: &str| std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse::<u64>().ok());
    let cgroup = match (read("/sys/fs/cgroup/memory.max"), read("/sys/fs/cgroup/memory.current")) {
        (Some(max), Some(current)) => Some(max.saturating_sub(current)),
        _ => None,
    };
    match (meminfo, cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether `report` should go one file at a time: for two or more files (a folder counts its rank files) whose
/// traces would take more than half of the memory available (`None`: not known, then not).
pub fn should_stream(paths: &[PathBuf], available_bytes: Option<u64>) -> bool {
    let files = streamed_files(paths).map_or(paths.len(), |files| files.len());
    files >= 2 && available_bytes.is_some_and(|free| estimated_memory_bytes(paths) > free / 2)
}
