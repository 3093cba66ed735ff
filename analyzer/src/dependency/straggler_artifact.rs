//! The straggler what-if of "Understanding Stragglers in Large Model Training Using What-if Analysis" (OSDI 2025)
//! on traces in the format of that paper's published artifact: one Parquet row per training operation (`dp_rank`,
//! `stage`, `rank`, `step`, `optype`, `start_ts` and `duration` in seconds, `seq_id`, `mc`, `gmc`, `mb_id`).
//!
//! **Operations.** An operation is named by its type, its sequence number within the step on its worker
//! (`seq_id`) and its pipeline stage. Every worker of a stage runs the same named operations in every step, so the
//! dependency model is derived once, from data-parallel rank 0 in the first recorded step (the *template*), and
//! applied to every (step, DP rank) lane.
//!
//! **Dependencies** (on one worker unless said otherwise):
//! - compute (forward and backward) in recorded order; each pipeline send or receive type in recorded order;
//! - a send after the compute whose output it carries; a receive before the compute that consumes it and after the
//!   compute before that one; the first backward send and receive after the second-to-last forward before the
//!   first backward;
//! - pipeline sends and receives are paired across adjacent stages by their position among the *effective* ones:
//!   a receive after the last forward (or backward) compute starts, or a send before the first one ends, carries
//!   nothing (it is recorded but was never launched), and so does one whose peer model chunk lies outside the
//!   model; those are modelled alone;
//! - with data parallelism: parameter all-gathers and gradient reduce-scatters in recorded order, the first forward
//!   of each model chunk after the last all-gather of that chunk; after the last compute: `gc`, the layernorm
//!   all-reduce, the embedding all-reduce (first and last stage), the reduce-scatters, gradient clipping and the
//!   optimizer, in that order (with an overlapped separate all-reduce, the reduce-scatters follow the backward
//!   passes of their chunk instead);
//! - synchronisation: a pipeline pair ends together; data-parallel collectives (all-gather, reduce-scatter,
//!   separate all-reduce) and gradient clipping wait for every DP rank of the step; the embedding all-reduce joins
//!   the first and last stage; clipping joins all stages.
//!
//! **Times.** A communication operation's own time is its *transfer*: its end minus the latest start in its group
//! (below −10 ms, taken as 0). Every other operation's own time is its duration. The *launch delay* is the time
//! between an operation's start and the latest end of its dependencies (from the step start for the first ones):
//! CPU work the trace does not show.
//!
//! **Scenarios**, each replayed and measured as the mean step time (last end minus first start of each step):
//! - measured: own times and launch delays as recorded;
//! - no delay: launch delays 0 (the baseline of every figure below);
//! - ideal: no delay, and every operation at the mean duration of its type over the whole trace (all steps, ranks
//!   and stages) for compute, the median for communication.
//!
//! **Figures.** `S = T(no delay) / T(ideal)`. `S_t` for an operation type (the pipeline sends and receives counted
//! as one type per direction), `S_w` for a DP rank or a stage: the ideal with only those operations back at their
//! recorded own times, over the ideal. `M_W` and `M_S` (the shares of the slowdown that individual workers and the
//! last stage explain): the share of `T(no delay) − T(ideal)` removed when the selected operations alone are
//! idealised, with the selection the 3 % of workers with the highest `min(S_dp, S_stage)` for `M_W`, and the last
//! stage for `M_S`. The *addition* form (only the selection at recorded times, in the ideal) is reported beside it.
//!
//! **Shared with the trace-based what-if.** The model is a [`crate::dependency::graph::Graph`] built with
//! [`Graph::from_explicit`]: one operation per row, each collective group one barrier vertex, and the replay is
//! [`Graph::simulate`], the same one [`crate::dependency::whatif`] runs. What is not shared is how own times are idealised and
//! aggregated: the paper averages step times over many steps and replaces durations with the mean or median of
//! the operation *type* over all workers (so that a slow stage counts as a straggler), whereas
//! [`crate::dependency::whatif`] analyses one window and takes the median of the same operation *instance* across ranks.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::Serialize;
use shardscope_model::DeviceIdx;

use crate::dependency::graph::{
    EdgeKind, ExplicitEdge, ExplicitModel, Graph, Op, OpKind, RankSpec, end_vertex, start_vertex,
};
use crate::figures::collectives::RankKey;

/// Operation types the model knows (the artifact's `OpType`).
pub mod optype {
    /// Forward pass of one microbatch on one model chunk.
    pub const FORWARD_COMPUTE: &str = "forward-compute";
    /// Backward pass of one microbatch on one model chunk.
    pub const BACKWARD_COMPUTE: &str = "backward-compute";
    /// Pipeline send of activations.
    pub const FORWARD_SEND: &str = "forward-send";
    /// Pipeline receive of activations.
    pub const FORWARD_RECV: &str = "forward-recv";
    /// Pipeline send of gradients.
    pub const BACKWARD_SEND: &str = "backward-send";
    /// Pipeline receive of gradients.
    pub const BACKWARD_RECV: &str = "backward-recv";
    /// Data-parallel gradient reduce-scatter.
    pub const GRADS_REDUCE_SCATTER: &str = "grads-reduce-scatter";
    /// Data-parallel parameter all-gather.
    pub const PARAMS_ALL_GATHER: &str = "params-all-gather";
    /// Data-parallel all-reduce of gradients kept apart from the overlapped reduce-scatters.
    pub const SEPARATE_GRADS_ALL_REDUCE: &str = "separate-grads-all-reduce";
    /// Layernorm gradient all-reduce (within the worker's model-parallel group).
    pub const LAYERNORM_GRADS_ALL_REDUCE: &str = "layernorm-grads-all-reduce";
    /// Embedding gradient all-reduce between the first and last stage.
    pub const EMBEDDING_GRADS_ALL_REDUCE: &str = "embedding-grads-all-reduce";
    /// Gradient clipping (a global norm: every worker takes part).
    pub const OPTIMIZER_CLIP_MAIN_GRAD: &str = "optimizer-clip-main-grad";
    /// The optimizer step: the step ends when it ends.
    pub const OPTIMIZER: &str = "optimizer";
    /// Garbage collection after the last backward pass.
    pub const GC: &str = "gc";

    /// Types counted as communication when idealised (the median, not the mean, of the type).
    pub const COMMUNICATION: [&str; 10] = [
        FORWARD_SEND,
        FORWARD_RECV,
        BACKWARD_SEND,
        BACKWARD_RECV,
        PARAMS_ALL_GATHER,
        SEPARATE_GRADS_ALL_REDUCE,
        GRADS_REDUCE_SCATTER,
        LAYERNORM_GRADS_ALL_REDUCE,
        EMBEDDING_GRADS_ALL_REDUCE,
        OPTIMIZER_CLIP_MAIN_GRAD,
    ];

    /// Every known type.
    pub const ALL: [&str; 14] = [
        FORWARD_COMPUTE,
        BACKWARD_COMPUTE,
        FORWARD_SEND,
        FORWARD_RECV,
        BACKWARD_SEND,
        BACKWARD_RECV,
        GRADS_REDUCE_SCATTER,
        PARAMS_ALL_GATHER,
        SEPARATE_GRADS_ALL_REDUCE,
        LAYERNORM_GRADS_ALL_REDUCE,
        EMBEDDING_GRADS_ALL_REDUCE,
        OPTIMIZER_CLIP_MAIN_GRAD,
        OPTIMIZER,
        GC,
    ];

    /// The group an operation type is attributed under: the pipeline sends and receives of one direction are one.
    pub fn attribution_group(name: &str) -> &str {
        match name {
            FORWARD_SEND | FORWARD_RECV => "forward-pp-comm",
            BACKWARD_SEND | BACKWARD_RECV => "backward-pp-comm",
            other => other,
        }
    }
}

use optype as ot;

/// Tolerance of the timestamp comparisons that tell effective pipeline transfers from recorded no-ops, seconds.
const NO_OP_TOLERANCE_S: f64 = 5e-5;
/// Negative launch delays and transfers down to this are clock noise and kept; below it they are taken as 0, seconds.
const NEGATIVE_LIMIT_S: f64 = 1e-2;
/// Share of workers, percent, that `M_W` selects (at least one).
const WORKER_SHARE_PCT: usize = 3;

/// One row of an artifact trace.
#[derive(Debug, Clone, Copy)]
struct Row {
    dp: u32,
    stage: u32,
    rank: u32,
    step: i64,
    optype: u16,
    start_s: f32,
    /// `start + duration`, computed in single precision as the recorded values are.
    end_s: f32,
    duration_s: f32,
    seq: u32,
    mc: i64,
    gmc: i64,
}

/// An artifact trace as read.
#[derive(Debug, Clone)]
pub struct ArtifactTrace {
    /// The file.
    pub source: String,
    rows: Vec<Row>,
    /// Operation type names, indexed by `Row::optype`.
    optypes: Vec<String>,
    /// Rows skipped: a missing value, or an operation type the model does not know (by type).
    pub skipped: BTreeMap<String, u64>,
}

/// Job facts from the artifact's `meta-*.yaml` (`key: value` lines).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobMeta {
    /// `trial_name`.
    pub trial: Option<String>,
    /// Data-parallel size.
    pub dp_size: Option<u32>,
    /// Pipeline-parallel size.
    pub pp_size: Option<u32>,
    /// Tensor-parallel size.
    pub tp_size: Option<u32>,
    /// Sequence-parallel (context) size: data parallelism that the DP rank column does not count.
    pub dsp_size: u32,
}

impl Default for JobMeta {
    fn default() -> Self {
        JobMeta { trial: None, dp_size: None, pp_size: None, tp_size: None, dsp_size: 1 }
    }
}

/// Why an artifact trace or its metadata could not be read or modelled, or the heatmap written. The text is one line;
/// for a file, it starts with the file's path.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The file could not be read.
    #[error("{}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        error: std::io::Error,
    },
    /// A metadata value that should be a whole number is not.
    #[error("{}: {key}: expected a whole number, got {value:?}", path.display())]
    NotWholeNumber {
        /// The metadata file.
        path: PathBuf,
        /// The key.
        key: String,
        /// Its value as written.
        value: String,
    },
    /// The file has none of the metadata keys.
    #[error(
        "{}: not an artifact metadata file (none of trial_name, dp_size, pp_size, tp_size, dsp_size)",
        path.display()
    )]
    NotMetadata {
        /// The file.
        path: PathBuf,
    },
    /// A column the model needs is missing.
    #[error("{}: column {column} is missing", path.display())]
    MissingColumn {
        /// The trace file.
        path: PathBuf,
        /// The column.
        column: String,
    },
    /// A column is neither numbers nor text.
    #[error("{}: column {column} is {data_type}, expected numbers or text", path.display())]
    ColumnType {
        /// The trace file.
        path: PathBuf,
        /// The column.
        column: String,
        /// Its type.
        data_type: DataType,
    },
    /// The Parquet decoder refused the file.
    #[error("{}: not a readable Parquet file: {cause}", path.display())]
    NotParquet {
        /// The trace file.
        path: PathBuf,
        /// The decoder's reason, on one line.
        cause: String,
    },
    /// The decoder failed in a way its guard caught (a panic on a damaged file); the message names the file.
    #[error("{0}")]
    Decoder(shardscope_io::Error),
    /// No row has an operation type the model knows.
    #[error("{}: no operation rows of a known type", path.display())]
    NoRows {
        /// The trace file.
        path: PathBuf,
    },
    /// The rows do not fit the dependency model (an operation twice or missing, transfers that do not pair, …).
    #[error("{file}: {cause}")]
    Model {
        /// The trace file.
        file: String,
        /// What does not fit.
        cause: String,
    },
    /// The heatmap could not be drawn.
    #[error("heatmap: {0}")]
    Heatmap(crate::output::charts::ChartError),
    /// The heatmap could not be written (the message names the file).
    #[error("{0}")]
    Output(shardscope_io::Error),
}

/// The rows of `file` do not fit the dependency model: `cause` says how.
fn invalid(file: &str, cause: String) -> ArtifactError {
    ArtifactError::Model { file: file.to_string(), cause }
}

impl JobMeta {
    /// Reads the `key: value` lines of a metadata file; other lines are ignored, but a file with none of the keys
    /// is not a metadata file (a wrong path must not pass for "no facts given").
    pub fn load(path: &Path) -> Result<JobMeta, ArtifactError> {
        let text = std::fs::read_to_string(path).map_err(|error| ArtifactError::Read { path: path.into(), error })?;
        let mut meta = JobMeta::default();
        let mut known_keys = 0;
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else { continue };
            let value = value.trim().trim_matches(['"', '\'']);
            let number = || -> Result<u32, ArtifactError> {
                value.parse().map_err(|_| ArtifactError::NotWholeNumber {
                    path: path.into(),
                    key: key.trim().to_string(),
                    value: value.to_string(),
                })
            };
            match key.trim() {
                "trial_name" => meta.trial = Some(value.to_string()),
                "dp_size" => meta.dp_size = Some(number()?),
                "pp_size" => meta.pp_size = Some(number()?),
                "tp_size" => meta.tp_size = Some(number()?),
                "dsp_size" => meta.dsp_size = number()?.max(1),
                _ => continue,
            }
            known_keys += 1;
        }
        if known_keys == 0 {
            return Err(ArtifactError::NotMetadata { path: path.into() });
        }
        Ok(meta)
    }
}

/// A column as whole numbers or as reals, whatever integer or float type it was written with.
enum Column<'a> {
    Ints(Vec<Option<i64>>),
    Reals(Vec<Option<f32>>),
    Text(Vec<Option<&'a str>>),
}

fn column<'a>(batch: &'a RecordBatch, file: &Path, name: &str) -> Result<Column<'a>, ArtifactError> {
    let array = batch
        .column_by_name(name)
        .ok_or_else(|| ArtifactError::MissingColumn { path: file.into(), column: name.to_string() })?;
    let ints = |values: Vec<Option<i64>>| Ok(Column::Ints(values));
    macro_rules! int {
        ($t:ty) => {
            ints(array.as_primitive::<$t>().iter().map(|v| v.map(|v| v as i64)).collect())
        };
    }
    match array.data_type() {
        DataType::Int8 => int!(Int8Type),
        DataType::Int16 => int!(Int16Type),
        DataType::Int32 => int!(Int32Type),
        DataType::Int64 => int!(Int64Type),
        DataType::UInt8 => int!(UInt8Type),
        DataType::UInt16 => int!(UInt16Type),
        DataType::UInt32 => int!(UInt32Type),
        DataType::UInt64 => int!(UInt64Type),
        DataType::Float32 => Ok(Column::Reals(array.as_primitive::<Float32Type>().iter().collect())),
        // Double-precision timestamps are read at the single precision the artifact's own files use.
        DataType::Float64 => {
            Ok(Column::Reals(array.as_primitive::<Float64Type>().iter().map(|v| v.map(|v| v as f32)).collect()))
        }
        DataType::Utf8 => Ok(Column::Text(array.as_string::<i32>().iter().collect())),
        DataType::LargeUtf8 => Ok(Column::Text(array.as_string::<i64>().iter().collect())),
        DataType::Dictionary(_, value_type) if matches!(value_type.as_ref(), DataType::Utf8 | DataType::LargeUtf8) => {
            let dictionary = array.as_any_dictionary();
            let values = dictionary.values();
            let words: Vec<Option<&str>> = match value_type.as_ref() {
                DataType::Utf8 => values.as_string::<i32>().iter().collect(),
                _ => values.as_string::<i64>().iter().collect(),
            };
            let keys = dictionary.normalized_keys();
            Ok(Column::Text(
                (0..array.len())
                    .map(|i| if array.is_null(i) { None } else { words.get(keys[i]).copied().flatten() })
                    .collect(),
            ))
        }
        other => {
            Err(ArtifactError::ColumnType { path: file.into(), column: name.to_string(), data_type: other.clone() })
        }
    }
}

impl Column<'_> {
    fn int(&self, row: usize) -> Option<i64> {
        match self {
            Column::Ints(v) => v[row],
            Column::Reals(v) => v[row].filter(|x| x.fract() == 0.0).map(|x| x as i64),
            Column::Text(_) => None,
        }
    }

    fn real(&self, row: usize) -> Option<f32> {
        match self {
            Column::Reals(v) => v[row].filter(|x| x.is_finite()),
            Column::Ints(v) => v[row].map(|x| x as f32),
            Column::Text(_) => None,
        }
    }

    fn text(&self, row: usize) -> Option<&str> {
        match self {
            Column::Text(v) => v[row],
            _ => None,
        }
    }
}

impl ArtifactTrace {
    /// Reads an artifact trace. Errors are one line naming the file; rows with a missing value or an unknown
    /// operation type are skipped and counted.
    pub fn load(path: &Path) -> Result<ArtifactTrace, ArtifactError> {
        let read = |error| ArtifactError::Read { path: path.into(), error };
        let file = File::open(path).map_err(read)?;
        let not_parquet = |e: parquet::errors::ParquetError| ArtifactError::NotParquet {
            path: path.into(),
            cause: e.to_string().replace('\n', " "),
        };
        // The decoder panics on some damaged files: it runs under the dataset reader's guard, which turns that
        // panic into the file's one-line error.
        fn guard<T>(path: &Path, step: impl FnOnce() -> Result<T, ArtifactError>) -> Result<T, ArtifactError> {
            shardscope_io::parquet::guarded(path, || Ok(step())).map_err(ArtifactError::Decoder).and_then(|r| r)
        }
        let mut reader = guard(path, || {
            ParquetRecordBatchReaderBuilder::try_new(file.try_clone().map_err(read)?)
                .map_err(not_parquet)?
                .build()
                .map_err(not_parquet)
        })?;
        let mut trace = ArtifactTrace {
            source: path.display().to_string(),
            rows: Vec::new(),
            optypes: Vec::new(),
            skipped: BTreeMap::new(),
        };
        let mut optype_ids: HashMap<String, u16> = HashMap::new();
        while let Some(batch) = guard(path, || Ok(reader.next()))? {
            let batch = batch.map_err(|e| ArtifactError::NotParquet { path: path.into(), cause: e.to_string() })?;
            let get = |name| column(&batch, path, name);
            let (dp, stage, rank, step) = (get("dp_rank")?, get("stage")?, get("rank")?, get("step")?);
            let (kind, start, duration, seq) = (get("optype")?, get("start_ts")?, get("duration")?, get("seq_id")?);
            let (mc, gmc) = (get("mc")?, get("gmc")?);
            for row in 0..batch.num_rows() {
                let Some(name) = kind.text(row) else {
                    *trace.skipped.entry("(no optype)".into()).or_default() += 1;
                    continue;
                };
                if !ot::ALL.contains(&name) {
                    *trace.skipped.entry(name.to_string()).or_default() += 1;
                    continue;
                }
                let unsigned = |c: &Column, row| c.int(row).and_then(|v| u32::try_from(v).ok());
                let fields = (
                    unsigned(&dp, row),
                    unsigned(&stage, row),
                    unsigned(&rank, row),
                    step.int(row),
                    start.real(row),
                    duration.real(row),
                    unsigned(&seq, row),
                );
                let (Some(dp), Some(stage), Some(rank), Some(step), Some(start_s), Some(duration_s), Some(seq)) =
                    fields
                else {
                    *trace.skipped.entry(format!("{name} (missing or negative value)")).or_default() += 1;
                    continue;
                };
                let next = optype_ids.len() as u16;
                let optype = *optype_ids.entry(name.to_string()).or_insert_with(|| {
                    trace.optypes.push(name.to_string());
                    next
                });
                trace.rows.push(Row {
                    dp,
                    stage,
                    rank,
                    step,
                    optype,
                    start_s,
                    end_s: start_s + duration_s,
                    duration_s,
                    seq,
                    mc: mc.int(row).unwrap_or(-1),
                    gmc: gmc.int(row).unwrap_or(-1),
                });
            }
        }
        if trace.rows.is_empty() {
            return Err(ArtifactError::NoRows { path: path.into() });
        }
        Ok(trace)
    }

    /// Number of rows read.
    pub fn rows(&self) -> usize {
        self.rows.len()
    }
}

/// A named operation of the template: (type, sequence number, stage).
type OpName = (u16, u32, u32);

/// The dependency model derived from the template, before it is laid out over the lanes.
struct Template {
    /// The named operations, in a fixed order.
    names: Vec<OpName>,
    index: HashMap<OpName, u32>,
    /// Per operation, the operations it waits for.
    deps: Vec<Vec<u32>>,
    /// Synchronisation groups.
    groups: Vec<Vec<u32>>,
    /// Per operation, its group.
    group_of: Vec<Option<u32>>,
    /// Per operation, whether its group also waits for every DP rank.
    dp_sync: Vec<bool>,
}

/// The model laid out over all (step, DP rank) lanes, with the recorded own times.
pub struct StragglerModel {
    /// The replayable graph: one operation per row.
    pub graph: Graph,
    /// The operation types.
    pub optypes: Vec<String>,
    /// Steps, in order.
    pub steps: Vec<i64>,
    /// DP ranks and stages.
    pub dp_size: u32,
    /// Pipeline stages.
    pub pp_size: u32,
    /// Per operation: (step index, DP rank, stage, global rank).
    placement: Vec<(u32, u32, u32, u32)>,
    /// Per operation: recorded own time at its end (duration, or transfer of communication), ns.
    recorded_own_ns: Vec<i64>,
    /// Per operation: recorded launch delay, ns.
    launch_delay_ns: Vec<i64>,
    /// Named operations per step and lane.
    pub names_per_lane: usize,
    /// Synchronisation groups of the template.
    pub groups: usize,
}

fn seconds_to_ns(s: f64) -> i64 {
    (s * 1e9).round() as i64
}

/// The pipeline transfers of one stage before they are paired: per transfer, the compute it carries once matched,
/// and whether it is a no-op (unless matched to an in-model peer chunk).
struct StageTransfers {
    matched: HashMap<u32, u32>,
    no_op: HashMap<u32, bool>,
}

/// Builds a [`Template`] from the first step of DP rank 0, one method per part of the dependency model.
struct TemplateBuilder<'a> {
    trace: &'a ArtifactTrace,
    file: &'a str,
    first_step: i64,
    /// The template's rows, one per operation.
    rows_of: Vec<&'a Row>,
    pp: u32,
    vpp: i64,
    t: Template,
    /// Per operation, whether some dependency or group places it.
    in_model: Vec<bool>,
}

const P2P: [&str; 4] = [ot::FORWARD_SEND, ot::FORWARD_RECV, ot::BACKWARD_SEND, ot::BACKWARD_RECV];
const COMPUTES: [&str; 2] = [ot::FORWARD_COMPUTE, ot::BACKWARD_COMPUTE];

impl<'a> TemplateBuilder<'a> {
    fn new(trace: &'a ArtifactTrace) -> Result<TemplateBuilder<'a>, ArtifactError> {
        let file = &trace.source;
        let first_step = trace.rows.iter().map(|r| r.step).min().unwrap_or(0);
        let template: Vec<&Row> = trace.rows.iter().filter(|r| r.dp == 0 && r.step == first_step).collect();
        let pp = trace.rows.iter().map(|r| r.stage).max().unwrap_or(0) + 1;
        let vpp = template.iter().map(|r| r.mc).max().unwrap_or(0).max(0) + 1;
        let mut names: Vec<OpName> = Vec::new();
        let mut index: HashMap<OpName, u32> = HashMap::new();
        let mut rows_of: Vec<&Row> = Vec::new();
        for row in &template {
            let name = (row.optype, row.seq, row.stage);
            if index.insert(name, names.len() as u32).is_some() {
                return Err(invalid(
                    file,
                    format!(
                        "{} #{} on stage {} appears twice in step {first_step} of DP rank 0",
                        trace.optypes[row.optype as usize], row.seq, row.stage
                    ),
                ));
            }
            names.push(name);
            rows_of.push(row);
        }
        let n = names.len();
        let t = Template {
            names,
            index,
            deps: vec![Vec::new(); n],
            groups: Vec::new(),
            group_of: vec![None; n],
            dp_sync: vec![false; n],
        };
        Ok(TemplateBuilder { trace, file, first_step, rows_of, pp, vpp, t, in_model: vec![false; n] })
    }

    fn id(&self, name: &str) -> Option<u16> {
        self.trace.optypes.iter().position(|o| o == name).map(|i| i as u16)
    }

    fn describe(name: &str, seq: u32, stage: u32) -> String {
        format!("{name} #{seq} on stage {stage}")
    }

    fn lookup(&self, name: &str, seq: u32, stage: u32) -> Result<u32, ArtifactError> {
        self.id(name).and_then(|o| self.t.index.get(&(o, seq, stage)).copied()).ok_or_else(|| {
            invalid(
                self.file,
                format!(
                    "the dependency model needs {} in step {} of DP rank 0, which the trace lacks",
                    Self::describe(name, seq, stage),
                    self.first_step
                ),
            )
        })
    }

    /// Adds `op` after `after`, and marks both as modelled.
    fn depend(&mut self, op: u32, after: &[u32]) {
        self.t.deps[op as usize].extend_from_slice(after);
        self.in_model[op as usize] = true;
        for &a in after {
            self.in_model[a as usize] = true;
        }
    }

    /// The operations of `stage` whose type is one of `types`, by start time.
    fn sorted_of(&self, stage: u32, types: &[&str]) -> Vec<u32> {
        let rows_of = &self.rows_of;
        let ids: Vec<u16> = types.iter().filter_map(|n| self.id(n)).collect();
        let mut ops: Vec<u32> = (0..rows_of.len() as u32)
            .filter(|&o| rows_of[o as usize].stage == stage && ids.contains(&rows_of[o as usize].optype))
            .collect();
        ops.sort_by(|&a, &b| {
            let (ra, rb) = (rows_of[a as usize], rows_of[b as usize]);
            ra.start_s
                .total_cmp(&rb.start_s)
                .then(ra.seq.cmp(&rb.seq))
                .then(self.trace.optypes[ra.optype as usize].cmp(&self.trace.optypes[rb.optype as usize]))
        });
        ops
    }

    /// Each of `ops` after the one before it, the first after `first_after`.
    fn chain(&mut self, ops: &[u32], first_after: &[u32]) {
        let mut before: Vec<u32> = first_after.to_vec();
        for &op in ops {
            self.depend(op, &before);
            before = vec![op];
        }
    }

    fn is(&self, op: u32, name: &str) -> bool {
        self.id(name) == Some(self.rows_of[op as usize].optype)
    }

    /// Pipeline transfers: which compute each carries, which are no-ops, and their pairs across stages.
    fn pipeline_transfers(&mut self) -> Result<(), ArtifactError> {
        let mut pairs: BTreeMap<(OpName, OpName), Vec<u32>> = BTreeMap::new();
        let mut lone: Vec<u32> = Vec::new();
        for stage in 0..self.pp {
            let comm = self.sorted_of(stage, &P2P);
            let transfers = self.match_transfers(stage, &comm)?;
            self.pair_transfers(stage, &comm, &transfers, &mut pairs, &mut lone);
            self.depend_on_transfers(&comm, &transfers)?;
        }
        for ((a, b), members) in &pairs {
            if members.len() != 2 {
                let label = |o: &OpName| Self::describe(&self.trace.optypes[o.0 as usize], o.1, o.2);
                return Err(invalid(
                    self.file,
                    format!(
                        "the pipeline transfer pair ({}, {}) has {} recorded member(s), expected 2",
                        label(a),
                        label(b),
                        members.len()
                    ),
                ));
            }
            self.t.groups.push(members.clone());
        }
        lone.sort_unstable();
        lone.dedup();
        self.t.groups.extend(lone.iter().map(|&o| vec![o]));
        Ok(())
    }

    /// Matches the transfers `comm` of `stage` to the compute passes they carry.
    fn match_transfers(&self, stage: u32, comm: &[u32]) -> Result<StageTransfers, ArtifactError> {
        let (file, pp, rows_of) = (self.file, self.pp, &self.rows_of);
        let comp = self.sorted_of(stage, &COMPUTES);
        let mut matched: HashMap<u32, u32> = HashMap::new();
        let mut no_op: HashMap<u32, bool> = comm.iter().map(|&o| (o, true)).collect();
        for (direction, compute_name) in [("forward", ot::FORWARD_COMPUTE), ("backward", ot::BACKWARD_COMPUTE)] {
            let passes: Vec<u32> = comp.iter().copied().filter(|&o| self.is(o, compute_name)).collect();
            let last_start =
                passes.iter().map(|&o| f64::from(rows_of[o as usize].start_s)).fold(f64::NEG_INFINITY, f64::max);
            let first_end = passes.iter().map(|&o| f64::from(rows_of[o as usize].end_s)).fold(f64::INFINITY, f64::min);
            for receive in [false, true] {
                let name = match (direction, receive) {
                    ("forward", false) => ot::FORWARD_SEND,
                    ("forward", true) => ot::FORWARD_RECV,
                    (_, false) => ot::BACKWARD_SEND,
                    _ => ot::BACKWARD_RECV,
                };
                // A receive after the last compute of its direction started, or a send before the first one
                // ended, carried nothing.
                let effective = |o: u32| {
                    let r = rows_of[o as usize];
                    if receive {
                        f64::from(r.start_s) <= last_start + NO_OP_TOLERANCE_S
                    } else {
                        f64::from(r.end_s) >= first_end - NO_OP_TOLERANCE_S
                    }
                };
                let transfers: Vec<u32> = comm.iter().copied().filter(|&o| self.is(o, name)).collect();
                let count = transfers.iter().filter(|&&o| effective(o)).count();
                let mut compute_seq = 0u32;
                if count != passes.len() {
                    if stage != 0 && stage != pp - 1 {
                        return Err(invalid(
                            file,
                            format!(
                                "stage {stage} has {count} effective {name} for {} {compute_name} passes",
                                passes.len()
                            ),
                        ));
                    }
                    if count != 0 && count + 1 != passes.len() {
                        return Err(invalid(
                            file,
                            format!(
                                "stage {stage} has {count} effective {name} for {} {compute_name} passes \
                             (expected as many, one fewer, or none)",
                                passes.len()
                            ),
                        ));
                    }
                    // The first forward receive of the first stage may be missing: its compute is skipped.
                    if receive && count + 1 == passes.len() {
                        compute_seq = 1;
                    }
                }
                for &transfer in transfers.iter().filter(|&&o| effective(o)) {
                    let compute = self.lookup(compute_name, compute_seq, stage)?;
                    let gmc = rows_of[compute as usize].gmc;
                    let peer_chunk = if (direction == "forward") != receive { gmc + 1 } else { gmc - 1 };
                    no_op.insert(transfer, peer_chunk < 0 || peer_chunk >= self.vpp * i64::from(pp));
                    matched.insert(transfer, compute);
                    compute_seq += 1;
                }
            }
        }
        Ok(StageTransfers { matched, no_op })
    }

    /// Pairs each transfer of `stage` that is not a no-op with its peer on the neighbouring stage (by position
    /// among its type); no-ops are `lone`.
    fn pair_transfers(
        &self,
        stage: u32,
        comm: &[u32],
        transfers: &StageTransfers,
        pairs: &mut BTreeMap<(OpName, OpName), Vec<u32>>,
        lone: &mut Vec<u32>,
    ) {
        let (pp, trace) = (self.pp, self.trace);
        for name in P2P {
            let (peer_name, delta) = match name {
                ot::FORWARD_SEND => (ot::FORWARD_RECV, 1),
                ot::FORWARD_RECV => (ot::FORWARD_SEND, -1),
                ot::BACKWARD_SEND => (ot::BACKWARD_RECV, -1),
                _ => (ot::BACKWARD_SEND, 1),
            };
            let peer_stage = ((stage + pp) as i64 + delta) as u32 % pp;
            let mut position = 0;
            for &transfer in comm.iter().filter(|&&o| self.is(o, name)) {
                if transfers.no_op[&transfer] {
                    lone.push(transfer);
                    continue;
                }
                let own = (self.id(name).unwrap_or(u16::MAX), position, stage);
                let peer = (self.id(peer_name).unwrap_or(u16::MAX), position, peer_stage);
                let key = if (trace.optypes.get(own.0 as usize), own.1, own.2)
                    <= (trace.optypes.get(peer.0 as usize), peer.1, peer.2)
                {
                    (own, peer)
                } else {
                    (peer, own)
                };
                pairs.entry(key).or_default().push(transfer);
                position += 1;
            }
        }
    }

    /// A send after the compute it carries; a compute after the receive it carries, which follows the compute
    /// before.
    fn depend_on_transfers(&mut self, comm: &[u32], transfers: &StageTransfers) -> Result<(), ArtifactError> {
        for &transfer in comm {
            let Some(&compute) = transfers.matched.get(&transfer) else { continue };
            if self.is(transfer, ot::FORWARD_SEND) || self.is(transfer, ot::BACKWARD_SEND) {
                self.depend(transfer, &[compute]);
            } else {
                self.depend(compute, &[transfer]);
                let (kind, seq, stage) = self.t.names[compute as usize];
                if seq > 0 {
                    let previous = self.lookup(&self.trace.optypes[kind as usize], seq - 1, stage)?;
                    self.depend(transfer, &[previous]);
                }
            }
        }
        Ok(())
    }

    /// Per stage: compute in order, each transfer type in order, the first backward transfers.
    fn stage_order(&mut self) -> Result<(), ArtifactError> {
        let file = self.file;
        for stage in 0..self.pp {
            let comp = self.sorted_of(stage, &COMPUTES);
            self.chain(&comp, &[]);
            for name in P2P {
                self.chain(&self.sorted_of(stage, &[name]), &[]);
            }
            let Some(first_backward) = comp.iter().position(|&o| self.is(o, ot::BACKWARD_COMPUTE)) else {
                return Err(invalid(
                    file,
                    format!("stage {stage} has no {} in step {}", ot::BACKWARD_COMPUTE, self.first_step),
                ));
            };
            if first_backward >= 2 {
                if !self.is(comp[first_backward - 1], ot::FORWARD_COMPUTE)
                    || !self.is(comp[first_backward - 2], ot::FORWARD_COMPUTE)
                {
                    return Err(invalid(
                        file,
                        format!("stage {stage}: the two passes before the first backward are not forward"),
                    ));
                }
                let anchor = comp[first_backward - 2];
                for name in [ot::BACKWARD_RECV, ot::BACKWARD_SEND] {
                    if let Some(&op) = self.id(name).and_then(|o| self.t.index.get(&(o, 0, stage))) {
                        self.depend(op, &[anchor]);
                    }
                }
            }
        }
        Ok(())
    }

    /// Data parallelism: the parameter gathers and gradient scatters of a stage in order, the first forward of each
    /// model chunk after the chunk's last gather, and (when overlapped) each scatter after the chunk's last backward.
    fn data_parallel(&mut self, overlapped_dp: bool) -> Result<(), ArtifactError> {
        for stage in 0..self.pp {
            self.chain(&self.sorted_of(stage, &[ot::PARAMS_ALL_GATHER, ot::GRADS_REDUCE_SCATTER]), &[]);
        }
        for stage in 0..self.pp {
            let comp = self.sorted_of(stage, &COMPUTES);
            // The first forward of each model chunk waits for the chunk's last parameter all-gather.
            let gathers = self.sorted_of(stage, &[ot::PARAMS_ALL_GATHER]);
            let mut chunks_done: Vec<i64> = Vec::new();
            for seq in (0..gathers.len() as u32).rev() {
                let gather = self.lookup(ot::PARAMS_ALL_GATHER, seq, stage)?;
                let chunk = self.rows_of[gather as usize].mc;
                if chunks_done.contains(&chunk) {
                    continue;
                }
                let rows_of = &self.rows_of;
                let first = comp
                    .iter()
                    .copied()
                    .filter(|&o| self.is(o, ot::FORWARD_COMPUTE) && rows_of[o as usize].mc == chunk)
                    .min_by(|&a, &b| rows_of[a as usize].start_s.total_cmp(&rows_of[b as usize].start_s));
                if let Some(first) = first {
                    self.depend(first, &[gather]);
                }
                chunks_done.push(chunk);
            }
            if overlapped_dp {
                // Each reduce-scatter waits for the last backward of its chunk.
                let scatters = self.sorted_of(stage, &[ot::GRADS_REDUCE_SCATTER]);
                let mut chunks_done: Vec<i64> = Vec::new();
                for seq in 0..scatters.len() as u32 {
                    let scatter = self.lookup(ot::GRADS_REDUCE_SCATTER, seq, stage)?;
                    let chunk = self.rows_of[scatter as usize].mc;
                    if chunks_done.contains(&chunk) {
                        continue;
                    }
                    let rows_of = &self.rows_of;
                    let last = comp
                        .iter()
                        .copied()
                        .filter(|&o| self.is(o, ot::BACKWARD_COMPUTE) && rows_of[o as usize].mc == chunk)
                        .reduce(|a, b| if rows_of[b as usize].end_s > rows_of[a as usize].end_s { b } else { a });
                    if let Some(last) = last {
                        self.depend(scatter, &[last]);
                    }
                    chunks_done.push(chunk);
                }
            }
        }
        Ok(())
    }

    /// After the last compute of each stage: garbage collection, the gradient all-reduces and scatters, clipping,
    /// the optimizer.
    fn step_tail(&mut self, use_dp: bool, overlapped_dp: bool) -> Result<(), ArtifactError> {
        let (file, pp) = (self.file, self.pp);
        for stage in 0..pp {
            let comp = self.sorted_of(stage, &COMPUTES);
            let rows_of = &self.rows_of;
            let Some(last) = comp
                .iter()
                .copied()
                .reduce(|a, b| if rows_of[b as usize].end_s > rows_of[a as usize].end_s { b } else { a })
            else {
                return Err(invalid(file, format!("stage {stage} has no compute in step {}", self.first_step)));
            };
            let gc = self.lookup(ot::GC, 0, stage)?;
            self.depend(gc, &[last]);
            let mut tail = vec![self.lookup(ot::LAYERNORM_GRADS_ALL_REDUCE, 0, stage)?];
            if stage == 0 || stage == pp - 1 {
                tail.push(self.lookup(ot::EMBEDDING_GRADS_ALL_REDUCE, 0, stage)?);
            }
            let scatters = self.sorted_of(stage, &[ot::GRADS_REDUCE_SCATTER]).len() as u32;
            let mut first_after = vec![gc];
            // Without data parallelism nothing more; with an overlapped separate all-reduce, it follows the
            // embedding and the last reduce-scatter; otherwise the reduce-scatters follow the embedding in order.
            if use_dp && overlapped_dp {
                tail.push(self.lookup(ot::SEPARATE_GRADS_ALL_REDUCE, 0, stage)?);
                if scatters > 0 {
                    first_after.insert(0, self.lookup(ot::GRADS_REDUCE_SCATTER, scatters - 1, stage)?);
                }
            } else if use_dp {
                for seq in 0..scatters {
                    tail.push(self.lookup(ot::GRADS_REDUCE_SCATTER, seq, stage)?);
                }
            }
            tail.push(self.lookup(ot::OPTIMIZER_CLIP_MAIN_GRAD, 0, stage)?);
            tail.push(self.lookup(ot::OPTIMIZER, 0, stage)?);
            self.chain(&tail, &first_after);
        }
        Ok(())
    }

    /// Groups across workers: data-parallel collectives alone (they sync over DP ranks), the embedding
    /// all-reduce of the first and last stage, gradient clipping of all stages.
    fn worker_groups(&mut self, use_dp: bool) -> Result<(), ArtifactError> {
        let n = self.rows_of.len();
        if use_dp {
            let collective_ids: Vec<u16> =
                [ot::PARAMS_ALL_GATHER, ot::GRADS_REDUCE_SCATTER, ot::SEPARATE_GRADS_ALL_REDUCE]
                    .iter()
                    .filter_map(|n| self.id(n))
                    .collect();
            for op in 0..n as u32 {
                if collective_ids.contains(&self.rows_of[op as usize].optype) {
                    self.t.groups.push(vec![op]);
                }
            }
        }
        let mut embedding = vec![self.lookup(ot::EMBEDDING_GRADS_ALL_REDUCE, 0, 0)?];
        if self.pp > 1 {
            embedding.push(self.lookup(ot::EMBEDDING_GRADS_ALL_REDUCE, 0, self.pp - 1)?);
        }
        self.t.groups.push(embedding);
        let clips =
            (0..self.pp).map(|s| self.lookup(ot::OPTIMIZER_CLIP_MAIN_GRAD, 0, s)).collect::<Result<Vec<_>, _>>()?;
        self.t.groups.push(clips);
        Ok(())
    }

    /// Each operation's group and DP sync; refuses an operation nothing placed.
    fn finish(mut self) -> Result<Template, ArtifactError> {
        let n = self.rows_of.len();
        let t = &mut self.t;
        for (g, members) in t.groups.iter().enumerate() {
            for &op in members {
                t.group_of[op as usize] = Some(g as u32);
            }
        }
        let synced: Vec<u16> = [
            ot::PARAMS_ALL_GATHER,
            ot::GRADS_REDUCE_SCATTER,
            ot::SEPARATE_GRADS_ALL_REDUCE,
            ot::OPTIMIZER_CLIP_MAIN_GRAD,
        ]
        .iter()
        .filter_map(|n| self.trace.optypes.iter().position(|o| o == n).map(|i| i as u16))
        .collect();
        for op in 0..n {
            t.dp_sync[op] = t.group_of[op].is_some() && synced.contains(&self.rows_of[op].optype);
            if t.group_of[op].is_some() {
                self.in_model[op] = true;
            }
        }
        if let Some(op) = (0..n).find(|&o| !self.in_model[o]) {
            let (kind, seq, stage) = t.names[op];
            return Err(invalid(
                self.file,
                format!(
                    "{} has no place in the dependency model",
                    Self::describe(&self.trace.optypes[kind as usize], seq, stage)
                ),
            ));
        }
        for deps in &mut t.deps {
            deps.sort_unstable();
            deps.dedup();
        }
        Ok(self.t)
    }
}

impl Template {
    fn build(trace: &ArtifactTrace, meta: &JobMeta) -> Result<Template, ArtifactError> {
        let mut builder = TemplateBuilder::new(trace)?;
        builder.pipeline_transfers()?;
        builder.stage_order()?;
        let dp = trace.rows.iter().map(|r| r.dp).max().unwrap_or(0) + 1;
        let use_dp = dp * meta.dsp_size > 1;
        let overlapped_dp =
            trace.rows.iter().any(|r| trace.optypes[r.optype as usize] == ot::SEPARATE_GRADS_ALL_REDUCE);
        if use_dp {
            builder.data_parallel(overlapped_dp)?;
        }
        builder.step_tail(use_dp, overlapped_dp)?;
        builder.worker_groups(use_dp)?;
        builder.finish()
    }
}

/// Refuses DP ranks and stages that are not 0..n with each present: the model has one lane per DP rank and loops
/// over the stages, so a single row with DP rank 2·10⁹ would otherwise size the model (and its replays) from it.
fn check_lanes_bounded(trace: &ArtifactTrace) -> Result<(), ArtifactError> {
    let file = &trace.source;
    for (what, values) in [
        ("DP rank", trace.rows.iter().map(|r| r.dp).collect::<std::collections::BTreeSet<u32>>()),
        ("stage", trace.rows.iter().map(|r| r.stage).collect()),
    ] {
        if let Some(missing) = (0u32..).zip(&values).find(|(expected, value)| expected != *value).map(|p| p.0) {
            let largest = values.last().copied().unwrap_or(0);
            return Err(invalid(
                file,
                format!("{what} {missing} has no rows, but {what} {largest} has (they must be 0..n)"),
            ));
        }
    }
    Ok(())
}

/// Where an operation sits: (step index, DP rank, stage, global rank).
type Placement = (u32, u32, u32, u32);

/// Where each operation of the laid-out model comes from. Operation id = lane × names + name, lane = step index ×
/// DP size + DP rank: a lane's operations lie together, and so do the lanes of a step, which the replay visits
/// together.
struct Layout {
    /// Named operations per lane.
    names: usize,
    /// (step, DP rank) lanes.
    lanes: usize,
    dp_size: u32,
    /// Per operation id, its row in the trace.
    row_of: Vec<u32>,
}

impl Layout {
    /// Places every row of `trace` in its slot; refuses a row outside the template, a row twice, and a missing one.
    fn place(trace: &ArtifactTrace, template: &Template, steps: &[i64], dp_size: u32) -> Result<Layout, ArtifactError> {
        let file = &trace.source;
        let lanes = steps.len() * dp_size as usize;
        let names = template.names.len();
        let step_index: HashMap<i64, u32> = steps.iter().enumerate().map(|(i, &s)| (s, i as u32)).collect();
        // Every (step, DP rank) lane runs the template's operations, one row each: more slots than rows means a
        // missing one, found here without sizing anything from the values in the file.
        let slots = names.checked_mul(lanes).filter(|&n| n <= trace.rows.len()).ok_or_else(|| {
            invalid(
                file,
                format!(
                    "{} rows cannot fill {} steps × {dp_size} DP ranks × {names} operations of the first step \
                 (every step and DP rank must run the same operations)",
                    trace.rows.len(),
                    steps.len()
                ),
            )
        })?;
        let mut row_of: Vec<u32> = vec![u32::MAX; slots];
        for (r, row) in trace.rows.iter().enumerate() {
            let Some(&name) = template.index.get(&(row.optype, row.seq, row.stage)) else {
                return Err(invalid(
                    file,
                    format!(
                        "{} #{} on stage {} (step {}, DP rank {}) is not in the first step's operations",
                        trace.optypes[row.optype as usize], row.seq, row.stage, row.step, row.dp
                    ),
                ));
            };
            let lane = step_index[&row.step] as usize * dp_size as usize + row.dp as usize;
            let slot = &mut row_of[lane * names + name as usize];
            if *slot != u32::MAX {
                return Err(invalid(
                    file,
                    format!(
                        "{} #{} on stage {} appears twice in step {}, DP rank {}",
                        trace.optypes[row.optype as usize], row.seq, row.stage, row.step, row.dp
                    ),
                ));
            }
            *slot = r as u32;
        }
        if let Some(missing) = row_of.iter().position(|&r| r == u32::MAX) {
            let (kind, seq, stage) = template.names[missing % names];
            let lane = missing / names;
            return Err(invalid(
                file,
                format!(
                    "{} #{seq} on stage {stage} is missing in step {}, DP rank {} (every step and DP rank must \
                 run the same operations)",
                    trace.optypes[kind as usize],
                    steps[lane / dp_size as usize],
                    lane % dp_size as usize
                ),
            ));
        }
        Ok(Layout { names, lanes, dp_size, row_of })
    }

    fn op_id(&self, name: u32, lane: usize) -> u32 {
        (lane * self.names + name as usize) as u32
    }

    fn row_at<'t>(&self, trace: &'t ArtifactTrace, name: u32, lane: usize) -> &'t Row {
        &trace.rows[self.row_of[lane * self.names + name as usize] as usize]
    }

    /// The operations, their placement (step index, DP rank, stage, global rank) and recorded durations.
    fn ops(
        &self,
        trace: &ArtifactTrace,
        template: &Template,
        worker_index: &HashMap<u32, u32>,
    ) -> (Vec<Op>, Vec<Placement>, Vec<i64>) {
        let op_count = self.row_of.len();
        let mut recorded_own_ns = vec![0i64; op_count];
        let mut ops: Vec<Op> = Vec::with_capacity(op_count);
        let mut placement = Vec::with_capacity(op_count);
        for lane in 0..self.lanes {
            for name in 0..self.names as u32 {
                let row = self.row_at(trace, name, lane);
                let comm = template.group_of[name as usize].is_some();
                ops.push(Op {
                    kind: OpKind::Kernel,
                    rank_index: worker_index[&row.rank],
                    index: self.row_of[lane * self.names + name as usize],
                    lane: 0,
                    category: row.optype,
                    comm,
                    matched: comm,
                    start_ns: seconds_to_ns(f64::from(row.start_s)),
                    end_ns: seconds_to_ns(f64::from(row.end_s)),
                    instance: name,
                });
                placement.push(((lane / self.dp_size as usize) as u32, row.dp, row.stage, row.rank));
                recorded_own_ns[self.op_id(name, lane) as usize] = seconds_to_ns(f64::from(row.duration_s));
            }
        }
        (ops, placement, recorded_own_ns)
    }

    /// Barriers: per group and step (DP-synchronised) or per group, step and DP rank, each a list of operations.
    /// A member's recorded own time becomes its transfer: its end minus the latest start in its barrier.
    fn barriers(
        &self,
        trace: &ArtifactTrace,
        template: &Template,
        steps: usize,
        ops: &[Op],
        recorded_own_ns: &mut [i64],
    ) -> Vec<Vec<u32>> {
        let dp_size = self.dp_size as usize;
        let mut barrier_members: Vec<Vec<u32>> = Vec::new();
        for (g, members) in template.groups.iter().enumerate() {
            let synced = members.iter().any(|&m| template.dp_sync[m as usize]);
            debug_assert!(members.iter().all(|&m| template.group_of[m as usize] == Some(g as u32)));
            for step in 0..steps {
                let dp_groups: Vec<Vec<usize>> = if synced {
                    vec![(0..dp_size).map(|d| step * dp_size + d).collect()]
                } else {
                    (0..dp_size).map(|d| vec![step * dp_size + d]).collect()
                };
                for lane_set in dp_groups {
                    let list: Vec<u32> =
                        members.iter().flat_map(|&m| lane_set.iter().map(move |&l| self.op_id(m, l))).collect();
                    // The transfer: end minus the latest start of the group, as recorded.
                    let latest_start_s = list
                        .iter()
                        .map(|&o| trace.rows[ops[o as usize].index as usize].start_s)
                        .fold(f32::NEG_INFINITY, f32::max);
                    for &o in &list {
                        let row = &trace.rows[ops[o as usize].index as usize];
                        let transfer_s = f64::from(row.end_s - latest_start_s);
                        recorded_own_ns[o as usize] =
                            if transfer_s <= -NEGATIVE_LIMIT_S { 0 } else { seconds_to_ns(transfer_s) };
                    }
                    barrier_members.push(list);
                }
            }
        }
        barrier_members
    }

    /// Dependencies within each lane (added to `edges`); returns the external times of the vertices (a lane's
    /// first operations wait for their step's start) and each operation's launch delay: its start minus the
    /// latest end waited for.
    fn lane_dependencies(
        &self,
        trace: &ArtifactTrace,
        template: &Template,
        step_start_s: &[f32],
        vertex_count: usize,
        edges: &mut Vec<ExplicitEdge>,
    ) -> (Vec<i64>, Vec<i64>) {
        let step_start_ns: Vec<i64> = step_start_s.iter().map(|&s| seconds_to_ns(f64::from(s))).collect();
        let mut launch_delay_ns = vec![0i64; self.row_of.len()];
        let mut external_ns = vec![i64::MIN; vertex_count];
        for name in 0..self.names as u32 {
            let deps = &template.deps[name as usize];
            for lane in 0..self.lanes {
                let o = self.op_id(name, lane);
                let row = self.row_at(trace, name, lane);
                let ready_s = if deps.is_empty() {
                    let step = lane / self.dp_size as usize;
                    external_ns[start_vertex(o) as usize] = step_start_ns[step];
                    step_start_s[step]
                } else {
                    deps.iter().map(|&d| self.row_at(trace, d, lane).end_s).fold(f32::NEG_INFINITY, f32::max)
                };
                let delay_s = f64::from(row.start_s - ready_s);
                launch_delay_ns[o as usize] = if delay_s <= -NEGATIVE_LIMIT_S { 0 } else { seconds_to_ns(delay_s) };
                for &d in deps {
                    edges.push(ExplicitEdge {
                        source: end_vertex(self.op_id(d, lane)),
                        target: start_vertex(o),
                        kind: EdgeKind::StreamOrder,
                    });
                }
            }
        }
        (external_ns, launch_delay_ns)
    }
}

/// The workers (global ranks) in order: each one's index by global rank, and one rank of the model each.
fn workers_of(trace: &ArtifactTrace) -> (HashMap<u32, u32>, Vec<RankSpec>) {
    let mut workers: Vec<(u32, u32, u32)> = trace.rows.iter().map(|r| (r.rank, r.dp, r.stage)).collect();
    workers.sort_unstable();
    workers.dedup();
    let worker_index: HashMap<u32, u32> = workers.iter().enumerate().map(|(i, w)| (w.0, i as u32)).collect();
    let ranks: Vec<RankSpec> = workers
        .iter()
        .enumerate()
        .map(|(i, w)| RankSpec { key: RankKey { trace: 0, device: DeviceIdx(i as u32) }, rank: w.0 })
        .collect();
    (worker_index, ranks)
}

/// The arrival and release edges of each barrier (vertex `2 × op_count + index`).
fn barrier_edges(barrier_members: &[Vec<u32>], op_count: usize) -> Vec<ExplicitEdge> {
    let mut edges: Vec<ExplicitEdge> = Vec::new();
    let barrier_base = 2 * op_count as u32;
    for (b, list) in barrier_members.iter().enumerate() {
        let barrier = barrier_base + b as u32;
        for &o in list {
            edges.push(ExplicitEdge { source: start_vertex(o), target: barrier, kind: EdgeKind::CollectiveArrival });
            edges.push(ExplicitEdge { source: barrier, target: end_vertex(o), kind: EdgeKind::CollectiveRelease });
        }
    }
    edges
}

/// The recorded time of every vertex: operation starts and ends, then each barrier's latest member start.
fn measured_vertex_times(ops: &[Op], barrier_members: &[Vec<u32>], vertex_count: usize) -> Vec<i64> {
    let mut measured_ns = vec![0i64; vertex_count];
    for (o, op) in ops.iter().enumerate() {
        measured_ns[2 * o] = op.start_ns;
        measured_ns[2 * o + 1] = op.end_ns;
    }
    for (b, list) in barrier_members.iter().enumerate() {
        measured_ns[2 * ops.len() + b] = list.iter().map(|&o| ops[o as usize].start_ns).max().unwrap_or(0);
    }
    measured_ns
}

impl StragglerModel {
    /// Derives the dependency model from the trace's template and lays it out over every step and DP rank.
    pub fn build(trace: &ArtifactTrace, meta: &JobMeta) -> Result<StragglerModel, ArtifactError> {
        let file = &trace.source;
        check_lanes_bounded(trace)?;
        let template = Template::build(trace, meta)?;
        let mut steps: Vec<i64> = trace.rows.iter().map(|r| r.step).collect();
        steps.sort_unstable();
        steps.dedup();
        let dp_size = trace.rows.iter().map(|r| r.dp).max().unwrap_or(0) + 1;
        let pp_size = trace.rows.iter().map(|r| r.stage).max().unwrap_or(0) + 1;
        let layout = Layout::place(trace, &template, &steps, dp_size)?;
        let (worker_index, ranks) = workers_of(trace);

        // Step starts: the earliest recorded start of each step.
        let step_index: HashMap<i64, u32> = steps.iter().enumerate().map(|(i, &s)| (s, i as u32)).collect();
        let mut step_start_s = vec![f32::INFINITY; steps.len()];
        for row in &trace.rows {
            let s = step_index[&row.step] as usize;
            step_start_s[s] = step_start_s[s].min(row.start_s);
        }

        let (ops, placement, mut recorded_own_ns) = layout.ops(trace, &template, &worker_index);
        let op_count = ops.len();
        let barrier_members = layout.barriers(trace, &template, steps.len(), &ops, &mut recorded_own_ns);
        let mut edges = barrier_edges(&barrier_members, op_count);
        let vertex_count = 2 * op_count + barrier_members.len();
        let (external_ns, launch_delay_ns) =
            layout.lane_dependencies(trace, &template, &step_start_s, vertex_count, &mut edges);
        let measured_ns = measured_vertex_times(&ops, &barrier_members, vertex_count);
        let window_start_ns = step_start_s.iter().map(|&s| seconds_to_ns(f64::from(s))).min().unwrap_or(0);
        let graph = Graph::from_explicit(ExplicitModel {
            ops,
            ranks,
            categories: trace.optypes.clone(),
            window_start_ns,
            barriers: barrier_members.len() as u32,
            edges,
            external_ns,
            measured_ns,
            instances: layout.names as u32,
        });
        if graph.stats.edges_dropped_for_cycles > 0 {
            return Err(invalid(
                file,
                format!(
                    "the dependency model derived from the trace has a cycle ({} edges)",
                    graph.stats.edges_dropped_for_cycles
                ),
            ));
        }
        Ok(StragglerModel {
            graph,
            optypes: trace.optypes.clone(),
            steps,
            dp_size,
            pp_size,
            placement,
            recorded_own_ns,
            launch_delay_ns,

            names_per_lane: layout.names,
            groups: template.groups.len(),
        })
    }

    /// Replays with own times at the operations' ends `end_own_ns` and launch delays `delay_ns` (`None`: 0), and
    /// returns each step's time (last end minus first start), ns.
    fn step_times(&self, end_own_ns: &[i64], delay_ns: Option<&[i64]>) -> Vec<i64> {
        let graph = &self.graph;
        let mut own = vec![0i64; graph.own_ns().len()];
        for o in 0..graph.ops.len() {
            own[2 * o + 1] = end_own_ns[o];
            if let Some(delay) = delay_ns {
                own[2 * o] = delay[o];
            }
        }
        let times = graph.simulate(&own, false);
        let mut first = vec![i64::MAX; self.steps.len()];
        let mut last = vec![i64::MIN; self.steps.len()];
        for (o, place) in self.placement.iter().enumerate() {
            let s = place.0 as usize;
            first[s] = first[s].min(times[start_vertex(o as u32) as usize]);
            last[s] = last[s].max(times[end_vertex(o as u32) as usize]);
        }
        first.iter().zip(&last).map(|(a, b)| b - a).collect()
    }
}

fn mean_ns(values: &[i64]) -> f64 {
    if values.is_empty() { 0.0 } else { values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64 }
}

/// The median (the mean of the two middle values of an even count).
fn median(values: &mut [i64]) -> f64 {
    values.sort_unstable();
    let n = values.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        values[n / 2] as f64
    } else {
        (values[n / 2 - 1] as f64 + values[n / 2] as f64) / 2.0
    }
}

/// One group's slowdown: the ideal with only its operations at their recorded own times, over the ideal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupSlowdown {
    /// Operation type (pipeline transfers per direction), DP rank or stage.
    pub name: String,
    /// Mean step time of that replay, seconds.
    pub step_time_s: f64,
    /// Its mean step time over the ideal's.
    pub slowdown: f64,
    /// Per step: its step time over the ideal's, in step order.
    pub per_step: Vec<f64>,
}

/// The share of the slowdown a selection of operations explains.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explained {
    /// What was selected.
    pub selection: String,
    /// Global ranks of the selected workers.
    pub ranks: Vec<u32>,
    /// Mean step time without launch delays, seconds.
    pub t_original_s: f64,
    /// Mean step time of the ideal, seconds.
    pub t_ideal_s: f64,
    /// The original with the selection idealised, seconds.
    pub t_removed_s: f64,
    /// The ideal with the selection at recorded times, seconds.
    pub t_added_s: f64,
    /// `(t_original − t_removed) / (t_original − t_ideal)`: the metric.
    pub removed: f64,
    /// `(t_added − t_ideal) / (t_original − t_ideal)`.
    pub added: f64,
}

/// Where a worker sits in the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WorkerPlace {
    /// Global rank.
    pub rank: u32,
    /// DP rank.
    pub dp_rank: u32,
    /// Pipeline stage.
    pub stage: u32,
}

/// One step's times.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepTimes {
    /// The step number.
    pub step: i64,
    /// Recorded (the replay with recorded own times and launch delays), seconds.
    pub measured_s: f64,
    /// Without launch delays, seconds.
    pub no_delay_s: f64,
    /// Ideal, seconds.
    pub ideal_s: f64,
    /// `no_delay / ideal`.
    pub slowdown: f64,
}

/// The analysis of one artifact trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StragglerReport {
    /// The trace file.
    pub source: String,
    /// Job facts from the metadata file, when one was given.
    pub meta: JobMeta,
    /// DP ranks in the trace.
    pub dp_size: u32,
    /// Pipeline stages in the trace.
    pub pp_size: u32,
    /// Workers (global ranks) in the trace.
    pub workers: usize,
    /// Each worker's place, by global rank.
    pub worker_places: Vec<WorkerPlace>,
    /// Steps in the trace.
    pub steps: usize,
    /// Rows read.
    pub rows: usize,
    /// Rows skipped, by cause.
    pub skipped_rows: BTreeMap<String, u64>,
    /// Named operations per step and DP rank (all stages).
    pub ops_per_lane: usize,
    /// Synchronisation groups per step and DP rank.
    pub sync_groups: usize,
    /// Edges of the laid-out model, by kind.
    pub edges: BTreeMap<String, u64>,
    /// Mean recorded step time, seconds.
    pub step_time_measured_s: f64,
    /// Mean step time without launch delays, seconds.
    pub step_time_no_delay_s: f64,
    /// Mean step time of the ideal, seconds.
    pub step_time_ideal_s: f64,
    /// Slowdown from launch delays: measured over no-delay.
    pub launch_slowdown: f64,
    /// `S`: no-delay over ideal.
    pub slowdown: f64,
    /// Per step.
    pub per_step: Vec<StepTimes>,
    /// `S_t` per operation type, largest first.
    pub by_optype: Vec<GroupSlowdown>,
    /// `S_w` per DP rank, largest first.
    pub by_dp_rank: Vec<GroupSlowdown>,
    /// `S_w` per stage, largest first.
    pub by_stage: Vec<GroupSlowdown>,
    /// `M_W`: individual workers.
    pub m_w: Explained,
    /// `M_S`: the last stage.
    pub m_s: Explained,
}

const NS_PER_S: f64 = 1e9;

/// The replays behind the decompositions: the ideal own times and the means the slowdowns are measured against.
struct Replays<'a> {
    model: &'a StragglerModel,
    /// Per operation, its ideal own time, ns.
    ideal: Vec<i64>,
    /// Per step, the ideal replay's step time, ns.
    ideal_steps: Vec<i64>,
    /// Mean step time without launch delays, ns.
    t_no_delay: f64,
    /// Mean step time of the ideal, ns.
    t_ideal: f64,
}

/// A decomposition of the slowdown: by operation type group, DP rank or stage.
#[derive(Clone, Copy)]
enum Dimension {
    Optype,
    DpRank,
    Stage,
}

/// The ideal: per operation type, the mean (compute) or median (communication) of the no-delay replay's own times
/// over the whole trace. Communication synchronised in a group is idealised by its transfer.
fn ideal_own_times(model: &StragglerModel) -> Vec<i64> {
    let graph = &model.graph;
    let mut by_type: Vec<Vec<i64>> = vec![Vec::new(); model.optypes.len()];
    for (o, op) in graph.ops.iter().enumerate() {
        by_type[op.category as usize].push(model.recorded_own_ns[o]);
    }
    let centre: Vec<i64> = by_type
        .iter_mut()
        .enumerate()
        .map(|(t, values)| {
            let value =
                if ot::COMMUNICATION.contains(&model.optypes[t].as_str()) { median(values) } else { mean_ns(values) };
            value.round() as i64
        })
        .collect();
    graph.ops.iter().map(|op| centre[op.category as usize]).collect()
}

impl Replays<'_> {
    /// Own times with `select`ed operations taken from `chosen` and the rest from `base`.
    fn mix(&self, base: &[i64], chosen: &[i64], select: &(dyn Fn(usize) -> bool + Sync)) -> Vec<i64> {
        (0..self.model.graph.ops.len()).map(|o| if select(o) { chosen[o] } else { base[o] }).collect()
    }

    /// The ideal with only the `select`ed operations at their recorded own times.
    fn group(&self, name: String, select: &(dyn Fn(usize) -> bool + Sync)) -> GroupSlowdown {
        let steps = self.model.step_times(&self.mix(&self.ideal, &self.model.recorded_own_ns, select), None);
        let mean = mean_ns(&steps);
        GroupSlowdown {
            name,
            step_time_s: mean / NS_PER_S,
            slowdown: ratio(mean, self.t_ideal),
            per_step: steps.iter().zip(&self.ideal_steps).map(|(&a, &b)| ratio(a as f64, b as f64)).collect(),
        }
    }

    /// The decompositions, largest slowdown first: one replay per operation type group, DP rank and stage,
    /// spread over the cores.
    fn decompositions(&self) -> (Vec<GroupSlowdown>, Vec<GroupSlowdown>, Vec<GroupSlowdown>) {
        let model = self.model;
        let sort = |mut v: Vec<GroupSlowdown>| {
            v.sort_by(|a, b| b.slowdown.total_cmp(&a.slowdown).then(a.name.cmp(&b.name)));
            v
        };
        let mut attribution_groups: Vec<&str> = model.optypes.iter().map(|t| ot::attribution_group(t)).collect();
        attribution_groups.sort_unstable();
        attribution_groups.dedup();
        let optype_group: Vec<u32> = model
            .optypes
            .iter()
            .map(|t| attribution_groups.iter().position(|g| *g == ot::attribution_group(t)).unwrap_or(0) as u32)
            .collect();
        let key = |dimension: Dimension, o: usize| match dimension {
            Dimension::Optype => optype_group[model.graph.ops[o].category as usize],
            Dimension::DpRank => model.placement[o].1,
            Dimension::Stage => model.placement[o].2,
        };
        let mut jobs: Vec<(Dimension, String, u32)> = Vec::new();
        jobs.extend(attribution_groups.iter().enumerate().map(|(i, g)| (Dimension::Optype, g.to_string(), i as u32)));
        jobs.extend((0..model.dp_size).map(|d| (Dimension::DpRank, d.to_string(), d)));
        jobs.extend((0..model.pp_size).map(|s| (Dimension::Stage, s.to_string(), s)));
        let results = parallel_map(&jobs, |(dimension, name, value)| {
            (*dimension, self.group(name.clone(), &|o: usize| key(*dimension, o) == *value))
        });
        let pick = |wanted: fn(Dimension) -> bool| -> Vec<GroupSlowdown> {
            sort(results.iter().filter(|(d, _)| wanted(*d)).map(|(_, g)| g.clone()).collect())
        };
        (
            pick(|d| matches!(d, Dimension::Optype)),
            pick(|d| matches!(d, Dimension::DpRank)),
            pick(|d| matches!(d, Dimension::Stage)),
        )
    }

    /// Removing the selection from the original, and adding it to the ideal.
    fn explain(&self, selection: String, ranks: Vec<u32>, select: &(dyn Fn(usize) -> bool + Sync)) -> Explained {
        let (recorded, ideal) = (&self.model.recorded_own_ns, &self.ideal);
        let replays = parallel_map(&[false, true], |&add| {
            let own = if add { self.mix(ideal, recorded, select) } else { self.mix(recorded, ideal, select) };
            mean_ns(&self.model.step_times(&own, None))
        });
        let (removed, added) = (replays[0], replays[1]);
        let (t_no_delay, t_ideal) = (self.t_no_delay, self.t_ideal);
        let excess = t_no_delay - t_ideal;
        Explained {
            selection,
            ranks,
            t_original_s: t_no_delay / NS_PER_S,
            t_ideal_s: t_ideal / NS_PER_S,
            t_removed_s: removed / NS_PER_S,
            t_added_s: added / NS_PER_S,
            removed: ratio(t_no_delay - removed, excess),
            added: ratio(added - t_ideal, excess),
        }
    }

    /// `M_W` (the workers whose DP rank and stage both stand out most) and `M_S` (the last stage), from the
    /// workers (global rank, DP rank, stage) and the per-DP-rank and per-stage slowdowns.
    fn worker_selections(
        &self,
        workers: &[(u32, u32, u32)],
        by_dp_rank: &[GroupSlowdown],
        by_stage: &[GroupSlowdown],
    ) -> (Explained, Explained) {
        let model = self.model;
        let dp_score: HashMap<u32, f64> =
            by_dp_rank.iter().map(|g| (g.name.parse().unwrap_or(0), g.slowdown)).collect();
        let stage_score: HashMap<u32, f64> =
            by_stage.iter().map(|g| (g.name.parse().unwrap_or(0), g.slowdown)).collect();
        let mut scored: Vec<(f64, u32)> =
            workers.iter().map(|&(rank, dp, stage)| (dp_score[&dp].min(stage_score[&stage]), rank)).collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let selected = (workers.len() * WORKER_SHARE_PCT).div_ceil(100);
        let chosen: Vec<u32> = scored.iter().take(selected).map(|s| s.1).collect();
        let m_w = self.explain(
            format!("the {selected} worker(s) ({WORKER_SHARE_PCT} %) with the highest min(S_dp, S_stage)"),
            chosen.clone(),
            &|o: usize| chosen.contains(&model.placement[o].3),
        );
        let last_stage = model.pp_size - 1;
        let last_stage_ranks: Vec<u32> = workers.iter().filter(|w| w.2 == last_stage).map(|w| w.0).collect();
        let m_s = self.explain(format!("the last stage ({last_stage})"), last_stage_ranks, &|o: usize| {
            model.placement[o].2 == last_stage
        });
        (m_w, m_s)
    }
}

/// Runs the analysis on a model.
pub fn analyze(trace: &ArtifactTrace, meta: &JobMeta, model: &StragglerModel) -> StragglerReport {
    let graph = &model.graph;
    let recorded = &model.recorded_own_ns;
    let ideal = ideal_own_times(model);
    let mut base = parallel_map(&[0, 1, 2], |&which| match which {
        0 => model.step_times(recorded, Some(&model.launch_delay_ns)),
        1 => model.step_times(recorded, None),
        _ => model.step_times(&ideal, None),
    });
    let (ideal_steps, no_delay_steps, measured_steps) =
        (base.pop().unwrap_or_default(), base.pop().unwrap_or_default(), base.pop().unwrap_or_default());
    let (t_measured, t_no_delay, t_ideal) = (mean_ns(&measured_steps), mean_ns(&no_delay_steps), mean_ns(&ideal_steps));

    let per_step = (0..model.steps.len())
        .map(|s| StepTimes {
            step: model.steps[s],
            measured_s: measured_steps[s] as f64 / NS_PER_S,
            no_delay_s: no_delay_steps[s] as f64 / NS_PER_S,
            ideal_s: ideal_steps[s] as f64 / NS_PER_S,
            slowdown: ratio(no_delay_steps[s] as f64, ideal_steps[s] as f64),
        })
        .collect();

    let replays = Replays { model, ideal, ideal_steps, t_no_delay, t_ideal };
    let (by_optype, by_dp_rank, by_stage) = replays.decompositions();
    let mut workers: Vec<(u32, u32, u32)> = model.placement.iter().map(|p| (p.3, p.1, p.2)).collect();
    workers.sort_unstable();
    workers.dedup();
    let (m_w, m_s) = replays.worker_selections(&workers, &by_dp_rank, &by_stage);

    StragglerReport {
        source: trace.source.clone(),
        meta: meta.clone(),
        dp_size: model.dp_size,
        pp_size: model.pp_size,
        workers: workers.len(),
        worker_places: workers.iter().map(|&(rank, dp_rank, stage)| WorkerPlace { rank, dp_rank, stage }).collect(),
        steps: model.steps.len(),
        rows: trace.rows.len(),
        skipped_rows: trace.skipped.clone(),
        ops_per_lane: model.names_per_lane,
        sync_groups: model.groups,
        edges: graph.stats.edges.clone(),
        step_time_measured_s: t_measured / NS_PER_S,
        step_time_no_delay_s: t_no_delay / NS_PER_S,
        step_time_ideal_s: t_ideal / NS_PER_S,
        launch_slowdown: ratio(t_measured, t_no_delay),
        slowdown: ratio(t_no_delay, t_ideal),
        per_step,
        by_optype,
        by_dp_rank,
        by_stage,
        m_w,
        m_s,
    }
}

/// `f` over `items`, on as many named threads as there are cores (the replays are independent), in order.
fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(items.len());
    if threads <= 1 {
        return items.iter().map(&f).collect();
    }
    let mut results: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                std::thread::Builder::new().name(format!("straggler-replay-{t}")).spawn_scoped(scope, move || {
                    (t..items.len()).step_by(threads).map(|i| (i, f(&items[i]))).collect::<Vec<_>>()
                })
            })
            .collect();
        for handle in handles {
            // A replay thread that could not start, or panicked, leaves its items to this thread.
            if let Ok(Ok(done)) = handle.map(|h| h.join()) {
                for (i, r) in done {
                    results[i] = Some(r);
                }
            }
        }
    });
    results.into_iter().enumerate().map(|(i, r)| r.unwrap_or_else(|| f(&items[i]))).collect()
}

fn ratio(a: f64, b: f64) -> f64 {
    if b != 0.0 { a / b } else { 0.0 }
}

/// Reads, models and analyses an artifact trace.
pub fn run(path: &Path, meta: &JobMeta) -> Result<StragglerReport, ArtifactError> {
    let trace = ArtifactTrace::load(path)?;
    let model = StragglerModel::build(&trace, meta)?;
    Ok(analyze(&trace, meta, &model))
}

/// Per worker (rows `DP<d> PP<s>`, by global rank) and step (columns, in step order): the slowdown the worker's DP rank and stage
/// both carry in that step, `min(S_dp, S_stage) − 1`, percent. This is the paper's worker heatmap spread over the
/// steps: a worker that straggles stands out as a row, a slow stage as a band of rows, and a slow step as a column.
pub fn heatmap_cells(report: &StragglerReport) -> (Vec<String>, Vec<Vec<Option<f64>>>) {
    let per_step = |groups: &[GroupSlowdown], name: u32| -> Vec<f64> {
        groups.iter().find(|g| g.name == name.to_string()).map(|g| g.per_step.clone()).unwrap_or_default()
    };
    let rows = report.worker_places.iter().map(|w| format!("DP{} PP{}", w.dp_rank, w.stage)).collect();
    let cells = report
        .worker_places
        .iter()
        .map(|w| {
            let (dp, stage) = (per_step(&report.by_dp_rank, w.dp_rank), per_step(&report.by_stage, w.stage));
            (0..report.per_step.len()).map(|s| Some((dp.get(s)?.min(*stage.get(s)?) - 1.0) * 100.0)).collect()
        })
        .collect();
    (rows, cells)
}

/// The heatmap of [`heatmap_cells`] as a chart.
pub fn heatmap_chart(report: &StragglerReport) -> crate::output::charts::Chart {
    let (rows, cells) = heatmap_cells(report);
    let first = report.per_step.first().map_or(0, |s| s.step);
    let last = report.per_step.last().map_or(0, |s| s.step);
    let height_px = (150 + 16 * rows.len() as u32).clamp(300, 2400);
    let width_px = (420 + 18 * report.per_step.len() as u32).clamp(700, 2400);
    crate::output::charts::Chart {
        name: "straggler_heatmap".into(),
        title: format!(
            "Slowdown per worker and step, min(S_dp, S_stage) − 1 (S = {:.3}; steps {first}–{last})",
            report.slowdown
        ),
        size_px: (width_px, height_px),
        kind: crate::output::charts::ChartKind::Heatmap {
            rows,
            x_label: format!("step (index of {} recorded steps)", report.per_step.len()),
            cells,
            unit: "%".into(),
        },
    }
}

/// Draws the heatmap into `png_path` and the same path with the extension `svg`; returns both paths.
pub fn write_heatmap(report: &StragglerReport, png_path: &Path) -> Result<[PathBuf; 2], ArtifactError> {
    let chart = heatmap_chart(report);
    let png = crate::output::charts::render_png(&chart).map_err(ArtifactError::Heatmap)?;
    let svg = crate::output::charts::render_svg(&chart).map_err(ArtifactError::Heatmap)?;
    let svg_path = png_path.with_extension("svg");
    shardscope_io::output::write_output(png_path, &png).map_err(ArtifactError::Output)?;
    shardscope_io::output::write_output(&svg_path, svg.as_bytes()).map_err(ArtifactError::Output)?;
    Ok([png_path.to_path_buf(), svg_path])
}

/// The report as a table.
pub fn table(report: &StragglerReport) -> String {
    let mut out = String::new();
    let trial = report.meta.trial.as_deref().map(|t| format!(" ({t})")).unwrap_or_default();
    out.push_str(&format!(
        "straggler what-if of {}{trial}: {} workers (DP {} × PP {}), {} steps, {} rows, {} operations per step and DP rank\n",
        report.source, report.workers, report.dp_size, report.pp_size, report.steps, report.rows, report.ops_per_lane
    ));
    if !report.skipped_rows.is_empty() {
        let skipped: Vec<String> = report.skipped_rows.iter().map(|(k, n)| format!("{n} × {k}")).collect();
        out.push_str(&format!("skipped rows: {}\n", skipped.join(", ")));
    }
    out.push_str(&format!(
        "mean step time: measured {:.4} s, without launch delays {:.4} s, ideal {:.4} s\n",
        report.step_time_measured_s, report.step_time_no_delay_s, report.step_time_ideal_s
    ));
    out.push_str(&format!("slowdown S = {:.4}   (launch delays: {:.4})\n", report.slowdown, report.launch_slowdown));
    for (title, rows) in [
        ("S_t per operation type", &report.by_optype),
        ("S_w per DP rank", &report.by_dp_rank),
        ("S_w per stage", &report.by_stage),
    ] {
        out.push_str(&format!("{title} (only it at recorded times, over the ideal):\n"));
        for g in rows.iter() {
            out.push_str(&format!("  {:<28} {:>8.4}   {:>9.4} s\n", g.name, g.slowdown, g.step_time_s));
        }
    }
    for (name, m) in [("M_W", &report.m_w), ("M_S", &report.m_s)] {
        out.push_str(&format!(
            "{name} = {:.1} % of the slowdown removed by idealising {} (ranks {}); {:.1} % added back to the ideal\n",
            m.removed * 100.0,
            m.selection,
            m.ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
            m.added * 100.0
        ));
    }
    out
}
