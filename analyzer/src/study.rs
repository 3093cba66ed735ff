//! Studies (`analyzer study STUDY.toml`): run one workload over a grid of configurations, record each run, and
//! analyse them all into one JSON file and one HTML page with charts against each swept parameter.
//!
//! The study file names a command template with `{param}` placeholders and the grid of parameter values; every
//! point of the grid (and each repetition of it) is run once, by default under `capture`, its trace kept in the
//! study's folder. A point whose trace and exit status 0 are already there is kept when the study is run again,
//! so an interrupted or partly failed study resumes where it stopped; a point that fails is recorded with its exit
//! status and the study goes on. The analysis then reads every finished point with the same options as
//! `analyzer report`.

pub mod command;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::figures::bench_peaks::BenchPeaks;
use crate::figures::categories::{self, Classifier};
use crate::output::charts::{self, Chart, ChartKind, Line, Segment, SeriesPoint, escape};
use crate::output::html::{self, Section, Table};
use crate::report::{self, Options, Report};
use crate::study::command::CommandTemplate;

/// Placeholders every template knows besides the grid's parameters.
const BUILTIN_PLACEHOLDERS: [&str; 3] = ["out", "rep", "point"];

/// The most runs (grid points × repetitions) a study file may ask for: a bound checked before the points are
/// listed, so that a file asking for 10¹⁶ is refused rather than exhausting memory.
pub const MAX_RUNS: u64 = 10_000;

/// The study file, as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StudyFile {
    /// Name of the study (default: the file's name without `.toml`).
    #[serde(default)]
    pub name: Option<String>,
    /// Command line with `{param}` placeholders, `{out}` (the trace path), `{rep}` and `{point}`: split into
    /// words and run without a shell, each value one argument (see [`crate::study::command`]).
    pub command: String,
    /// Run `command` under `sh -c` (pipes, `&&`, redirections), each value quoted as one shell word.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shell: bool,
    /// Parameter → its values; every combination is one point.
    pub grid: BTreeMap<String, Vec<toml::Value>>,
    /// Runs per point.
    #[serde(default = "one")]
    pub repetitions: u32,
    /// Leading steps of each rank left out of the step times (warm-up), as `report --skip-steps`.
    #[serde(default)]
    pub warmup_steps: usize,
    /// Environment of every run; values may hold placeholders.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The parameter that is the GPU count, for scaling efficiency (default: `nproc` when the grid has it).
    #[serde(default)]
    pub gpus: Option<String>,
    /// The study's folder (relative to the study file's folder; default `<name>-study`).
    #[serde(default)]
    pub output: Option<PathBuf>,
    /// `bench` results of the machine (relative to the study file's folder).
    #[serde(default)]
    pub bench: Option<PathBuf>,
    /// The model's shape: with `[tokens]`, each phase's achieved FLOP/s and MFU.
    #[serde(default)]
    pub model: Option<ModelShape>,
    /// Tokens per phase instance (`batch`, `seq`, `decode_steps`).
    #[serde(default)]
    pub tokens: Option<TokensTemplate>,
}

impl StudyFile {
    /// The file as the study's records show it: the command and the environment's values with secrets redacted
    /// ([`shardscope_io::redact`]).
    pub fn redacted(&self) -> StudyFile {
        let mut file = self.clone();
        file.command = shardscope_io::redact::redact_text(&file.command);
        for (name, value) in &mut file.env {
            *value = shardscope_io::redact::redact_env_value(name, value);
        }
        file
    }
}

fn one() -> u32 {
    1
}

pub use crate::report::mfu::ModelShape;

/// The tokens of one phase instance, for FLOP/s and MFU: values may hold placeholders (grid parameters and the
/// names of `[env]`), and must then read as positive numbers.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokensTemplate {
    /// Sequences per batch: prefill processes batch × seq tokens per instance, decode batch tokens per step.
    pub batch: String,
    /// Prompt length, tokens.
    #[serde(default)]
    pub seq: Option<String>,
    /// Decode steps after each prefill (the decode context grows by one each step).
    #[serde(default)]
    pub decode_steps: Option<String>,
}

/// A study ready to run: the file checked, paths resolved, points listed.
#[derive(Debug, Clone)]
pub struct Study {
    /// The study file's path, for messages.
    pub path: PathBuf,
    /// Its contents.
    pub file: StudyFile,
    /// Its name.
    pub name: String,
    /// Where the commands run and relative paths start: the study file's folder.
    pub base_dir: PathBuf,
    /// The study's folder.
    pub out_dir: PathBuf,
    /// Whether the study's folder is the study file's `output` (inside the file's folder), not `--out`.
    pub out_inside: bool,
    /// The command template, split into words.
    pub template: CommandTemplate,
    /// Every point, in grid order.
    pub points: Vec<Point>,
    /// The parameter that counts GPUs, if any.
    pub gpus: Option<String>,
}

/// One run of the study: a combination of parameter values and a repetition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// File-name-safe identifier (`SEQ-128_nproc-2_r0`).
    pub id: String,
    /// Parameter values, as text.
    pub params: BTreeMap<String, String>,
    /// Repetition, from 0.
    pub rep: u32,
}

impl Point {
    /// The configuration, without the repetition (`SEQ=128 nproc=2`).
    pub fn config(&self) -> String {
        self.params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }
}

/// Why a template could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    /// A `{` with no `}` after it.
    #[error("unclosed '{{' at byte {at_byte}")]
    Unclosed {
        /// Where the `{` is.
        at_byte: usize,
    },
    /// A placeholder nothing sets.
    #[error("unknown parameter {{{0}}}")]
    UnknownParameter(String),
    /// A `}` with no `{` before it.
    #[error("'}}' without '{{' at byte {at_byte}")]
    StrayClose {
        /// Where the `}` is.
        at_byte: usize,
    },
}

/// What is wrong with a study file; [`StudyError::File`] names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("{0}")]
    Read(std::io::Error),
    /// The file is not valid study TOML (the parser's message, on one line).
    #[error("{0}")]
    Toml(String),
    /// No command.
    #[error("`command` is empty")]
    EmptyCommand,
    /// No grid parameter.
    #[error("`[grid]` names no parameter")]
    EmptyGrid,
    /// No repetitions.
    #[error("`repetitions` must be at least 1")]
    NoRepetitions,
    /// More than [`MAX_RUNS`] runs.
    #[error("the grid ({sizes}) × {repetitions} repetitions asks for more than {max} runs", max = MAX_RUNS)]
    TooManyRuns {
        /// Each parameter with its number of values (`SEQ: 3, nproc: 2`).
        sizes: String,
        /// Repetitions of each point.
        repetitions: u32,
    },
    /// An `output` folder outside the study file's folder.
    #[error(
        "output {}: must be a folder inside the study file's folder (no absolute path, no '..'); \
         `analyzer study --out DIR` names any other",
        .0.display()
    )]
    OutputOutside(PathBuf),
    /// A grid parameter named like a built-in placeholder.
    #[error("parameter '{0}' is reserved ({{{0}}} is set by the study)")]
    Reserved(String),
    /// A grid parameter name with other characters than letters, digits and `_`.
    #[error("parameter name '{0}' is not made of letters, digits and '_'")]
    BadName(String),
    /// A grid parameter without values.
    #[error("parameter '{0}' has no values")]
    NoValues(String),
    /// A grid value that is neither a number nor a string.
    #[error("parameter '{0}': values must be numbers or strings")]
    ValueType(String),
    /// The command, an environment value or a token count cannot be expanded.
    #[error("{place}: {error}")]
    Placeholder {
        /// Where (`command`, `env KEY`, `tokens KEY`).
        place: String,
        /// Why.
        error: ExpandError,
    },
    /// `[tokens]` without `[model]`.
    #[error("`[tokens]` without `[model]`: FLOPs need the model's shape")]
    TokensWithoutModel,
    /// The model shape does not hold together.
    #[error("model: {0}")]
    Model(crate::report::mfu::ShapeError),
    /// `gpus` names no grid parameter.
    #[error("gpus = '{0}' is not a parameter of the grid")]
    GpusNotInGrid(String),
    /// The GPU count parameter has a value that is not a positive integer.
    #[error("parameter '{0}' counts GPUs: its values must be positive integers")]
    GpusNotPositive(String),
    /// Two points would write the same files.
    #[error("two points have the same file name '{0}'")]
    SameFileName(String),
    /// The command template cannot be read.
    #[error("command {0}")]
    Command(crate::study::command::CommandError),
    /// `bench` names a file that is not there.
    #[error("bench results {} not found", .0.display())]
    BenchNotFound(PathBuf),
}

/// Why a study could not be read, run or written. The text is one line naming the file or folder.
#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    /// The study file cannot be used.
    #[error("{}: {problem}", path.display())]
    File {
        /// The study file.
        path: PathBuf,
        /// What is wrong with it.
        problem: FileError,
    },
    /// A symbolic link where the study writes.
    #[error("{}: a symbolic link inside the study folder; the study writes only into real folders", .0.display())]
    Symlink(PathBuf),
    /// A folder could not be created.
    #[error("{}: {error}", path.display())]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// The operating system's reason.
        error: std::io::Error,
    },
    /// A status or result could not be put into JSON.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// An output file could not be written (the message names it).
    #[error("{0}")]
    Output(#[from] shardscope_io::Error),
    /// The study's `bench` results cannot be read for the collective peaks.
    #[error("{}: bench: {error}", path.display())]
    Bench {
        /// The study file.
        path: PathBuf,
        /// Why.
        error: crate::figures::bench_peaks::LoadError,
    },
    /// The study's `bench` results cannot be read for the GEMM peak.
    #[error("{}: bench: {error}", path.display())]
    Peak {
        /// The study file.
        path: PathBuf,
        /// Why.
        error: crate::report::mfu::BenchError,
    },
    /// The page or a chart file could not be made.
    #[error("{0}")]
    Page(#[from] html::PageError),
}

/// Why a point's token counts could not be worked out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokensError {
    /// A placeholder in `[tokens]` has no value.
    #[error("{0}")]
    Expand(#[from] ExpandError),
    /// The expanded counts are not valid.
    #[error("tokens: {0}")]
    Shape(crate::report::mfu::ShapeError),
}

/// Expands `{name}` placeholders; `{{` and `}}` are literal braces. Unknown names and unclosed braces are errors.
pub fn expand(template: &str, values: &dyn Fn(&str) -> Option<String>) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(template.len());
    let mut chars = template.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|p| p.1) == Some('{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek().map(|p| p.1) == Some('}') => {
                chars.next();
                out.push('}');
            }
            '{' => {
                let rest = &template[at + 1..];
                let end = rest.find('}').ok_or(ExpandError::Unclosed { at_byte: at })?;
                let name = &rest[..end];
                let value = values(name).ok_or_else(|| ExpandError::UnknownParameter(name.to_string()))?;
                out.push_str(&value);
                for _ in 0..name.chars().count() + 1 {
                    chars.next();
                }
            }
            '}' => return Err(ExpandError::StrayClose { at_byte: at }),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// A value as a shell word: unchanged when it is plainly safe, else single-quoted.
pub fn shell_word(value: &str) -> String {
    let plain = !value.is_empty() && value.chars().all(|c| c.is_ascii_alphanumeric() || "._/:=+-,@%".contains(c));
    if plain { value.to_string() } else { format!("'{}'", value.replace('\'', r"'\''")) }
}

fn value_text(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn safe_id(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect()
}

/// Refuses an empty command or grid, no repetitions, and a grid of more than [`MAX_RUNS`] runs.
fn check_size(file: &StudyFile) -> Result<(), FileError> {
    if file.command.trim().is_empty() {
        return Err(FileError::EmptyCommand);
    }
    if file.grid.is_empty() {
        return Err(FileError::EmptyGrid);
    }
    if file.repetitions == 0 {
        return Err(FileError::NoRepetitions);
    }
    let runs = file.grid.values().try_fold(u64::from(file.repetitions), |n, values| n.checked_mul(values.len() as u64));
    if runs.is_none_or(|n| n > MAX_RUNS) {
        let sizes: Vec<String> = file.grid.iter().map(|(k, v)| format!("{k}: {}", v.len())).collect();
        return Err(FileError::TooManyRuns { sizes: sizes.join(", "), repetitions: file.repetitions });
    }
    Ok(())
}

/// Refuses an `output` folder outside the study file's folder.
fn check_output(file: &StudyFile) -> Result<(), FileError> {
    if let Some(output) = &file.output
        && (output.is_absolute() || output.components().any(|c| !matches!(c, std::path::Component::Normal(_))))
    {
        return Err(FileError::OutputOutside(output.clone()));
    }
    Ok(())
}

/// Each grid parameter with its values as text; refuses reserved, malformed and empty parameters.
fn grid_values(file: &StudyFile) -> Result<Vec<(String, Vec<String>)>, FileError> {
    let mut values: Vec<(String, Vec<String>)> = Vec::new();
    for (name, list) in &file.grid {
        if BUILTIN_PLACEHOLDERS.contains(&name.as_str()) {
            return Err(FileError::Reserved(name.clone()));
        }
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(FileError::BadName(name.clone()));
        }
        if list.is_empty() {
            return Err(FileError::NoValues(name.clone()));
        }
        let texts: Option<Vec<String>> = list.iter().map(value_text).collect();
        let texts = texts.ok_or_else(|| FileError::ValueType(name.clone()))?;
        values.push((name.clone(), texts));
    }
    Ok(values)
}

/// Refuses placeholders in the command, the environment and `[tokens]` that nothing sets, `[tokens]` without
/// `[model]`, and a model shape that does not hold together.
fn check_placeholders(file: &StudyFile) -> Result<(), FileError> {
    let known =
        |name: &str| (file.grid.contains_key(name) || BUILTIN_PLACEHOLDERS.contains(&name)).then(|| "x".to_string());
    let placeholder = |place: String| move |error| FileError::Placeholder { place, error };
    expand(&file.command, &known).map_err(placeholder("command".into()))?;
    for (key, value) in &file.env {
        expand(value, &known).map_err(placeholder(format!("env {key}")))?;
    }
    let known_or_env = |name: &str| known(name).or_else(|| file.env.contains_key(name).then(|| "1".to_string()));
    if let Some(tokens) = &file.tokens {
        let fields = [
            ("batch", Some(&tokens.batch)),
            ("seq", tokens.seq.as_ref()),
            ("decode_steps", tokens.decode_steps.as_ref()),
        ];
        for (key, value) in fields.iter().filter_map(|(k, v)| Some((k, (*v)?))) {
            expand(value, &known_or_env).map_err(placeholder(format!("tokens {key}")))?;
        }
        if file.model.is_none() {
            return Err(FileError::TokensWithoutModel);
        }
    }
    if let Some(model) = &file.model {
        model.check().map_err(FileError::Model)?;
    }
    Ok(())
}

/// The grid parameter that counts GPUs, if any; refuses one that is not in the grid or not positive integers.
fn gpus_parameter(file: &StudyFile) -> Result<Option<String>, FileError> {
    let gpus = match &file.gpus {
        Some(name) if !file.grid.contains_key(name) => {
            return Err(FileError::GpusNotInGrid(name.clone()));
        }
        Some(name) => Some(name.clone()),
        None => file.grid.contains_key("nproc").then(|| "nproc".to_string()),
    };
    if let Some(name) = &gpus {
        for value in &file.grid[name] {
            if value_text(value).and_then(|t| t.parse::<u32>().ok()).is_none_or(|n| n == 0) {
                return Err(FileError::GpusNotPositive(name.clone()));
            }
        }
    }
    Ok(gpus)
}

/// The grid's points, the last parameter varying fastest, `repetitions` each; refuses two with the same file name.
fn grid_points(values: &[(String, Vec<String>)], repetitions: u32) -> Result<Vec<Point>, FileError> {
    let mut combos: Vec<BTreeMap<String, String>> = vec![BTreeMap::new()];
    for (name, texts) in values {
        combos = combos
            .into_iter()
            .flat_map(|combo| {
                texts.iter().map(move |t| {
                    let mut next = combo.clone();
                    next.insert(name.clone(), t.clone());
                    next
                })
            })
            .collect();
    }
    let mut points = Vec::new();
    for params in combos {
        for rep in 0..repetitions {
            let stem = params.iter().map(|(k, v)| format!("{k}-{v}")).collect::<Vec<_>>().join("_");
            points.push(Point { id: safe_id(&format!("{stem}_r{rep}")), params: params.clone(), rep });
        }
    }
    let mut ids: Vec<&str> = points.iter().map(|p| p.id.as_str()).collect();
    ids.sort_unstable();
    if let Some(pair) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(FileError::SameFileName(pair[0].to_string()));
    }
    Ok(points)
}

impl Study {
    /// Reads and checks a study file. Errors are one line naming the file and the cause.
    pub fn load(path: &Path, out_override: Option<&Path>) -> Result<Study, StudyError> {
        let fail = |problem: FileError| StudyError::File { path: path.to_path_buf(), problem };
        let text = std::fs::read_to_string(path).map_err(|e| fail(FileError::Read(e)))?;
        let file: StudyFile =
            toml::from_str(&text).map_err(|e| fail(FileError::Toml(e.message().replace('\n', " "))))?;
        check_size(&file).map_err(fail)?;
        let template = CommandTemplate::parse(&file.command, file.shell).map_err(|e| fail(FileError::Command(e)))?;
        check_output(&file).map_err(fail)?;
        let values = grid_values(&file).map_err(fail)?;
        check_placeholders(&file).map_err(fail)?;
        let gpus = gpus_parameter(&file).map_err(fail)?;
        if let Some(bench) = &file.bench {
            let resolved = path.parent().unwrap_or(Path::new(".")).join(bench);
            if !resolved.is_file() {
                return Err(fail(FileError::BenchNotFound(resolved)));
            }
        }
        let name = file.name.clone().unwrap_or_else(|| {
            let stem = path.file_name().map_or("study".into(), |n| n.to_string_lossy().into_owned());
            stem.strip_suffix(".toml").unwrap_or(&stem).to_string()
        });
        let base_dir = path.parent().map_or(PathBuf::from("."), Path::to_path_buf);
        let base_dir = if base_dir.as_os_str().is_empty() { PathBuf::from(".") } else { base_dir };
        let out_dir = match out_override {
            Some(dir) => dir.to_path_buf(),
            None => base_dir.join(file.output.clone().unwrap_or_else(|| PathBuf::from(format!("{name}-study")))),
        };
        let points = grid_points(&values, file.repetitions).map_err(fail)?;
        let out_inside = out_override.is_none();
        Ok(Study { path: path.to_path_buf(), file, name, base_dir, out_dir, out_inside, template, points, gpus })
    }

    /// The folder of the points' traces, logs and status records.
    pub fn points_dir(&self) -> PathBuf {
        self.out_dir.join("points")
    }

    /// A point's trace file.
    pub fn trace_path(&self, point: &Point) -> PathBuf {
        self.points_dir().join(format!("{}.sqlite", point.id))
    }

    fn status_path(&self, point: &Point) -> PathBuf {
        self.points_dir().join(format!("{}.status.json", point.id))
    }

    /// The command line of a point (without `capture`), as a shell would read it: the `sh -c` script with
    /// `shell = true`, else the arguments each quoted as one shell word.
    pub fn command_line(&self, point: &Point) -> String {
        let out = self.trace_path_for_command(point);
        if self.file.shell {
            let values = |name: &str| self.placeholder(point, name, &out).map(|v| shell_word(&v));
            return expand(&self.file.command, &values).unwrap_or_default();
        }
        self.argv(point).iter().map(|a| shell_word(a)).collect::<Vec<_>>().join(" ")
    }

    /// The program and arguments a point runs (without `capture`): `sh -c SCRIPT` with `shell = true`, else the
    /// template's words with the point's values, none of them read by a shell.
    pub fn argv(&self, point: &Point) -> Vec<String> {
        if self.file.shell {
            return vec!["sh".into(), "-c".into(), self.command_line(point)];
        }
        let out = self.trace_path_for_command(point);
        self.template.argv(&|name| self.placeholder(point, name, &out)).unwrap_or_default()
    }

    /// The command line of a point as recorded (status files, study.json): secrets redacted.
    pub fn recorded_command_line(&self, point: &Point) -> String {
        if self.file.shell {
            return shardscope_io::redact::redact_text(&self.command_line(point));
        }
        let argv = shardscope_io::redact::redact_args(&self.argv(point));
        argv.iter().map(|a| shell_word(a)).collect::<Vec<_>>().join(" ")
    }

    /// `{out}` as the command sees it: relative to the folder it runs in when the study's folder is inside it (so
    /// that recorded command lines do not depend on where the checkout is), else absolute.
    pub fn trace_path_for_command(&self, point: &Point) -> PathBuf {
        let trace = absolute(&self.trace_path(point));
        match trace.strip_prefix(absolute(&self.base_dir)) {
            Ok(relative) => relative.to_path_buf(),
            Err(_) => trace,
        }
    }

    fn placeholder(&self, point: &Point, name: &str, out: &Path) -> Option<String> {
        match name {
            "out" => Some(out.display().to_string()),
            "rep" => Some(point.rep.to_string()),
            "point" => Some(point.id.clone()),
            _ => point.params.get(name).cloned(),
        }
    }

    /// The environment of a point's run.
    pub fn environment(&self, point: &Point) -> BTreeMap<String, String> {
        let out = self.trace_path_for_command(point);
        let values = |name: &str| self.placeholder(point, name, &out);
        self.file.env.iter().map(|(k, v)| (k.clone(), expand(v, &values).unwrap_or_default())).collect()
    }
}

impl Study {
    /// Refuses a symbolic link where the study writes: its folder, `points/` and `charts/`, and (for the study
    /// file's own `output`) every folder between the study file's folder and it. A study folder is often shared
    /// or unpacked from elsewhere, and a link shipped inside it would send the outputs anywhere.
    fn check_out_dir(&self) -> Result<(), StudyError> {
        let mut folders = vec![self.points_dir(), self.out_dir.join("charts")];
        let mut folder = self.out_dir.as_path();
        folders.push(folder.to_path_buf());
        while self.out_inside
            && let Some(parent) = folder.parent().filter(|p| p.starts_with(&self.base_dir) && *p != self.base_dir)
        {
            folders.push(parent.to_path_buf());
            folder = parent;
        }
        for folder in folders {
            if std::fs::symlink_metadata(&folder).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(StudyError::Symlink(folder));
            }
        }
        Ok(())
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

impl Study {
    /// The tokens of a point's phase instances, from `[tokens]` with its placeholders filled in.
    pub fn tokens(&self, point: &Point) -> Result<Option<crate::report::mfu::Tokens>, TokensError> {
        let Some(template) = &self.file.tokens else { return Ok(None) };
        let out = self.trace_path_for_command(point);
        let env = self.environment(point);
        let values = |name: &str| self.placeholder(point, name, &out).or_else(|| env.get(name).cloned());
        let mut text = format!("batch={}", expand(&template.batch, &values)?);
        if let Some(seq) = &template.seq {
            text += &format!(",seq={}", expand(seq, &values)?);
        }
        if let Some(steps) = &template.decode_steps {
            text += &format!(",decode_steps={}", expand(steps, &values)?);
        }
        crate::report::mfu::Tokens::parse(&text).map(Some).map_err(TokensError::Shape)
    }
}

/// How a point's run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStatus {
    /// The point.
    pub point: String,
    /// The command line that ran.
    pub command: String,
    /// Exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
    /// Why it could not be started, if it could not.
    pub error: Option<String>,
}

impl RunStatus {
    /// True for a run that exited with status 0.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && self.error.is_none()
    }

    fn describe(&self) -> String {
        match (&self.error, self.exit_code, self.signal) {
            (Some(error), Some(code), _) => format!("exit status {code}, but {error}"),
            (Some(error), None, _) => format!("not started: {error}"),
            (None, Some(code), _) => format!("exit status {code}"),
            (None, None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None, None) => "ended without a status".into(),
        }
    }
}

/// How to run the points.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The command writes its own trace to `{out}`: run it as is, not under `capture`.
    pub no_capture: bool,
    /// The `capture` program.
    pub capture: PathBuf,
}

/// Runs every point that has not finished yet; returns each point's status. Progress goes to `log` (stderr).
pub fn run_points(
    study: &Study,
    options: &RunOptions,
    log: &mut dyn std::io::Write,
) -> Result<Vec<RunStatus>, StudyError> {
    // Parameter values come from the study file: shown on the terminal with its control characters escaped.
    let safe = shardscope_io::error_text::one_line;
    study.check_out_dir()?;
    let dir = study.points_dir();
    std::fs::create_dir_all(&dir).map_err(|error| StudyError::CreateDir { path: dir.clone(), error })?;
    let total = study.points.len();
    let mut statuses = Vec::new();
    // The bar (on a terminal only) stands under the log lines, which are written with it lifted.
    let bar = crate::output::progress::points(total as u64);
    for (index, point) in study.points.iter().enumerate() {
        bar.set_position(index as u64);
        bar.set_message(format!("{} r{}", safe(&point.config()), point.rep));
        let trace = study.trace_path(point);
        let status_path = study.status_path(point);
        let previous: Option<RunStatus> = read_status(&status_path);
        // A trace is a file, or a folder of per-rank files (Kineto) when the command writes its own.
        if let Some(previous) = previous.filter(|s| s.succeeded() && trace.exists()) {
            bar.suspend(|| {
                writeln!(
                    log,
                    "study: [{}/{total}] {} r{}: kept (finished before)",
                    index + 1,
                    safe(&point.config()),
                    point.rep
                )
            })
            .ok();
            statuses.push(previous);
            continue;
        }
        // A trace left by an unfinished run is not this run's.
        let _ = if trace.is_dir() { std::fs::remove_dir_all(&trace) } else { std::fs::remove_file(&trace) };
        let command = study.recorded_command_line(point);
        bar.suspend(|| {
            writeln!(log, "study: [{}/{total}] {} r{}: running", index + 1, safe(&point.config()), point.rep)
        })
        .ok();
        let log_path = dir.join(format!("{}.log", point.id));
        let status = run_one(study, point, &command, options, &log_path);
        bar.suspend(|| {
            writeln!(
                log,
                "study: [{}/{total}] {} r{}: {} ({:.1} s)",
                index + 1,
                safe(&point.config()),
                point.rep,
                status.describe(),
                status.wall_s
            )
        })
        .ok();
        let mut status = status;
        if status.succeeded() && !trace.exists() {
            status.error = Some(format!("the run wrote no trace to {}", trace.display()));
        }
        let json = serde_json::to_string_pretty(&status)?;
        shardscope_io::output::write_output(&status_path, json.as_bytes())?;
        statuses.push(status);
    }
    bar.finish_and_clear();
    Ok(statuses)
}

/// The largest status file read: one holds a command line and a few numbers.
const MAX_STATUS_BYTES: u64 = 1 << 20;

/// A point's recorded status, if its file is a plain file (not a pipe, device or link shipped in the study
/// folder, which could block or point anywhere) of a sane size that reads as a status.
fn read_status(path: &Path) -> Option<RunStatus> {
    let metadata = std::fs::symlink_metadata(path).ok()?;
    if !metadata.is_file() || metadata.len() > MAX_STATUS_BYTES {
        return None;
    }
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn run_one(study: &Study, point: &Point, command: &str, options: &RunOptions, log_path: &Path) -> RunStatus {
    let started = Instant::now();
    let mut status = RunStatus {
        point: point.id.clone(),
        command: command.to_string(),
        exit_code: None,
        signal: None,
        wall_s: 0.0,
        error: None,
    };
    // A link at the log's name (shipped inside the study folder) is removed, never written through.
    let _ = std::fs::remove_file(log_path);
    let log = match std::fs::OpenOptions::new().write(true).create_new(true).open(log_path) {
        Ok(file) => file,
        Err(e) => {
            status.error = Some(format!("{}: {e}", log_path.display()));
            return status;
        }
    };
    let log_err = match log.try_clone() {
        Ok(file) => file,
        Err(e) => {
            status.error = Some(e.to_string());
            return status;
        }
    };
    let argv = study.argv(point);
    let Some((program, args)) = argv.split_first() else {
        status.error = Some("the command has no words".into());
        return status;
    };
    let mut child = if options.no_capture {
        let mut c = Command::new(program);
        c.args(args);
        c
    } else {
        let mut c = Command::new(&options.capture);
        c.arg("-o").arg(study.trace_path_for_command(point)).arg("--force").arg("--").arg(program).args(args);
        c
    };
    child.current_dir(&study.base_dir).envs(study.environment(point)).stdin(Stdio::null()).stdout(log).stderr(log_err);
    match child.status() {
        Ok(exit) => {
            status.exit_code = exit.code();
            #[cfg(unix)]
            {
                use std::os::unix::process::ExitStatusExt;
                status.signal = exit.signal();
            }
        }
        Err(e) => {
            status.error = Some(format!(
                "{}: {e}",
                if options.no_capture { program.clone() } else { options.capture.display().to_string() }
            ))
        }
    }
    status.wall_s = started.elapsed().as_secs_f64();
    status
}

/// The figures of one analysed point (all ranks of the run).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointFigures {
    /// Ranks (GPUs) in the trace.
    pub ranks: u32,
    /// The slowest rank's median step time: the pace of the run.
    pub step_p50_ns: Option<i64>,
    /// Shortest step of any rank.
    pub step_min_ns: Option<i64>,
    /// Longest step of any rank.
    pub step_max_ns: Option<i64>,
    /// Per phase: the slowest rank's median instance time, and the shortest and longest instance of any rank.
    pub phases: BTreeMap<String, [i64; 3]>,
    /// Summed time per category over the ranks.
    pub categories_ns: BTreeMap<String, i64>,
    /// All-reduce time (waiting and transfer) ÷ summed category time, percent.
    pub all_reduce_pct: f64,
    /// Summed over ranks: waiting for the last rank, and moving data, in matched collectives.
    pub comm_wait_ns: i64,
    /// See `comm_wait_ns`.
    pub comm_transfer_ns: i64,
    /// Summed over ranks: communication not overlapped by computation.
    pub exposed_comm_ns: i64,
    /// Per phase: summed time per category over the ranks.
    pub phase_categories_ns: BTreeMap<String, BTreeMap<String, i64>>,
    /// Per phase, the instance times after the warm-up on the slowest rank: prefill gives the time to first
    /// token, decode the time per output token (recorded phase ranges only).
    pub latency: Vec<crate::llm::layers::PhaseLatency>,
    /// Per phase: model FLOPs, achieved FLOP/s and MFU (with `[model]` and `[tokens]`).
    pub mfu: Vec<crate::report::mfu::PhaseMfu>,
    /// Why there is no MFU (tokens that do not read as numbers), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mfu_error: Option<String>,
    /// Per phase: kernel time per layer and op category, after the warm-up.
    pub layers: Vec<crate::llm::layers::PhaseLayers>,
}

/// Figures of a report, as the study compares them.
pub fn point_figures(report: &Report) -> PointFigures {
    let steps: Vec<&crate::llm::steps::Distribution> =
        report.ranks.iter().filter_map(|r| r.steps.as_ref()).map(|s| &s.time).filter(|t| t.count > 0).collect();
    let mut phases: BTreeMap<String, [i64; 3]> = BTreeMap::new();
    for rank in &report.ranks {
        for phase in &rank.phases {
            let Some(d) = phase.figures.instances.as_ref().filter(|d| d.count > 0) else { continue };
            let entry = phases.entry(phase.name.clone()).or_insert([d.p50_ns, d.min_ns, d.max_ns]);
            *entry = [entry[0].max(d.p50_ns), entry[1].min(d.min_ns), entry[2].max(d.max_ns)];
        }
    }
    let mut categories_ns: BTreeMap<String, i64> = BTreeMap::new();
    for rank in &report.ranks {
        for (label, ns) in &rank.figures.categories {
            *categories_ns.entry(label.clone()).or_default() += ns;
        }
    }
    let total: i64 = categories_ns.values().sum();
    let all_reduce: i64 = ["all_reduce"]
        .iter()
        .flat_map(|op| [format!("{}{op}", categories::COMM_PREFIX), format!("{}{op}", categories::WAIT_PREFIX)])
        .filter_map(|label| categories_ns.get(&label))
        .sum();
    let sum = |f: &dyn Fn(&report::Figures) -> i64| report.ranks.iter().map(|r| f(&r.figures)).sum::<i64>();
    let mut phase_categories_ns: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for phase in report.ranks.iter().flat_map(|r| &r.phases) {
        let entry = phase_categories_ns.entry(phase.name.clone()).or_default();
        for (label, ns) in &phase.figures.categories {
            *entry.entry(label.clone()).or_default() += ns;
        }
    }
    PointFigures {
        ranks: report.ranks.len() as u32,
        step_p50_ns: steps.iter().map(|d| d.p50_ns).max(),
        step_min_ns: steps.iter().map(|d| d.min_ns).min(),
        step_max_ns: steps.iter().map(|d| d.max_ns).max(),
        phases,
        all_reduce_pct: if total > 0 { 100.0 * all_reduce as f64 / total as f64 } else { 0.0 },
        categories_ns,
        comm_wait_ns: sum(&|f| f.comm_wait_ns),
        comm_transfer_ns: sum(&|f| f.comm_transfer_ns),
        exposed_comm_ns: sum(&|f| f.exposed_comm_ns),
        phase_categories_ns,
        latency: Vec::new(),
        mfu: Vec::new(),
        mfu_error: None,
        layers: Vec::new(),
    }
}

/// One point in the study's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointResult {
    /// The point.
    #[serde(flatten)]
    pub point: Point,
    /// `ok`, `failed` (the run), `unreadable` (the trace could not be analysed) or `not_run`.
    pub status: &'static str,
    /// How the run ended.
    pub run: Option<RunStatus>,
    /// The trace, relative to the study's folder.
    pub trace: Option<String>,
    /// Why the trace could not be analysed.
    pub error: Option<String>,
    /// Figures, for analysed points.
    pub figures: Option<PointFigures>,
}

/// Scaling from the smallest GPU count to each larger one, for one configuration of the other parameters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scaling {
    /// The other parameters (`SEQ=128`).
    pub config: String,
    /// GPU count of the baseline.
    pub base_gpus: u32,
    /// GPU count.
    pub gpus: u32,
    /// Median over repetitions of the step p50, baseline and this count.
    pub base_step_ns: i64,
    /// See `base_step_ns`.
    pub step_ns: i64,
    /// base_step_ns ÷ step_ns.
    pub speedup: f64,
    /// speedup ÷ (gpus ÷ base_gpus), percent.
    pub efficiency_pct: f64,
    /// The same for each phase's instance time after the warm-up (`prefill`: time to first token, `decode`: time
    /// per output token), from the medians over repetitions of the slowest rank's p50.
    pub phases: BTreeMap<String, PhaseScaling>,
}

/// Scaling of one phase's instance time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseScaling {
    /// Median over repetitions of the instance p50, baseline and this count.
    pub base_ns: i64,
    /// See `base_ns`.
    pub ns: i64,
    /// base_ns ÷ ns.
    pub speedup: f64,
    /// speedup ÷ (gpus ÷ base_gpus), percent.
    pub efficiency_pct: f64,
}

/// The study's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyResults {
    /// Name.
    pub study: String,
    /// The study file as read.
    pub file: StudyFile,
    /// Every point.
    pub points: Vec<PointResult>,
    /// Scaling between GPU counts (empty without a GPU parameter with two or more values).
    pub scaling: Vec<Scaling>,
}

/// Analyses every point whose run succeeded. A trace that cannot be read makes its point `unreadable`.
pub fn analyse(
    study: &Study,
    statuses: &[Option<RunStatus>],
    classifier: &Classifier,
    bench: Option<&BenchPeaks>,
    peak: Option<&crate::report::mfu::Peak>,
) -> StudyResults {
    let mut points = Vec::new();
    for (point, status) in study.points.iter().zip(statuses) {
        let trace = study.trace_path(point);
        let relative = trace.strip_prefix(&study.out_dir).unwrap_or(&trace).display().to_string();
        let mut result = PointResult {
            point: point.clone(),
            status: "not_run",
            // A status written by an older version may hold the command line as it ran: redacted again.
            run: status.clone().map(|mut s| {
                s.command = shardscope_io::redact::redact_text(&s.command);
                s
            }),
            trace: None,
            error: None,
            figures: None,
        };
        match status {
            None => {}
            Some(s) if !s.succeeded() => result.status = "failed",
            Some(_) => {
                result.trace = Some(relative.clone());
                match crate::output::progress::loading(&relative, || shardscope_io::load(&trace)) {
                    Ok(traces) => {
                        let options = Options {
                            classifier: classifier.clone(),
                            skip_steps: study.file.warmup_steps,
                            bench_peaks: bench.cloned(),
                            ..Options::default()
                        };
                        let report = report::analyze(&traces, &options);
                        result.status = "ok";
                        let mut figures = point_figures(&report);
                        let skip = study.file.warmup_steps;
                        let instances =
                            crate::llm::layers::instances(&traces, classifier, &options.phase_pattern, None);
                        figures.latency = crate::llm::layers::latencies(&instances, skip);
                        figures.layers = crate::llm::layers::phase_layers(&instances, skip);
                        if let Some(model) = &study.file.model {
                            match study.tokens(point) {
                                Ok(Some(tokens)) => {
                                    let times = latency_p50(&figures.latency);
                                    figures.mfu = crate::report::mfu::phase_mfu(&report, model, &tokens, peak, &times);
                                }
                                Ok(None) => {}
                                Err(e) => figures.mfu_error = Some(e.to_string()),
                            }
                        }
                        result.figures = Some(figures);
                    }
                    Err(error) => {
                        result.status = "unreadable";
                        result.error = Some(error.to_string().replace('\n', " "));
                    }
                }
            }
        }
        points.push(result);
    }
    let scaling = scaling(study, &points);
    StudyResults { study: study.name.clone(), file: study.file.redacted(), points, scaling }
}

/// Per phase, the slowest rank's median instance time after the warm-up.
fn latency_p50(latency: &[crate::llm::layers::PhaseLatency]) -> BTreeMap<String, i64> {
    latency.iter().filter(|l| l.time.count > 0).map(|l| (l.phase.clone(), l.time.p50_ns)).collect()
}

fn median(mut values: Vec<i64>) -> Option<i64> {
    values.sort_unstable();
    values.get(values.len().checked_sub(1)? / 2).copied()
}

/// Configurations (parameters without repetition) in grid order, with their analysed points.
fn configurations(points: &[PointResult]) -> Vec<(BTreeMap<String, String>, Vec<&PointResult>)> {
    let mut configs: Vec<(BTreeMap<String, String>, Vec<&PointResult>)> = Vec::new();
    for point in points {
        match configs.iter_mut().find(|(params, _)| *params == point.point.params) {
            Some((_, list)) => list.push(point),
            None => configs.push((point.point.params.clone(), vec![point])),
        }
    }
    configs
}

fn config_label(params: &BTreeMap<String, String>, without: Option<&str>) -> String {
    let text: Vec<String> =
        params.iter().filter(|(k, _)| Some(k.as_str()) != without).map(|(k, v)| format!("{k}={v}")).collect();
    if text.is_empty() { "all".into() } else { text.join(" ") }
}

fn step_median(points: &[&PointResult]) -> Option<i64> {
    median(points.iter().filter_map(|p| p.figures.as_ref()?.step_p50_ns).collect())
}

fn scaling(study: &Study, points: &[PointResult]) -> Vec<Scaling> {
    let Some(gpus) = &study.gpus else { return Vec::new() };
    // Per configuration of the other parameters: (GPU count, step median, per phase the instance median).
    type Row = (u32, i64, BTreeMap<String, i64>);
    let mut groups: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for (params, list) in configurations(points) {
        let Some(count) = params.get(gpus).and_then(|v| v.parse::<u32>().ok()) else { continue };
        let Some(step) = step_median(&list) else { continue };
        let mut phases: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for latency in list.iter().filter_map(|p| p.figures.as_ref()).flat_map(|f| &f.latency) {
            if latency.time.count > 0 {
                phases.entry(latency.phase.clone()).or_default().push(latency.time.p50_ns);
            }
        }
        let phases = phases.into_iter().filter_map(|(phase, values)| Some((phase, median(values)?))).collect();
        groups.entry(config_label(&params, Some(gpus))).or_default().push((count, step, phases));
    }
    let ratio = |base: i64, ns: i64, count: u32, base_gpus: u32| {
        let speedup = base as f64 / ns as f64;
        (speedup, 100.0 * speedup / (f64::from(count) / f64::from(base_gpus)))
    };
    let mut out = Vec::new();
    for (config, mut list) in groups {
        list.sort_by_key(|row| (row.0, row.1));
        let Some((base_gpus, base_step_ns, base_phases)) = list.first().cloned() else { continue };
        for (count, step_ns, phases) in &list[1..] {
            if *step_ns <= 0 {
                continue;
            }
            let (speedup, efficiency_pct) = ratio(base_step_ns, *step_ns, *count, base_gpus);
            let phases = phases
                .iter()
                .filter_map(|(phase, &ns)| {
                    let base_ns = *base_phases.get(phase)?;
                    let (speedup, efficiency_pct) = (ns > 0).then(|| ratio(base_ns, ns, *count, base_gpus))?;
                    Some((phase.clone(), PhaseScaling { base_ns, ns, speedup, efficiency_pct }))
                })
                .collect();
            out.push(Scaling {
                config: config.clone(),
                base_gpus,
                gpus: *count,
                base_step_ns,
                step_ns: *step_ns,
                speedup,
                efficiency_pct,
                phases,
            });
        }
    }
    out
}

/// The study's charts: against each swept parameter, op shares per configuration, all-reduce share, scaling.
pub fn study_charts(study: &Study, results: &StudyResults, classifier: &Classifier) -> Vec<Section> {
    let configs = configurations(&results.points);
    let mut sections = Vec::new();
    let swept: Vec<(&String, Vec<String>)> = study
        .file
        .grid
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(k, v)| (k, v.iter().filter_map(value_text).collect()))
        .collect();
    let mut phase_names: Vec<String> = Vec::new();
    for point in &results.points {
        for name in point.figures.iter().flat_map(|f| f.phases.keys()) {
            if !phase_names.contains(name) {
                phase_names.push(name.clone());
            }
        }
    }
    for (param, values) in &swept {
        parameter_charts(study, &configs, param, values, &phase_names, &mut sections);
    }
    sections.extend(llm_charts(&configs, classifier));
    share_charts(&configs, classifier, &mut sections);
    if let Some(section) = comm_vs_gpus_chart(study, results) {
        sections.push(section);
    }
    sections.extend(scaling_chart(study, results));
    sections
}

/// Milliseconds from nanoseconds, for axes.
fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// The charts against one swept parameter `param` (its `values`): step time, each phase's instance time, the LLM
/// latencies; one line per configuration of the other parameters.
fn parameter_charts(
    study: &Study,
    configs: &[(BTreeMap<String, String>, Vec<&PointResult>)],
    param: &str,
    values: &[String],
    phase_names: &[String],
    sections: &mut Vec<Section>,
) {
    // One line per configuration of the other parameters.
    let mut others: Vec<String> = Vec::new();
    for (params, _) in configs {
        let label = config_label(params, Some(param));
        if !others.contains(&label) {
            others.push(label);
        }
    }
    let step_lines =
        measure_lines(configs, param, values, &others, &|f| Some([f.step_p50_ns?, f.step_min_ns?, f.step_max_ns?]));
    if step_lines.iter().any(|l| l.points.iter().any(Option::is_some)) {
        sections.push(ms_section(
            param,
            values,
            format!(
                "Step time against {param}: the slowest rank's median step (median over repetitions), with \
                 the shortest to longest step of any rank and repetition; warm-up steps left out: {}.",
                study.file.warmup_steps
            ),
            format!("step_time_vs_{}", safe_id(param)),
            format!("Step time against {param}"),
            step_lines,
        ));
    }
    for phase in phase_names {
        let lines = measure_lines(configs, param, values, &others, &|f| f.phases.get(phase).copied());
        sections.push(ms_section(
            param,
            values,
            format!(
                "Time of one {phase} instance against {param}: the slowest rank's median, with the shortest \
                 to longest instance."
            ),
            format!("{}_vs_{}", safe_id(phase), safe_id(param)),
            format!("{phase} time against {param}"),
            lines,
        ));
    }
    for (phase, title) in LATENCY_PHASES {
        let lines = measure_lines(configs, param, values, &others, &|f| {
            let t = &f.latency.iter().find(|l| l.phase == phase && l.time.count > 0)?.time;
            Some([t.p50_ns, t.p50_ns, t.p90_ns])
        });
        if lines.iter().all(|l| l.points.iter().all(Option::is_none)) {
            continue;
        }
        sections.push(ms_section(
            param,
            values,
            format!(
                "{title} against {param}: the {phase} instance time after the warm-up on the slowest rank, \
                 median over repetitions of its p50, with the spread from the lowest p50 to the highest p90."
            ),
            format!("{}_vs_{}", latency_name(phase), safe_id(param)),
            format!("{title} against {param}"),
            lines,
        ));
    }
}

/// One line per configuration of the other parameters (`others`): the median over repetitions of what `pick` takes
/// from a point's figures (median, low, high, ns) at each value of `param`, with the spread.
fn measure_lines(
    configs: &[(BTreeMap<String, String>, Vec<&PointResult>)],
    param: &str,
    values: &[String],
    others: &[String],
    pick: &dyn Fn(&PointFigures) -> Option<[i64; 3]>,
) -> Vec<Line> {
    others
        .iter()
        .enumerate()
        .map(|(index, other)| Line {
            joined: true,
            label: other.clone(),
            color: charts::series_color(index),
            points: values
                .iter()
                .map(|value| {
                    let (_, list) = configs.iter().find(|(params, _)| {
                        params.get(param) == Some(value) && config_label(params, Some(param)) == *other
                    })?;
                    let picked: Vec<[i64; 3]> = list.iter().filter_map(|p| pick(p.figures.as_ref()?)).collect();
                    let value = median(picked.iter().map(|v| v[0]).collect())?;
                    Some(SeriesPoint {
                        value: ms(value),
                        low: ms(picked.iter().map(|v| v[1]).min()?),
                        high: ms(picked.iter().map(|v| v[2]).max()?),
                    })
                })
                .collect(),
        })
        .collect()
}

/// A chart of times in ms against the swept parameter, one line per series.
fn ms_section(
    param: &str,
    values: &[String],
    caption: String,
    name: String,
    title: String,
    lines: Vec<Line>,
) -> Section {
    Section {
        caption,
        chart: Chart {
            name,
            title,
            size_px: (1000, 440),
            kind: ChartKind::Series {
                x_labels: values.to_vec(),
                x_label: param.to_string(),
                y_label: "ms".into(),
                lines,
            },
        },
    }
}

/// Op shares and all-reduce share per configuration (summed over ranks and repetitions).
fn share_charts(
    configs: &[(BTreeMap<String, String>, Vec<&PointResult>)],
    classifier: &Classifier,
    sections: &mut Vec<Section>,
) {
    let analysed: Vec<(String, BTreeMap<String, i64>, Vec<f64>)> = configs
        .iter()
        .filter_map(|(params, list)| {
            let figures: Vec<&PointFigures> = list.iter().filter_map(|p| p.figures.as_ref()).collect();
            if figures.is_empty() {
                return None;
            }
            let mut categories: BTreeMap<String, i64> = BTreeMap::new();
            for f in &figures {
                for (label, ns) in &f.categories_ns {
                    *categories.entry(label.clone()).or_default() += ns;
                }
            }
            Some((config_label(params, None), categories, figures.iter().map(|f| f.all_reduce_pct).collect()))
        })
        .collect();
    if !analysed.is_empty() {
        let as_figures: Vec<report::Figures> = analysed
            .iter()
            .map(|(_, categories, _)| report::Figures { categories: categories.clone(), ..Default::default() })
            .collect();
        let order = html::category_order(as_figures.iter());
        let segments: Vec<Vec<Segment>> = analysed
            .iter()
            .map(|(_, categories, _)| html::category_share_segments(categories, &order, classifier))
            .collect();
        let columns: Vec<String> = analysed.iter().map(|(label, _, _)| label.clone()).collect();
        sections.push(Section {
            caption: "Share of summed GPU time per op category for each configuration (all ranks and repetitions); \
                      waiting for the last rank (wait.*) apart from transfer (comm.*)."
                .into(),
            chart: Chart {
                name: "shares".into(),
                title: "Op-category shares per configuration".into(),
                size_px: (columns_width_px(&columns), 480),
                kind: ChartKind::Stacked { columns: columns.clone(), segments, y_label: "% of GPU time".into() },
            },
        });
        let line = Line {
            joined: false,
            label: "all-reduce (wait + transfer)".into(),
            color: category_rgb(classifier),
            points: analysed
                .iter()
                .map(|(_, _, pcts)| {
                    let mut sorted = pcts.clone();
                    sorted.sort_by(f64::total_cmp);
                    Some(SeriesPoint {
                        value: sorted[(sorted.len() - 1) / 2],
                        low: sorted[0],
                        high: sorted[sorted.len() - 1],
                    })
                })
                .collect(),
        };
        sections.push(Section {
            caption: "All-reduce time (waiting and transfer) as a share of summed GPU time, per configuration: \
                      median over repetitions, with their range."
                .into(),
            chart: Chart {
                name: "all_reduce_share".into(),
                title: "All-reduce share per configuration".into(),
                size_px: (columns_width_px(&columns), 420),
                kind: ChartKind::Series {
                    x_labels: columns,
                    x_label: "configuration".into(),
                    y_label: "% of GPU time".into(),
                    lines: vec![line],
                },
            },
        });
    }
}

/// Scaling efficiency against the GPU count, one line per configuration, when the study has scaling figures.
fn scaling_chart(study: &Study, results: &StudyResults) -> Option<Section> {
    if !results.scaling.is_empty() {
        let mut counts: Vec<u32> = results.scaling.iter().flat_map(|s| [s.base_gpus, s.gpus]).collect();
        counts.sort_unstable();
        counts.dedup();
        let mut labels: Vec<&str> = results.scaling.iter().map(|s| s.config.as_str()).collect();
        labels.dedup();
        let lines = labels
            .iter()
            .enumerate()
            .map(|(index, config)| Line {
                joined: true,
                label: config.to_string(),
                color: charts::series_color(index),
                points: counts
                    .iter()
                    .map(|&n| {
                        let base = results.scaling.iter().find(|s| s.config == *config && s.base_gpus == n);
                        if base.is_some() {
                            return Some(SeriesPoint { value: 100.0, low: 100.0, high: 100.0 });
                        }
                        let s = results.scaling.iter().find(|s| s.config == *config && s.gpus == n)?;
                        Some(SeriesPoint { value: s.efficiency_pct, low: s.efficiency_pct, high: s.efficiency_pct })
                    })
                    .collect(),
            })
            .collect();
        let gpus = study.gpus.clone().unwrap_or_default();
        return Some(Section {
            caption: format!(
                "Scaling efficiency: speedup of the step time over the smallest {gpus} ÷ the ratio of GPU counts \
                 (100 % = linear)."
            ),
            chart: Chart {
                name: "scaling_efficiency".into(),
                title: format!("Scaling efficiency against {gpus}"),
                size_px: (1000, 420),
                kind: ChartKind::Series {
                    x_labels: counts.iter().map(u32::to_string).collect(),
                    x_label: gpus,
                    y_label: "% of linear".into(),
                    lines,
                },
            },
        });
    }
    None
}

/// The phases whose instance times are a latency an LLM server is judged by, with the latency's name.
pub const LATENCY_PHASES: [(&str, &str); 2] = [("prefill", "Time to first token"), ("decode", "Time per output token")];

/// The chart and JSON name of a phase's latency (`ttft`, `tpot`).
pub fn latency_name(phase: &str) -> &'static str {
    if phase == "prefill" { "ttft" } else { "tpot" }
}

fn median_f64(mut values: Vec<f64>) -> Option<SeriesPoint> {
    values.sort_by(f64::total_cmp);
    let value = *values.get(values.len().checked_sub(1)? / 2)?;
    Some(SeriesPoint { value, low: values[0], high: values[values.len() - 1] })
}

/// Phase names of the analysed points, in first-seen order (prefill before decode).
fn phases_of<'a>(points: impl Iterator<Item = &'a PointFigures>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for f in points {
        for name in f.phase_categories_ns.keys().chain(f.mfu.iter().map(|m| &m.phase)) {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    names.sort_by_key(|n| (n != "prefill", n != "decode", n.clone()));
    names
}

/// Communication share and exposed communication against the GPU count: per configuration of the other parameters,
/// one line each (median over repetitions, with their range), as percent of the summed GPU time of the ranks.
/// `None` without a GPU parameter or with one GPU count only.
fn comm_vs_gpus_chart(study: &Study, results: &StudyResults) -> Option<Section> {
    let gpus = study.gpus.as_ref()?;
    // (configuration without the GPU count) → GPU count → per repetition (communication %, exposed %).
    let mut groups: BTreeMap<String, BTreeMap<u32, Vec<(f64, f64)>>> = BTreeMap::new();
    for point in &results.points {
        let (Some(figures), Some(count)) =
            (point.figures.as_ref(), point.point.params.get(gpus).and_then(|v| v.parse::<u32>().ok()))
        else {
            continue;
        };
        let total: i64 = figures.categories_ns.values().sum();
        if total <= 0 {
            continue;
        }
        let comm_ns: i64 = figures
            .categories_ns
            .iter()
            .filter(|(label, _)| {
                label.starts_with(categories::COMM_PREFIX) || label.starts_with(categories::WAIT_PREFIX)
            })
            .map(|(_, ns)| ns)
            .sum();
        let pct = |ns: i64| 100.0 * ns as f64 / total as f64;
        let config = config_label(&point.point.params, Some(gpus));
        groups.entry(config).or_default().entry(count).or_default().push((pct(comm_ns), pct(figures.exposed_comm_ns)));
    }
    let counts: Vec<u32> = {
        let mut all: Vec<u32> = groups.values().flat_map(|by| by.keys().copied()).collect();
        all.sort_unstable();
        all.dedup();
        all
    };
    if counts.len() < 2 {
        return None;
    }
    let spread = |values: Vec<f64>| {
        let mut sorted = values;
        sorted.sort_by(f64::total_cmp);
        SeriesPoint { value: sorted[(sorted.len() - 1) / 2], low: sorted[0], high: sorted[sorted.len() - 1] }
    };
    let mut lines = Vec::new();
    for (index, (config, by_count)) in groups.iter().enumerate() {
        for (what, pick) in [("communication", 0usize), ("exposed", 1usize)] {
            lines.push(Line {
                joined: true,
                label: format!("{config} {what}"),
                color: charts::series_color(2 * index + pick),
                points: counts
                    .iter()
                    .map(|n| {
                        let values = by_count.get(n)?;
                        Some(spread(values.iter().map(|v| if pick == 0 { v.0 } else { v.1 }).collect()))
                    })
                    .collect(),
            });
        }
    }
    Some(Section {
        caption: format!(
            "Communication (collective kernels: transfer and waiting) and exposed communication (not overlapped by \
             computation) as a share of the ranks' summed GPU time, against {gpus}: median over repetitions, with \
             their range."
        ),
        chart: Chart {
            name: "comm_vs_gpus".into(),
            title: format!("Communication and exposed communication against {gpus}"),
            size_px: (720, 420),
            kind: ChartKind::Series {
                x_labels: counts.iter().map(u32::to_string).collect(),
                x_label: gpus.clone(),
                y_label: "% of GPU time".into(),
                lines,
            },
        },
    })
}

/// Per configuration: op shares per phase, MFU per phase, and the time of each layer per phase.
fn llm_charts(configs: &[(BTreeMap<String, String>, Vec<&PointResult>)], classifier: &Classifier) -> Vec<Section> {
    let mut sections = Vec::new();
    let analysed: Vec<(String, Vec<&PointFigures>)> = configs
        .iter()
        .map(|(params, list)| (config_label(params, None), list.iter().filter_map(|p| p.figures.as_ref()).collect()))
        .filter(|(_, f): &(String, Vec<&PointFigures>)| !f.is_empty())
        .collect();
    let phases = phases_of(analysed.iter().flat_map(|(_, f)| f.iter().copied()));

    share_by_phase_chart(&analysed, &phases, classifier, &mut sections);
    mfu_chart(&analysed, &phases, &mut sections);
    layer_charts(&analysed, &phases, &mut sections);
    sections
}

/// Op shares per configuration and phase.
fn share_by_phase_chart(
    analysed: &[(String, Vec<&PointFigures>)],
    phases: &[String],
    classifier: &Classifier,
    sections: &mut Vec<Section>,
) {
    let mut columns = Vec::new();
    let mut summed: Vec<BTreeMap<String, i64>> = Vec::new();
    for (label, figures) in analysed {
        for phase in phases {
            let mut categories: BTreeMap<String, i64> = BTreeMap::new();
            for f in figures {
                for (category, ns) in f.phase_categories_ns.get(phase).into_iter().flatten() {
                    *categories.entry(category.clone()).or_default() += ns;
                }
            }
            if !categories.is_empty() {
                columns.push(format!("{label} · {phase}"));
                summed.push(categories);
            }
        }
    }
    if !columns.is_empty() {
        let as_figures: Vec<report::Figures> =
            summed.iter().map(|c| report::Figures { categories: c.clone(), ..Default::default() }).collect();
        let order = html::category_order(as_figures.iter());
        let segments =
            summed.iter().map(|categories| html::category_share_segments(categories, &order, classifier)).collect();
        sections.push(Section {
            caption: "Share of summed GPU time per op category in each phase of each configuration (all ranks and \
                      repetitions): what prefill and decode spend their time on as the configuration changes."
                .into(),
            chart: Chart {
                name: "phase_shares".into(),
                title: "Op-category shares per configuration and phase".into(),
                size_px: (columns_width_px(&columns), 480),
                kind: ChartKind::Stacked { columns, segments, y_label: "% of GPU time".into() },
            },
        });
    }
}

/// MFU per configuration, one line per phase.
fn mfu_chart(analysed: &[(String, Vec<&PointFigures>)], phases: &[String], sections: &mut Vec<Section>) {
    let x_labels: Vec<String> = analysed.iter().map(|(label, _)| label.clone()).collect();
    let lines: Vec<Line> = phases
        .iter()
        .enumerate()
        .map(|(index, phase)| Line {
            joined: false,
            label: format!("{phase} MFU"),
            color: charts::series_color(index + 2),
            points: analysed
                .iter()
                .map(|(_, figures)| {
                    median_f64(
                        figures.iter().filter_map(|f| f.mfu.iter().find(|m| m.phase == *phase)?.mfu_pct).collect(),
                    )
                })
                .collect(),
        })
        .filter(|l: &Line| l.points.iter().any(Option::is_some))
        .collect();
    if !lines.is_empty() {
        sections.push(Section {
            caption: "Model FLOPs utilisation per phase: the model FLOPs of one instance ÷ its time (slowest rank, \
                      after the warm-up) ÷ (the GPU's peak × GPUs); median over repetitions with their range. The \
                      peak is bench's measured GEMM peak where given, else the datasheet figure of the study file."
                .into(),
            chart: Chart {
                name: "mfu".into(),
                title: "MFU per configuration and phase".into(),
                size_px: (columns_width_px(&x_labels), 420),
                kind: ChartKind::Series {
                    x_labels: x_labels.clone(),
                    x_label: "configuration".into(),
                    y_label: "% of peak".into(),
                    lines,
                },
            },
        });
    }
}

/// Time per layer: rows are configurations, columns layers.
fn layer_charts(analysed: &[(String, Vec<&PointFigures>)], phases: &[String], sections: &mut Vec<Section>) {
    for phase in phases {
        let rows: Vec<(String, Vec<Option<f64>>)> = analysed
            .iter()
            .filter_map(|(label, figures)| {
                let tables: Vec<&crate::llm::layers::PhaseLayers> =
                    figures.iter().filter_map(|f| f.layers.iter().find(|l| l.phase == *phase)).collect();
                let layers = tables.first()?.layers;
                let cells = (0..layers)
                    .map(|layer| {
                        let totals: Vec<i64> = tables
                            .iter()
                            .filter(|t| t.layers == layers)
                            .map(|t| t.time_ns[layer].iter().sum())
                            .collect();
                        median(totals).map(|ns| ns as f64 / 1e3)
                    })
                    .collect();
                Some((label.clone(), cells))
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        let width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
        sections.push(Section {
            caption: format!(
                "Kernel time of each layer in one {phase} instance (all op categories; mean over ranks and \
                 instances after the warm-up, median over repetitions). Layers come from layer ranges, or else \
                 from the repeating kernel sequence (inferred); the per-category split is in study.json `layers`."
            ),
            chart: Chart {
                name: format!("layers_{}", safe_id(phase)),
                title: format!("Time per layer in {phase}"),
                size_px: ((400 + 40 * width as u32).clamp(800, 2400), (140 + 36 * rows.len() as u32).clamp(260, 2400)),
                kind: ChartKind::Heatmap {
                    rows: rows.iter().map(|r| r.0.clone()).collect(),
                    x_label: "layer".into(),
                    cells: rows.into_iter().map(|r| r.1).collect(),
                    unit: "µs".into(),
                },
            },
        });
    }
}

/// Width of a chart with one slot per label: wide enough for the longest label (about 7 px a character).
fn columns_width_px(labels: &[String]) -> u32 {
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0) as u32;
    (300 + (7 * longest + 16).max(90) * labels.len() as u32).clamp(900, 6000)
}

fn category_rgb(classifier: &Classifier) -> [u8; 3] {
    charts::category_color(classifier, "comm.all_reduce")
}

fn median_of(values: Vec<f64>) -> Option<f64> {
    median_f64(values).map(|p| p.value)
}

fn ms_text(ns: Option<i64>) -> String {
    ns.map_or_else(|| "–".into(), crate::output::render::duration)
}

/// The tables LLM scaling studies show, per configuration (medians over repetitions): latency (step, time to first
/// token, time per output token) and all-reduce share; op shares per phase; scaling; MFU per phase; layers.
pub fn study_tables(results: &StudyResults) -> Vec<Table> {
    let configs = configurations(&results.points);
    let analysed: Vec<(String, Vec<&PointFigures>)> = configs
        .iter()
        .map(|(params, list)| (config_label(params, None), list.iter().filter_map(|p| p.figures.as_ref()).collect()))
        .collect();
    let phases = phases_of(analysed.iter().flat_map(|(_, f)| f.iter().copied()));
    let mut tables = Vec::new();

    latency_table(&analysed, &mut tables);
    share_table(&analysed, &phases, &mut tables);
    scaling_table(results, &mut tables);
    mfu_table(&analysed, &phases, &mut tables);
    layer_table(&analysed, &phases, &mut tables);
    tables
}

/// Latency per configuration: step time, TTFT and TPOT, all-reduce share.
fn latency_table(analysed: &[(String, Vec<&PointFigures>)], tables: &mut Vec<Table>) {
    let latency = |figures: &[&PointFigures], phase: &str, p90: bool| {
        median(
            figures
                .iter()
                .filter_map(|f| {
                    let t = &f.latency.iter().find(|l| l.phase == phase && l.time.count > 0)?.time;
                    Some(if p90 { t.p90_ns } else { t.p50_ns })
                })
                .collect(),
        )
    };
    tables.push(Table {
        title: "Latency per configuration (median over repetitions; TTFT = prefill, TPOT = decode instance time \
                after the warm-up, slowest rank)"
            .into(),
        header: ["configuration", "runs", "step p50", "TTFT p50", "TTFT p90", "TPOT p50", "TPOT p90", "all-reduce"]
            .map(String::from)
            .to_vec(),
        rows: analysed
            .iter()
            .map(|(label, figures)| {
                vec![
                    label.clone(),
                    figures.len().to_string(),
                    ms_text(median(figures.iter().filter_map(|f| f.step_p50_ns).collect())),
                    ms_text(latency(figures, "prefill", false)),
                    ms_text(latency(figures, "prefill", true)),
                    ms_text(latency(figures, "decode", false)),
                    ms_text(latency(figures, "decode", true)),
                    median_of(figures.iter().map(|f| f.all_reduce_pct).collect())
                        .map_or_else(|| "–".into(), |p| format!("{p:.1} %")),
                ]
            })
            .collect(),
    });
}

/// The top op categories per configuration and phase.
fn share_table(analysed: &[(String, Vec<&PointFigures>)], phases: &[String], tables: &mut Vec<Table>) {
    let mut shares = Vec::new();
    for (label, figures) in analysed {
        for phase in phases {
            let mut categories: BTreeMap<&str, i64> = BTreeMap::new();
            for f in figures {
                for (category, ns) in f.phase_categories_ns.get(phase).into_iter().flatten() {
                    *categories.entry(category).or_default() += ns;
                }
            }
            let total: i64 = categories.values().sum();
            if total <= 0 {
                continue;
            }
            let mut list: Vec<(&str, i64)> = categories.into_iter().filter(|c| c.1 > 0).collect();
            list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            let top: Vec<String> =
                list.iter().take(5).map(|(c, ns)| format!("{c} {:.1} %", 100.0 * *ns as f64 / total as f64)).collect();
            shares.push(vec![label.clone(), phase.clone(), top.join(", ")]);
        }
    }
    if !shares.is_empty() {
        tables.push(Table {
            title: "Op shares per configuration and phase (summed GPU time of all ranks and repetitions)".into(),
            header: ["configuration", "phase", "top categories"].map(String::from).to_vec(),
            rows: shares,
        });
    }
}

/// Scaling from the smallest GPU count, when the study has scaling figures.
fn scaling_table(results: &StudyResults, tables: &mut Vec<Table>) {
    if !results.scaling.is_empty() {
        tables.push(Table {
            title:
                "Scaling from the smallest GPU count: speedup and efficiency of the step time, of the time to first \
                    token and of the time per output token"
                    .into(),
            header: [
                "configuration",
                "GPUs",
                "step p50",
                "speedup",
                "efficiency",
                "TTFT",
                "TTFT eff.",
                "TPOT",
                "TPOT eff.",
            ]
            .map(String::from)
            .to_vec(),
            rows: results
                .scaling
                .iter()
                .map(|s| {
                    let phase = |name: &str, efficiency: bool| {
                        s.phases.get(name).map_or("–".into(), |p| {
                            if efficiency {
                                format!("{:.1} %", p.efficiency_pct)
                            } else {
                                format!("{:.2}×", p.speedup)
                            }
                        })
                    };
                    vec![
                        s.config.clone(),
                        format!("{} → {}", s.base_gpus, s.gpus),
                        format!(
                            "{} → {}",
                            crate::output::render::duration(s.base_step_ns),
                            crate::output::render::duration(s.step_ns)
                        ),
                        format!("{:.2}×", s.speedup),
                        format!("{:.1} %", s.efficiency_pct),
                        phase("prefill", false),
                        phase("prefill", true),
                        phase("decode", false),
                        phase("decode", true),
                    ]
                })
                .collect(),
        });
    }
}

/// Achieved FLOP/s and MFU per configuration and phase.
fn mfu_table(analysed: &[(String, Vec<&PointFigures>)], phases: &[String], tables: &mut Vec<Table>) {
    let mut mfu_rows = Vec::new();
    for (label, figures) in analysed {
        for phase in phases {
            let list: Vec<&crate::report::mfu::PhaseMfu> =
                figures.iter().filter_map(|f| f.mfu.iter().find(|m| m.phase == *phase)).collect();
            let Some(first) = list.first() else { continue };
            let why = list.iter().find_map(|m| m.inconsistent.clone());
            mfu_rows.push(vec![
                label.clone(),
                phase.clone(),
                format!("{}", first.tokens_per_instance),
                format!("{:.1}", first.flops_per_instance / 1e9),
                ms_text(median(list.iter().map(|m| m.instance_p50_ns).collect())),
                median_of(list.iter().map(|m| m.achieved_tflops).collect()).map_or("–".into(), |t| format!("{t:.1}")),
                median_of(list.iter().filter_map(|m| m.mfu_pct).collect())
                    .map_or("–".into(), |p| format!("{p:.1} %")),
                first.peak.as_ref().map_or("–".into(), |p| format!("{:.0} ({})", p.tflops, p.kind)),
                why.unwrap_or_default(),
            ]);
        }
    }
    if !mfu_rows.is_empty() {
        tables.push(
            Table {
                title:
                    "Achieved FLOP/s and MFU per phase (model FLOPs of one instance ÷ its time; MFU against the peak \
                    of one GPU × GPUs; median over repetitions)"
                        .into(),
                header: [
                    "configuration",
                    "phase",
                    "tokens",
                    "GFLOP",
                    "time p50",
                    "TFLOP/s",
                    "MFU",
                    "peak TFLOP/s",
                    "why no MFU",
                ]
                .map(String::from)
                .to_vec(),
                rows: mfu_rows,
            }
            .without_empty_last_column(),
        );
    }
}

/// Layers per phase instance of each configuration.
fn layer_table(analysed: &[(String, Vec<&PointFigures>)], phases: &[String], tables: &mut Vec<Table>) {
    let mut layer_rows = Vec::new();
    for (label, figures) in analysed {
        for phase in phases {
            let Some(table) = figures.iter().find_map(|f| f.layers.iter().find(|l| l.phase == *phase)) else {
                continue;
            };
            let totals: Vec<i64> = table.time_ns.iter().map(|row| row.iter().sum()).collect();
            let mean = totals.iter().sum::<i64>() / totals.len().max(1) as i64;
            let (min, max) = (totals.iter().min().copied(), totals.iter().max().copied());
            layer_rows.push(vec![
                label.clone(),
                phase.clone(),
                format!("{} ({})", table.layers, table.source),
                crate::output::render::duration(mean),
                format!("{} – {}", ms_text(min), ms_text(max)),
                table.ops.first().cloned().unwrap_or_default(),
            ]);
        }
    }
    if !layer_rows.is_empty() {
        tables.push(Table {
            title: "Layers per phase instance (first analysed repetition; kernel time per layer)".into(),
            header: ["configuration", "phase", "layers", "per layer", "range", "top category"]
                .map(String::from)
                .to_vec(),
            rows: layer_rows,
        });
    }
}

/// The study's tables as text, for the terminal and `study.txt`.
pub fn study_text(results: &StudyResults) -> String {
    let mut out = format!("study {}\n\n", results.study);
    for table in study_tables(results) {
        out += &table.text();
        out.push('\n');
    }
    out
}

/// The study's HTML page.
pub fn study_page(study: &Study, results: &StudyResults, sections: &[Section]) -> Result<String, html::PageError> {
    let mut page = html::page_start(&format!("shardscope study {}", study.name));
    let _ = writeln!(page, "<h1>Study {}</h1>", escape(&study.name));
    let _ = writeln!(page, "<p>Command: <code>{}</code></p>", escape(&study.file.redacted().command));
    let grid: Vec<String> = study
        .file
        .grid
        .iter()
        .map(|(k, v)| format!("{k} = [{}]", v.iter().filter_map(value_text).collect::<Vec<_>>().join(", ")))
        .collect();
    let _ = writeln!(
        page,
        "<p>Grid: <code>{}</code>; repetitions: {}; warm-up steps left out: {}</p>",
        escape(&grid.join("; ")),
        study.file.repetitions,
        study.file.warmup_steps
    );
    page.push_str(
        "<h2>Points</h2>\n<table>\n<tr><th class=\"l\">configuration</th><th>rep</th><th class=\"l\">status</th>\
         <th>ranks</th><th>step p50</th><th>all-reduce</th><th>wait</th><th>transfer</th></tr>\n",
    );
    for point in &results.points {
        let status = match (&point.run, point.status) {
            (Some(run), "failed") => format!("failed: {}", run.describe()),
            (_, "unreadable") => format!("unreadable: {}", point.error.clone().unwrap_or_default()),
            (_, status) => status.to_string(),
        };
        let f = point.figures.as_ref();
        let cell = |v: Option<String>| v.unwrap_or_else(|| "–".into());
        let _ = writeln!(
            page,
            "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td></tr>",
            escape(&point.point.config()),
            point.point.rep,
            escape(&status),
            cell(f.map(|f| f.ranks.to_string())),
            cell(f.and_then(|f| f.step_p50_ns).map(crate::output::render::duration)),
            cell(f.map(|f| format!("{:.1} %", f.all_reduce_pct))),
            cell(f.map(|f| crate::output::render::duration(f.comm_wait_ns))),
            cell(f.map(|f| crate::output::render::duration(f.comm_transfer_ns))),
        );
    }
    page.push_str("</table>\n");
    for table in study_tables(results) {
        page.push_str(&table.html());
    }
    for section in sections {
        page.push_str(&html::chart_section(section)?);
    }
    page.push_str(html::page_end());
    Ok(page)
}

/// Runs (unless `analyse_only`) and analyses a study; writes `study.json`, `study.html` and `charts/`.
pub fn run_study(
    study: &Study,
    options: &RunOptions,
    analyse_only: bool,
    log: &mut dyn std::io::Write,
) -> Result<StudyResults, StudyError> {
    let statuses: Vec<Option<RunStatus>> = if analyse_only {
        study.points.iter().map(|p| read_status(&study.status_path(p))).collect()
    } else {
        run_points(study, options, log)?.into_iter().map(Some).collect()
    };
    let classifier = Classifier::builtin();
    let bench = match &study.file.bench {
        Some(path) => Some(
            BenchPeaks::load(&study.base_dir.join(path))
                .map_err(|error| StudyError::Bench { path: study.path.clone(), error })?,
        ),
        None => None,
    };
    let peak = match &study.file.model {
        Some(model) => crate::report::mfu::peak(
            study.file.bench.as_ref().map(|b| study.base_dir.join(b)).as_deref(),
            model,
            &format!("datasheet peak_tflops of {}", study.path.display()),
        )
        .map_err(|error| StudyError::Peak { path: study.path.clone(), error })?,
        None => None,
    };
    let results = analyse(study, &statuses, &classifier, bench.as_ref(), peak.as_ref());
    let sections = study_charts(study, &results, &classifier);
    let write = |path: PathBuf, bytes: &[u8]| shardscope_io::output::write_output(&path, bytes);
    let json = serde_json::to_string_pretty(&results)? + "\n";
    study.check_out_dir()?;
    std::fs::create_dir_all(&study.out_dir)
        .map_err(|error| StudyError::CreateDir { path: study.out_dir.clone(), error })?;
    write(study.out_dir.join("study.json"), json.as_bytes())?;
    html::write_chart_files(&study.out_dir.join("charts"), &sections)?;
    write(study.out_dir.join("study.html"), study_page(study, &results, &sections)?.as_bytes())?;
    write(study.out_dir.join("study.txt"), study_text(&results).as_bytes())?;
    let failed = results.points.iter().filter(|p| p.status != "ok").count();
    let _ = writeln!(
        log,
        "study: {} of {} points analysed{}; wrote {}",
        results.points.len() - failed,
        results.points.len(),
        if failed > 0 { format!(", {failed} failed or not run") } else { String::new() },
        study.out_dir.join("study.html").display()
    );
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// Any study file, well-formed TOML or not, is read or refused with one line naming it; never a panic,
        /// and never more points than the bound.
        #[test]
        fn any_study_file_loads_or_is_one_line(
            command in "[a-z {}|;'\"$]{0,30}",
            values in proptest::collection::vec(0u32..5000, 0..4),
            repetitions in proptest::prop_oneof![proptest::strategy::Just(u32::MAX), 0u32..5000],
            noise in "\\PC{0,20}",
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.toml");
            let grid: String = values.iter().enumerate().map(|(i, &n)| {
                format!("P{i} = [{}]\n", (0..n).map(|v| v.to_string()).collect::<Vec<_>>().join(","))
            }).collect();
            let text = format!(
                "command = {}\nrepetitions = {repetitions}\n{noise}\n[grid]\n{grid}",
                toml::Value::from(command.as_str())
            );
            std::fs::write(&path, text).unwrap();
            match Study::load(&path, None) {
                Ok(study) => proptest::prop_assert!(study.points.len() as u64 <= MAX_RUNS),
                Err(error) => {
                    let error = error.to_string();
                    proptest::prop_assert!(error.starts_with(&path.display().to_string()), "{}", error);
                    proptest::prop_assert!(!error.contains('\n'), "{}", error);
                }
            }
        }
    }

    #[test]
    fn placeholders_expand_and_unknown_ones_are_refused() {
        let values = |name: &str| (name == "SEQ").then(|| "128".to_string());
        assert_eq!(expand("run --seq {SEQ} {{literal}}", &values).unwrap(), "run --seq 128 {literal}");
        assert_eq!(expand("x {NOPE}", &values).unwrap_err().to_string(), "unknown parameter {NOPE}");
        assert!(expand("x {SEQ", &values).unwrap_err().to_string().starts_with("unclosed"));
        assert!(expand("x }", &values).is_err());
    }

    #[test]
    fn values_that_are_not_plain_words_are_quoted_for_the_shell() {
        assert_eq!(shell_word("128"), "128");
        assert_eq!(shell_word("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word("$(rm -rf x)"), "'$(rm -rf x)'");
    }
}
