//! The report in parts: each trace analysed on its own, the parts merged into the report of the whole run.
//!
//! A job of hundreds of ranks is read and analysed fastest where its files are, one trace at a time. Almost all of a
//! rank's report needs its own trace only; what needs the other ranks is the matching of collectives (each rank's
//! wait for the last one, and transfer) and a few run-level facts (rank numbers, whether the ranks ran on several
//! hosts, whether the job has profiler steps, the notes on the inputs). So:
//!
//! - [`trace_part`] analyses one trace into a [`TracePart`]: per GPU its report before matching (collective kernels
//!   counted whole as `comm.<type>`), its memory figures (the `memory` section's entry, which needs nothing of the
//!   other ranks but its rank number) and one small row per communication kernel, with what the merge needs to
//!   move its wait from `comm.<type>` to `wait.<type>`. A part is serialisable (JSON) and, beside its trace, small.
//! - [`merge`] puts the parts of a run together into the report [`analyze`](super::analyze) gives for all traces
//!   at once, as JSON (`analyzer report --format json` prints the same text). The rank figures travel as JSON,
//!   which is why the merged report is a JSON value rather than a [`Report`].
//! - For a keyed reduction spread over machines, the same merge in steps: [`rank_entries`] numbers the ranks,
//!   [`keyed_rows`] gives every communication kernel its key (communicator, type, sequence number or position),
//!   [`match_rows`] matches the rows of any set of whole keys into a [`BucketMatch`]: the instances without their
//!   members (what the run-level figures need) and, per trace, its members' wait and transfer added up per
//!   collective label and phase ([`TraceTallies`], all that trace's rank figures need). [`finish_trace`] applies
//!   a trace's tallies to its part where the part is (the part no longer needs its rows), and [`assemble`] puts
//!   the finished ranks and the instances together. No step holds every communication kernel of the job, and no
//!   kernel's row is held twice, which is what keeps one worker's memory bounded on a job of hundreds of ranks.
//!   Clocks of ranks on several hosts are aligned first from [`row_differences`].
//!
//! Phases of one rank that first run GPU work at the same nanosecond are ordered by name, in `analyze` as in a
//! part: their numbers differ between the two (numbered across all traces, or within one), their names do not.

use std::collections::{BTreeMap, BTreeSet};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use shardscope_model::{CollectiveOp, DeviceIdx, Kernel, MemOp, Trace};

use super::{
    ByDevice, CollectiveReport, DeviceContext, FileWarning, Options, Report, analyze_device, device_events,
    infer_phases, phase_of,
};
use crate::figures::categories::{self, Classifier};
use crate::figures::collectives::{self, CommKernel, Instance, Matching, RankInput, RankKey, RankShare, op_by_name};
use crate::figures::hta;
use crate::figures::run::{self, RunIdentity, devices_with_gpu_work};
use crate::figures::window::clip;
use crate::figures::workers;
use crate::llm::phases::PhaseIndex;
use crate::report::memory::{self, RankMemory};

/// What one trace contributes to the report of its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracePart {
    /// The trace's file, as the report names it.
    pub source: String,
    /// What the trace records about its run.
    pub identity: RunIdentity,
    /// Its import warnings.
    pub warnings: Vec<FileWarning>,
    /// Distinct range names with HTA's step mark: the job has steps when all traces together have two or more.
    pub step_names: BTreeSet<String>,
    /// Ranks recorded by any of its GPUs (with work or not): ranks numbered by input order skip them.
    pub recorded_ranks: BTreeSet<u32>,
    /// Its GPUs with work, in ordinal order.
    pub devices: Vec<DevicePart>,
}

/// One GPU of a trace: a rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DevicePart {
    /// The GPU in its trace.
    pub device: u32,
    /// The rank the trace records for it.
    pub recorded_rank: Option<u32>,
    /// Its report (as `report --format json` writes a rank) before collectives are matched: matched kernels still
    /// count whole as `comm.<type>`, with no wait, transfer or lateness; `rank` is set by the merge.
    #[serde(with = "exact_floats")]
    pub report: Value,
    /// Its HTA figures for a job with profiler steps, when the trace alone has fewer than two step names (then
    /// `report` holds the figures for a job without).
    #[serde(with = "exact_floats::optional")]
    pub hta_if_job_has_steps: Option<Value>,
    /// Its communication kernels, in time order. Left out where the part travels to the task that finishes it:
    /// by then the kernels have gone to the buckets as keyed rows.
    pub comm: Vec<CommRow>,
    /// The distinct labels of its communication kernels, in name order: a keyed row names its kernel's label by its
    /// position here, so that a label travels once per GPU rather than once per kernel.
    pub comm_labels: Vec<String>,
    /// How many communication kernels it has (`comm`'s length, kept where `comm` is left out).
    pub comm_count: u64,
    /// Its memory figures (the report's `memory` section for this GPU; `rank` is set by the merge), when the trace
    /// holds memory events of it. They need the GPU's own trace only; like `report`, they travel with the part to
    /// the task that finishes it, not in the header.
    #[serde(default)]
    pub memory: Option<RankMemory>,
}

impl DevicePart {
    /// A kernel row's label as its position in [`DevicePart::comm_labels`]; `None` for a row the analysis window
    /// cuts (matched, but its time is not split into wait and transfer).
    fn label_position(&self, row: &CommRow) -> Option<u32> {
        if row.clipped {
            return None;
        }
        self.comm_labels.binary_search(&row.label).ok().map(|i| i as u32)
    }

    /// [`Self::label_position`] with [`STEADY_MARK`] set when the kernel lies wholly inside the GPU's steady-state
    /// window (its report's `steady_state`): its share then counts in the steady-state figures too, as `analyze`
    /// counts it there.
    fn tally_label(&self, row: &CommRow) -> Option<u32> {
        let position = self.label_position(row)?;
        let window = self.report.get("steady_state").and_then(|s| s.get("window_ns")).and_then(Value::as_array);
        let bound = |i: usize| window.and_then(|w| w.get(i)).and_then(Value::as_i64);
        let inside = match (bound(0), bound(1)) {
            (Some(start_ns), Some(end_ns)) => row.kernel.start_ns >= start_ns && row.kernel.end_ns <= end_ns,
            _ => false,
        };
        Some(if inside { position | STEADY_MARK } else { position })
    }
}

/// Set in a tally's label position (see [`TallyKey`]) when its kernels lie in the steady-state window, so that a
/// tally carries it without another field. Label positions are far below it (a GPU has a few dozen labels).
pub const STEADY_MARK: u32 = 1 << 31;

/// A communication kernel of a rank, as the matcher and the merge need it (written as an array of its fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "(CommKernel, String, bool)", from = "(CommKernel, String, bool)")]
pub struct CommRow {
    /// What the matcher reads.
    pub kernel: CommKernel,
    /// Its op-category label in the report (`comm.<type>`).
    pub label: String,
    /// Cut by the analysis window: matched, but its time is not split into wait and transfer.
    pub clipped: bool,
}

/// A rank of the merged run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankEntry {
    /// Index of its trace among all parts.
    pub trace: usize,
    /// Its GPU in that trace.
    pub device: u32,
    /// Its rank number.
    pub rank: u32,
    /// True when the trace recorded the rank.
    pub rank_recorded: bool,
}

/// A communication kernel with its place in the keyed reduction (written as an array of its fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "KeyedRowFields", from = "KeyedRowFields")]
pub struct KeyedRow {
    /// Its rank input (position in [`rank_entries`]).
    pub input: usize,
    /// Its instance slot (sequence number, else position among its rank's kernels of the same key).
    pub slot: u64,
    /// The kernel.
    pub kernel: CommKernel,
    /// Its report label's position in its GPU's [`DevicePart::comm_labels`]; `None` when the analysis window cuts
    /// the kernel (it is matched, but its time is not split into wait and transfer).
    pub label: Option<u32>,
}

/// [`KeyedRow`]'s fields in order.
type KeyedRowFields = (usize, u64, CommKernel, Option<u32>);

impl From<CommRow> for (CommKernel, String, bool) {
    fn from(row: CommRow) -> Self {
        (row.kernel, row.label, row.clipped)
    }
}

impl From<(CommKernel, String, bool)> for CommRow {
    fn from((kernel, label, clipped): (CommKernel, String, bool)) -> Self {
        CommRow { kernel, label, clipped }
    }
}

impl From<KeyedRow> for KeyedRowFields {
    fn from(row: KeyedRow) -> Self {
        (row.input, row.slot, row.kernel, row.label)
    }
}

impl From<KeyedRowFields> for KeyedRow {
    fn from((input, slot, kernel, label): KeyedRowFields) -> Self {
        KeyedRow { input, slot, kernel, label }
    }
}

impl KeyedRow {
    /// The reduction key: communicator, collective type, slot.
    pub fn key(&self) -> (&str, CollectiveOp, u64) {
        (&self.kernel.communicator, self.kernel.op, self.slot)
    }
}

/// JSON values whose fractional numbers survive a text encoding bit for bit: each is written as
/// `{"f64_bits": <bits>}` (a JSON parser may round the decimal form by one unit in the last place, and the merged
/// report must equal the whole one exactly).
mod exact_floats {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::{Map, Value};

    const TAG: &str = "f64_bits";

    fn encode(value: &Value) -> Value {
        match value {
            Value::Number(n) if n.is_f64() => {
                let bits = n.as_f64().unwrap_or_default().to_bits();
                Value::Object(Map::from_iter([(TAG.to_string(), Value::from(bits))]))
            }
            Value::Array(items) => Value::Array(items.iter().map(encode).collect()),
            Value::Object(fields) => Value::Object(fields.iter().map(|(k, v)| (k.clone(), encode(v))).collect()),
            other => other.clone(),
        }
    }

    fn decode(value: Value) -> Value {
        match value {
            Value::Object(fields) if fields.len() == 1 && fields.get(TAG).is_some_and(Value::is_u64) => {
                let bits = fields[TAG].as_u64().unwrap_or_default();
                serde_json::Number::from_f64(f64::from_bits(bits)).map_or(Value::Null, Value::Number)
            }
            Value::Array(items) => Value::Array(items.into_iter().map(decode).collect()),
            Value::Object(fields) => Value::Object(fields.into_iter().map(|(k, v)| (k, decode(v))).collect()),
            other => other,
        }
    }

    pub fn serialize<S: Serializer>(value: &Value, serializer: S) -> Result<S::Ok, S::Error> {
        encode(value).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
        Value::deserialize(deserializer).map(decode)
    }

    /// The same for an optional value.
    pub mod optional {
        use serde::{Deserialize, Deserializer, Serialize, Serializer};
        use serde_json::Value;

        pub fn serialize<S: Serializer>(value: &Option<Value>, serializer: S) -> Result<S::Ok, S::Error> {
            value.as_ref().map(super::encode).serialize(serializer)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
            Option::<Value>::deserialize(deserializer).map(|v| v.map(super::decode))
        }
    }

    /// The same for (rank, report) pairs.
    pub mod ranks {
        use serde::{Deserialize, Deserializer, Serialize, Serializer};
        use serde_json::Value;

        pub fn serialize<S: Serializer>(ranks: &[(u32, Value)], serializer: S) -> Result<S::Ok, S::Error> {
            let encoded: Vec<(u32, Value)> = ranks.iter().map(|(rank, v)| (*rank, super::encode(v))).collect();
            encoded.serialize(serializer)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<(u32, Value)>, D::Error> {
            let encoded = Vec::<(u32, Value)>::deserialize(deserializer)?;
            Ok(encoded.into_iter().map(|(rank, v)| (rank, super::decode(v))).collect())
        }
    }
}

/// A matched collective instance in transit: [`Instance`] with its members' shares and its end spread, bandwidth
/// kept as bit patterns so that it survives a text encoding exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatchedInstance {
    communicator: String,
    #[serde(with = "op_by_name")]
    op: CollectiveOp,
    seq: u64,
    bytes: Option<u64>,
    nranks: u32,
    late_rank: u32,
    transfer_ns: i64,
    max_wait_ns: i64,
    wait_total_ns: i64,
    algbw_bits: Option<u64>,
    busbw_bits: Option<u64>,
    phase: Option<String>,
    /// Kept only when the report keeps instances ([`Options::keep_instances`]).
    rank_wait_ns: Vec<(u32, i64)>,
    /// Each rank's kernel start and end; kept as `rank_wait_ns` is.
    rank_times_ns: Vec<(u32, [i64; 2])>,
    /// How many ranks' kernels the instance matched.
    member_count: u32,
    end_spread_ns: i64,
}

/// The shares of one rank's matched kernels of one label and phase, added up: all that finishing the rank needs of
/// them (its figures add the shares up anyway), so that what goes back to a trace does not grow with its kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ShareTally {
    /// Waits for the last rank, all of them.
    pub wait_ns: i64,
    /// The positive waits alone: the time moved from `comm.<type>` to `wait.<type>`.
    pub positive_wait_ns: i64,
    /// Transfers.
    pub transfer_ns: i64,
    /// Kernels of the rank that arrived last.
    pub late: u64,
}

impl From<RankShare> for ShareTally {
    fn from(share: RankShare) -> ShareTally {
        ShareTally {
            wait_ns: share.wait_ns,
            positive_wait_ns: share.wait_ns.max(0),
            transfer_ns: share.transfer_ns,
            late: u64::from(share.late),
        }
    }
}

impl ShareTally {
    fn absorb(&mut self, other: ShareTally) {
        self.wait_ns = self.wait_ns.saturating_add(other.wait_ns);
        self.positive_wait_ns = self.positive_wait_ns.saturating_add(other.positive_wait_ns);
        self.transfer_ns = self.transfer_ns.saturating_add(other.transfer_ns);
        self.late += other.late;
    }
}

/// Which tally a matched kernel's share goes to: (rank input, label position in its GPU's
/// [`DevicePart::comm_labels`], with [`STEADY_MARK`] for kernels in the steady-state window, phase).
pub type TallyKey = (usize, u32, Option<String>);

/// A trace's tallies, by key.
pub type TraceTallies = Vec<(TallyKey, ShareTally)>;

/// What matching one bucket of rows gives (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BucketMatch {
    /// The bucket's instances.
    pub instances: Vec<MatchedInstance>,
    /// Its members' shares added up per rank, label and phase, by trace index (ascending).
    pub shares: Vec<(usize, TraceTallies)>,
}

impl MatchedInstance {
    fn new(instance: Instance, end_spread_ns: i64, keep_rank_waits: bool) -> MatchedInstance {
        MatchedInstance {
            member_count: instance.members.len() as u32,
            communicator: instance.communicator,
            op: instance.op,
            seq: instance.seq,
            bytes: instance.bytes,
            nranks: instance.nranks,
            late_rank: instance.late_rank,
            transfer_ns: instance.transfer_ns,
            max_wait_ns: instance.max_wait_ns,
            wait_total_ns: instance.wait_total_ns,
            algbw_bits: instance.algbw_gbps.map(f64::to_bits),
            busbw_bits: instance.busbw_gbps.map(f64::to_bits),
            phase: instance.phase,
            rank_wait_ns: if keep_rank_waits { instance.rank_wait_ns.into_iter().collect() } else { Vec::new() },
            rank_times_ns: if keep_rank_waits { instance.rank_times_ns.into_iter().collect() } else { Vec::new() },
            end_spread_ns,
        }
    }

    fn into_instance(self) -> (Instance, i64) {
        let instance = Instance {
            communicator: self.communicator,
            op: self.op,
            seq: self.seq,
            bytes: self.bytes,
            nranks: self.nranks,
            late_rank: self.late_rank,
            transfer_ns: self.transfer_ns,
            max_wait_ns: self.max_wait_ns,
            wait_total_ns: self.wait_total_ns,
            algbw_gbps: self.algbw_bits.map(f64::from_bits),
            busbw_gbps: self.busbw_bits.map(f64::from_bits),
            phase: self.phase,
            rank_wait_ns: self.rank_wait_ns.into_iter().collect(),
            rank_times_ns: self.rank_times_ns.into_iter().collect(),
            // The members' shares went to their traces (`BucketMatch::shares`).
            members: Vec::new(),
            shares: Vec::new(),
        };
        (instance, self.end_spread_ns)
    }
}

/// Analyses one trace as far as it can be without the other ranks (see the module documentation); its GPUs in
/// parallel on the analyzer's worker threads.
pub fn trace_part(trace: &Trace, options: &Options) -> TracePart {
    workers::run(|| trace_part_here(trace, options))
}

/// What a trace's GPUs are analysed with on their own: its step names (ranges with a profiler-step mark), and
/// `each` of every GPU with work, in parallel, on the trace's classes, events by device and phase index (recorded,
/// else inferred), with no matching. The report in parts and the streamed report both start here.
pub(super) fn per_device<T: Send>(
    trace: &Trace,
    options: &Options,
    each: impl Fn(&DeviceContext, &Options) -> T + Sync,
) -> (BTreeSet<String>, Vec<T>) {
    let step_names: BTreeSet<String> = hta::step_names(trace).into_iter().map(str::to_string).collect();
    let trace_has_steps = step_names.len() >= 2;
    let (classes, by_device) =
        rayon::join(|| options.classifier.classify_names(&trace.names), || ByDevice::build(trace));
    let mut phase_names = Vec::new();
    let mut phase_index = PhaseIndex::build(trace, &options.phase_pattern, &mut phase_names);
    if phase_index.is_empty() {
        let inferred = infer_phases(trace, &by_device, &classes, options);
        if !inferred.is_empty() {
            phase_index = PhaseIndex::inferred(inferred, &mut phase_names);
        }
    }
    let no_matching = Matching::default();
    let devices = devices_with_gpu_work(trace)
        .into_par_iter()
        .map(|device| {
            let context = DeviceContext {
                trace,
                trace_index: 0,
                device,
                by_device: &by_device,
                classes: &classes,
                phase_index: &phase_index,
                filter_steps: trace_has_steps,
                matching: &no_matching,
            };
            each(&context, options)
        })
        .collect();
    (step_names, devices)
}

fn trace_part_here(trace: &Trace, options: &Options) -> TracePart {
    let (step_names, devices) = per_device(trace, options, device_part);
    TracePart {
        source: trace.source.path.clone(),
        identity: RunIdentity::of(trace),
        warnings: trace
            .warnings
            .iter()
            .map(|w| FileWarning { source: trace.source.path.clone(), what: w.what.clone(), count: w.count })
            .collect(),
        step_names,
        recorded_ranks: (0..trace.devices.len()).filter_map(|d| trace.device_rank(DeviceIdx(d as u32))).collect(),
        devices,
    }
}

/// The HTA figures of one GPU's events (in the window), as a job whose step ranges are in other traces needs them.
pub(super) fn device_hta(context: &DeviceContext, options: &Options) -> hta::HtaFigures {
    let trace = context.trace;
    let (kernel_indices, memop_indices) = device_events(context, options.window_ns);
    let kernels: Vec<&Kernel> = kernel_indices.iter().map(|&i| &trace.kernels[i as usize]).collect();
    let memops: Vec<&MemOp> = memop_indices.iter().map(|&i| &trace.memops[i as usize]).collect();
    hta::figures(trace, &kernels, &memops, true, options.hta_step_mode, options.window_ns)
}

/// One GPU's part: its report before matching, its HTA figures for a job with steps, its communication kernels.
fn device_part(context: &DeviceContext, options: &Options) -> DevicePart {
    let DeviceContext { trace, device, filter_steps: trace_has_steps, .. } = *context;
    let report = analyze_device(context, 0, false, options);
    let hta_if_job_has_steps =
        (!trace_has_steps).then(|| serde_json::to_value(device_hta(context, options)).expect("HTA figures serialise"));
    let comm = comm_rows(context, options);
    let comm_labels: BTreeSet<&String> = comm.iter().map(|row| &row.label).collect();
    DevicePart {
        device: device.0,
        recorded_rank: trace.device_rank(device),
        report: serde_json::to_value(report).expect("a rank report serialises"),
        hta_if_job_has_steps,
        comm_labels: comm_labels.into_iter().cloned().collect(),
        comm_count: comm.len() as u64,
        comm,
        memory: memory::rank_memory(trace, device, 0, &options.phase_pattern),
    }
}

/// The GPU's communication kernels as the matcher sees them (as `analyze` builds them: with a window, the kernels
/// reaching into it), with their report labels.
pub(super) fn comm_rows(context: &DeviceContext, options: &Options) -> Vec<CommRow> {
    let DeviceContext { trace, device, by_device, classes, phase_index, .. } = *context;
    let all = &by_device.kernels[device.0 as usize];
    let windowed: Vec<u32> = match options.window_ns {
        None => all.clone(),
        Some(window) => {
            let reaches_in = |i: &u32| {
                clip(trace.kernels[*i as usize].start_ns, trace.kernels[*i as usize].end_ns, Some(window)).is_some()
            };
            all.iter().copied().filter(reaches_in).collect()
        }
    };
    let phase_of_kernel = |kernel: u32| {
        let k = &trace.kernels[kernel as usize];
        phase_of(trace, phase_index, k.launch, k.device, k.start_ns)
            .map(|p| phase_index.names()[p.phase as usize].clone())
    };
    let input = RankInput {
        key: RankKey { trace: 0, device },
        rank: 0,
        trace,
        kernel_indices: &windowed,
        classes,
        phase_of_kernel: &phase_of_kernel,
    };
    collectives::comm_kernels(&input, &options.classifier)
        .into_iter()
        .map(|kernel| {
            let k = &trace.kernels[kernel.kernel as usize];
            let class = Classifier::lookup(classes, k.name);
            let collective = k.collective.and_then(|c| trace.collectives.get(c as usize)).map(|c| c.op);
            CommRow {
                label: categories::report_label(&options.classifier, class, collective),
                clipped: clip(k.start_ns, k.end_ns, options.window_ns) != Some((k.start_ns, k.end_ns)),
                kernel,
            }
        })
        .collect()
}

/// The ranks of the run the parts make, in rank input order (parts in order, GPUs in ordinal order), numbered as
/// `analyze` numbers them: recorded, else in input order skipping recorded numbers.
pub fn rank_entries(parts: &[TracePart]) -> Vec<RankEntry> {
    let recorded: BTreeSet<u32> = parts.iter().flat_map(|p| p.recorded_ranks.iter().copied()).collect();
    let devices: Vec<(usize, &DevicePart)> =
        parts.iter().enumerate().flat_map(|(trace, p)| p.devices.iter().map(move |d| (trace, d))).collect();
    let numbers = crate::figures::run::number_ranks(&recorded, devices.iter().map(|(_, d)| d.recorded_rank));
    devices
        .into_iter()
        .zip(numbers)
        .map(|((trace, d), (rank, rank_recorded))| RankEntry { trace, device: d.device, rank, rank_recorded })
        .collect()
}

/// True when the parts' processes ran on more than one host: their clocks are then aligned on collective ends.
pub fn hosts_differ(parts: &[TracePart]) -> bool {
    parts.iter().flat_map(|p| p.identity.hosts.iter()).collect::<BTreeSet<_>>().len() > 1
}

/// The communication kernels of `part` with their keys; `first_input` is the rank input of its first GPU.
pub fn keyed_rows(part: &TracePart, first_input: usize) -> Vec<KeyedRow> {
    let mut out = Vec::new();
    for (position, device) in part.devices.iter().enumerate() {
        let kernels: Vec<CommKernel> = device.comm.iter().map(|row| row.kernel.clone()).collect();
        for ((slot, kernel), row) in collectives::slots(&kernels).into_iter().zip(kernels).zip(&device.comm) {
            out.push(KeyedRow { input: first_input + position, slot, kernel, label: device.tally_label(row) });
        }
    }
    out
}

/// The members of one key: (rank input, kernel) in rank input order, and each one's label (see [`KeyedRow`]).
type KeyMembers = (Vec<(usize, CommKernel)>, Vec<Option<u32>>);

/// Groups rows by key, each group in rank input order.
fn grouped(mut rows: Vec<KeyedRow>) -> BTreeMap<(String, CollectiveOp, u64), KeyMembers> {
    rows.sort_by_key(|row| row.input);
    let mut groups: BTreeMap<(String, CollectiveOp, u64), KeyMembers> = BTreeMap::new();
    for row in rows {
        let (members, labels) =
            groups.entry((row.kernel.communicator.to_string(), row.kernel.op, row.slot)).or_default();
        members.push((row.input, row.kernel));
        labels.push(row.label);
    }
    groups
}

/// Of rows holding whole keys: the clock observations of their instances (see [`collectives::alignment_offsets`]).
pub fn row_differences(rows: Vec<KeyedRow>) -> Vec<(usize, i64)> {
    grouped(rows).values().flat_map(|(members, _)| collectives::alignment_differences(members)).collect()
}

/// Matches rows holding whole keys (every row of a key is among them) into instances; `offsets` are the clock
/// shifts per rank input (empty: none). `keep_rank_waits`: keep each instance's wait per rank (the report shows
/// them only with [`Options::keep_instances`]).
pub fn match_rows(rows: Vec<KeyedRow>, ranks: &[RankEntry], offsets: &[i64], keep_rank_waits: bool) -> BucketMatch {
    let keys: Vec<(RankKey, u32)> = rank_keys(ranks);
    let mut instances = Vec::new();
    let mut tallies: BTreeMap<usize, BTreeMap<TallyKey, ShareTally>> = BTreeMap::new();
    for ((communicator, op, seq), (members, labels)) in grouped(rows) {
        let Some((instance, spread)) = collectives::match_instance(&communicator, op, seq, &members, &keys, offsets)
        else {
            continue;
        };
        // `instance.shares` are in the order of `members`.
        for (((input, kernel), label), share) in members.iter().zip(&labels).zip(&instance.shares) {
            let Some(label) = *label else { continue };
            let key = (*input, label, kernel.phase.as_deref().map(str::to_string));
            tallies.entry(ranks[*input].trace).or_default().entry(key).or_default().absorb((*share).into());
        }
        instances.push(MatchedInstance::new(instance, spread, keep_rank_waits));
    }
    let shares = tallies.into_iter().map(|(trace, of_trace)| (trace, of_trace.into_iter().collect())).collect();
    BucketMatch { instances, shares }
}

fn rank_keys(ranks: &[RankEntry]) -> Vec<(RankKey, u32)> {
    ranks.iter().map(|r| (RankKey { trace: r.trace, device: DeviceIdx(r.device) }, r.rank)).collect()
}

/// The report of the run the parts make, from all of them: the same JSON as [`analyze`](super::analyze) of their
/// traces.
pub fn merge(parts: &[TracePart], options: &Options) -> Value {
    let ranks = rank_entries(parts);
    let kernels: Vec<Vec<CommKernel>> = parts
        .iter()
        .flat_map(|p| p.devices.iter().map(|d| d.comm.iter().map(|row| row.kernel.clone()).collect()))
        .collect();
    let matching = collectives::match_comm_kernels(&rank_keys(&ranks), kernels, hosts_differ(parts));
    let job_has_steps = job_has_steps(parts);
    let mut finished = Vec::with_capacity(ranks.len());
    let mut memory = Vec::new();
    let mut first_input = 0;
    for (trace, part) in parts.iter().enumerate() {
        let mut tallies: BTreeMap<TallyKey, ShareTally> = BTreeMap::new();
        for (position, device) in part.devices.iter().enumerate() {
            for row in &device.comm {
                let Some(label) = device.tally_label(row) else { continue };
                let Some(share) = matching.shares.get(&(trace, row.kernel.kernel)) else { continue };
                let key = (first_input + position, label, row.kernel.phase.as_deref().map(str::to_string));
                tallies.entry(key).or_default().absorb((*share).into());
            }
        }
        first_input += part.devices.len();
        let finished_trace = finish_trace(part, trace, &ranks, job_has_steps, &[tallies.into_iter().collect()])
            .expect("tallies made from a part's own rows fit it");
        finished.extend(finished_trace.ranks);
        memory.extend(finished_trace.memory);
    }
    run_report(parts, finished, memory, matching, options)
}

/// True when the parts together have profiler steps (two or more distinct step names), as [`finish_trace`] needs.
pub fn job_has_steps(parts: &[TracePart]) -> bool {
    parts.iter().flat_map(|p| &p.step_names).collect::<BTreeSet<_>>().len() >= 2
}

/// A trace's ranks finished: their reports with every matched kernel's wait and transfer applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinishedTrace {
    /// (rank, its report), the trace's GPUs in ordinal order.
    #[serde(with = "exact_floats::ranks")]
    pub ranks: Vec<(u32, Value)>,
    /// The trace's communication kernels, matched or not.
    pub comm_kernels: u64,
    /// The memory figures of its ranks that have them, with their rank numbers, GPUs in ordinal order.
    #[serde(default)]
    pub memory: Vec<RankMemory>,
}

/// A collective share that does not fit the part it is applied to: the pieces came from different runs or were
/// damaged on the way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    /// A share names a label the GPU does not have.
    #[error("{source_path}: a collective share names label {label}, which GPU {device} does not have")]
    UnknownLabel {
        /// The part's trace file.
        source_path: String,
        /// The label's number.
        label: u32,
        /// The GPU's ordinal.
        device: u32,
    },
    /// Shares for GPUs the part does not have.
    #[error("{source_path}: {shares} collective shares for GPUs that are not in this part")]
    OtherGpus {
        /// The part's trace file.
        source_path: String,
        /// How many shares.
        shares: usize,
    },
}

/// Applies the shares of the trace at `trace` (its index among all parts) to its part: `shares` are every
/// [`BucketMatch`]'s tallies of this trace, in any order; `ranks` are all ranks ([`rank_entries`]). The part needs
/// no kernel rows ([`DevicePart::comm`]). A tally that names a GPU or label the part does not have is an error (the
/// pieces came from different runs or were damaged on the way), never dropped.
pub fn finish_trace(
    part: &TracePart,
    trace: usize,
    ranks: &[RankEntry],
    job_has_steps: bool,
    shares: &[TraceTallies],
) -> Result<FinishedTrace, ShareError> {
    let mut tallies: BTreeMap<&TallyKey, ShareTally> = BTreeMap::new();
    for (key, tally) in shares.iter().flatten() {
        tallies.entry(key).or_default().absorb(*tally);
    }
    let inputs_of_trace = ranks.iter().enumerate().filter(|(_, r)| r.trace == trace);
    let memory = ranks
        .iter()
        .filter(|r| r.trace == trace)
        .zip(&part.devices)
        .filter_map(|(entry, device)| Some(RankMemory { rank: entry.rank, ..device.memory.clone()? }))
        .collect();
    Ok(FinishedTrace {
        ranks: finish_ranks(part, inputs_of_trace, job_has_steps, &tallies)?,
        comm_kernels: part.devices.iter().map(|d| d.comm_count).sum(),
        memory,
    })
}

/// The report from the parts' headers (parts in input order; their rank reports and kernel rows are not read),
/// every trace finished by [`finish_trace`] (in the same order) and every bucket's instances (in any order).
pub fn assemble(
    headers: &[TracePart],
    finished: Vec<FinishedTrace>,
    instances: Vec<MatchedInstance>,
    options: &Options,
) -> Value {
    let mut matching = Matching { clocks_aligned: hosts_differ(headers), ..Matching::default() };
    let mut instances: Vec<(Instance, i64, u32)> = instances
        .into_iter()
        .map(|m| {
            let members = m.member_count;
            let (instance, spread) = m.into_instance();
            (instance, spread, members)
        })
        .collect();
    instances.sort_by(|a, b| (&a.0.communicator, a.0.op, a.0.seq).cmp(&(&b.0.communicator, b.0.op, b.0.seq)));
    let mut spreads = Vec::with_capacity(instances.len());
    let mut matched_kernels = 0u64;
    for (instance, spread, members) in instances {
        spreads.push(spread);
        matched_kernels += u64::from(members);
        matching.instances.push(instance);
    }
    let total: u64 = finished.iter().map(|f| f.comm_kernels).sum();
    matching.unmatched_kernels = total.saturating_sub(matched_kernels);
    matching.end_spread_median_ns = collectives::median_i64(&mut spreads);
    let (mut ranks, mut memory) = (Vec::new(), Vec::new());
    for trace in finished {
        ranks.extend(trace.ranks);
        memory.extend(trace.memory);
    }
    run_report(headers, ranks, memory, matching, options)
}

/// The rank reports of one trace (`inputs_of_trace`: its entries with their rank input, GPUs in ordinal order) with
/// their matched kernels split into wait and transfer (`tallies`: the trace's shares, added up).
fn finish_ranks<'a>(
    part: &TracePart,
    inputs_of_trace: impl Iterator<Item = (usize, &'a RankEntry)>,
    job_has_steps: bool,
    tallies: &BTreeMap<&TallyKey, ShareTally>,
) -> Result<Vec<(u32, Value)>, ShareError> {
    let mut out = Vec::with_capacity(part.devices.len());
    let mut applied = 0;
    for ((input, entry), device) in inputs_of_trace.zip(&part.devices) {
        let mut report = device.report.clone();
        if let Value::Object(fields) = &mut report {
            fields.insert("rank".into(), entry.rank.into());
            fields.insert("rank_recorded".into(), entry.rank_recorded.into());
            if job_has_steps && let Some(hta) = &device.hta_if_job_has_steps {
                fields.insert("hta".into(), hta.clone());
            }
            let mut touched_phases = BTreeSet::new();
            let mut steady_touched = BTreeSet::new();
            let of_rank = tallies.range::<TallyKey, _>(&(input, 0, None)..).take_while(|(key, _)| key.0 == input);
            for (&(_, label, phase), &tally) in of_rank {
                let steady = label & STEADY_MARK != 0;
                let Some(label) = device.comm_labels.get((label & !STEADY_MARK) as usize) else {
                    return Err(ShareError::UnknownLabel {
                        source_path: part.source.clone(),
                        label: label & !STEADY_MARK,
                        device: device.device,
                    });
                };
                applied += 1;
                add_share(fields, label, tally);
                if let Some(phase) = phase
                    && let Some(Value::Object(phase_fields)) =
                        fields.get_mut("phases").and_then(|p| p.get_mut(phase.as_str()))
                {
                    add_share(phase_fields, label, tally);
                    touched_phases.insert(phase.clone());
                }
                if steady && let Some(Value::Object(steady_fields)) = fields.get_mut("steady_state") {
                    add_steady_share(steady_fields, label, phase.as_deref(), tally, &mut steady_touched);
                }
            }
            sort_categories(fields);
            for phase in touched_phases {
                if let Some(Value::Object(phase_fields)) = fields.get_mut("phases").and_then(|p| p.get_mut(&phase)) {
                    sort_categories(phase_fields);
                }
            }
            if let Some(Value::Object(steady_fields)) = fields.get_mut("steady_state") {
                sort_categories(steady_fields);
                for phase in steady_touched {
                    if let Some(Value::Object(phase_fields)) =
                        steady_fields.get_mut("phases").and_then(|p| p.get_mut(&phase))
                    {
                        sort_categories(phase_fields);
                    }
                }
            }
        }
        out.push((entry.rank, report));
    }
    if applied != tallies.len() {
        return Err(ShareError::OtherGpus { source_path: part.source.clone(), shares: tallies.len() - applied });
    }
    Ok(out)
}

/// The run's report from its finished ranks and their memory figures (both in rank input order) and its matching.
fn run_report(
    parts: &[TracePart],
    mut rank_values: Vec<(u32, Value)>,
    mut memory: Vec<RankMemory>,
    matching: Matching,
    options: &Options,
) -> Value {
    let job_has_steps = job_has_steps(parts);
    // As `analyze`: by rank, input order among equals.
    rank_values.sort_by_key(|(rank, _)| *rank);
    memory.sort_by_key(|m| m.rank);
    let identities: Vec<RunIdentity> = parts.iter().map(|p| p.identity.clone()).collect();
    let mut notes = Vec::new();
    if let Some(why) = run::mixed_runs(&identities) {
        notes.push(format!("inputs are not one run ({why}); analysed together as asked"));
    }
    notes.extend(run::partial_run_note(&identities, rank_values.len()));
    let report = Report {
        inputs: parts.iter().map(|p| p.source.clone()).collect(),
        phase_pattern: options.phase_pattern.as_str().to_string(),
        window_ns: options.window_ns,
        hta_step_inclusion: match (job_has_steps, options.hta_step_mode) {
            (false, _) => "all",
            (true, hta::StepMode::DropLastStep) => "last step dropped",
            (true, hta::StepMode::IncludeLastStep) => "last step included",
        },
        // Filled in below: the rank reports are JSON already.
        ranks: Vec::new(),
        collectives: CollectiveReport::of(&matching, options),
        instances: if options.keep_instances { matching.instances } else { Vec::new() },
        warnings: parts.iter().flat_map(|p| p.warnings.iter().cloned()).collect(),
        run_identities: identities,
        notes,
        memory,
    };
    let mut value = serde_json::to_value(&report).expect("a report serialises");
    value["ranks"] = Value::Array(rank_values.into_iter().map(|(_, v)| v).collect());
    value
}

/// [`add_share`] for a steady-state kernel's tally: to the steady state's figures and to its phase there.
fn add_steady_share(
    steady: &mut Map<String, Value>,
    label: &str,
    phase: Option<&str>,
    tally: ShareTally,
    touched: &mut BTreeSet<String>,
) {
    add_share(steady, label, tally);
    if let Some(phase) = phase
        && let Some(Value::Object(phase_fields)) = steady.get_mut("phases").and_then(|p| p.get_mut(phase))
    {
        add_share(phase_fields, label, tally);
        touched.insert(phase.to_string());
    }
}

/// What `figures` does for matched kernels of one label: their waits and transfers counted, lateness noted, and their
/// positive waits moved from `comm.<type>` to `wait.<type>`.
fn add_share(figures: &mut Map<String, Value>, label: &str, tally: ShareTally) {
    let add = |figures: &mut Map<String, Value>, field: &str, ns: i64| {
        let old = figures.get(field).and_then(Value::as_i64).unwrap_or(0);
        figures.insert(field.into(), old.saturating_add(ns).into());
    };
    add(figures, "comm_wait_ns", tally.wait_ns);
    add(figures, "comm_transfer_ns", tally.transfer_ns);
    if tally.late > 0 {
        let old = figures.get("late_count").and_then(Value::as_u64).unwrap_or(0);
        figures.insert("late_count".into(), (old + tally.late).into());
    }
    if tally.positive_wait_ns <= 0 {
        return;
    }
    let Some(op) = label.strip_prefix(categories::COMM_PREFIX) else { return };
    let wait_label = format!("{}{op}", categories::WAIT_PREFIX);
    let Some(Value::Object(by_category)) = figures.get_mut("categories") else { return };
    if let Some(comm_ns) = by_category.get(label).and_then(Value::as_i64) {
        by_category.insert(label.into(), (comm_ns - tally.positive_wait_ns).into());
    }
    let waited = by_category.get(&wait_label).and_then(Value::as_i64).unwrap_or(0);
    by_category.insert(wait_label, (waited + tally.positive_wait_ns).into());
}

/// Categories in name order, as the report's map keeps them.
fn sort_categories(figures: &mut Map<String, Value>) {
    if let Some(Value::Object(by_category)) = figures.get_mut("categories") {
        let sorted: BTreeMap<String, Value> = std::mem::take(by_category).into_iter().collect();
        by_category.extend(sorted);
    }
}
