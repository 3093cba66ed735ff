//! Achieved FLOP/s and model FLOPs utilisation (MFU) per phase of an LLM run, from the model's shape, the tokens
//! one phase instance processes and the instance's measured time.
//!
//! The model FLOPs of one token (forward pass only) are
//!
//! ```text
//! flops_per_token = 2 × N  +  4 × layers × hidden × context
//! ```
//!
//! where N is the number of weights each token is multiplied by (every layer's q, k, v and output projections,
//! 4·hidden², and its gated MLP, 3·hidden·ffn, plus the output head, vocab·hidden, when the vocabulary is given; the
//! embedding lookup costs no FLOPs), or the study's `parameters` when given; and `context` is the mean number of
//! keys a token attends to: QKᵀ and the attention-weighted sum of V cost 2·hidden·context each per layer. Prefill of
//! `seq` tokens under a causal mask attends to (seq + 1) / 2 keys on average; decode step t (from 0) attends to
//! seq + t + 1, so (seq + (decode_steps + 1) / 2) on average over the decode steps. Without layers and hidden (or
//! without the sequence length) the attention term is left out, and the figure says so.
//!
//! Achieved FLOP/s = FLOPs of one instance ÷ the slowest rank's median instance time; MFU = achieved ÷ (peak per
//! GPU × GPUs). The peak is the best GEMM throughput `bench` measured for the dtype when its results are given,
//! else the datasheet figure from the study file or `--model peak_tflops=…`.
//!
//! An MFU above 100 % of a *measured* peak cannot be true: the model shape or the token counts do not describe the
//! run. Such a figure is never reported: the phase is marked `inconsistent` with the implied throughput instead.
//! The same holds when the FLOPs of all instances ÷ the GPUs' busy time in the phase exceed the peak: the GPUs
//! could not have done that many FLOPs while they were busy.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use shardscope_bench::results::BenchResults;

use crate::report::Report;

/// A model's shape, as the study file's `[model]` table or `--model KEY=VALUE,…` gives it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelShape {
    /// Weights each token is multiplied by (non-embedding parameters, plus the output head).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<f64>,
    /// Transformer layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<u32>,
    /// Hidden size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<u32>,
    /// Attention heads (kept for readers; the FLOPs do not depend on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heads: Option<u32>,
    /// MLP inner size (gated MLP: gate, up and down projections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ffn: Option<u32>,
    /// Vocabulary size: adds the output head's vocab × hidden weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab: Option<u32>,
    /// Data type of the matrix products (`bf16`, `fp16`, `fp8`, …); default bf16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// Datasheet peak of one GPU for `dtype` (dense), TFLOP/s; used when no `bench` results are given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_tflops: Option<f64>,
}

impl ModelShape {
    /// The data type, default `bf16`.
    pub fn dtype(&self) -> &str {
        self.dtype.as_deref().unwrap_or("bf16")
    }

    /// N of `2 × N` FLOPs per token: `parameters` when given, else computed from the layer shapes.
    pub fn weights(&self) -> Option<f64> {
        if let Some(n) = self.parameters {
            return Some(n);
        }
        let (layers, hidden, ffn) = (f64::from(self.layers?), f64::from(self.hidden?), f64::from(self.ffn?));
        let head = self.vocab.map_or(0.0, |v| f64::from(v) * hidden);
        Some(layers * (4.0 * hidden * hidden + 3.0 * hidden * ffn) + head)
    }

    /// FLOPs of one token's forward pass attending to `context` keys on average (the attention term only when the
    /// context, layers and hidden are known). Also says whether the attention term is in.
    pub fn flops_per_token(&self, context: Option<f64>) -> Option<(f64, bool)> {
        let dense = 2.0 * self.weights()?;
        match (context, self.layers, self.hidden) {
            (Some(c), Some(l), Some(h)) => Some((dense + 4.0 * f64::from(l) * f64::from(h) * c, true)),
            _ => Some((dense, false)),
        }
    }

    /// Parses `parameters=1.6e9,layers=8,hidden=4096,ffn=11008,heads=32,vocab=32000,dtype=bf16,peak_tflops=989`.
    pub fn parse(text: &str) -> Result<ModelShape, ShapeError> {
        let mut shape = ModelShape::default();
        for (key, value) in pairs(text)? {
            let pair = || (key.to_string(), value.to_string());
            let count = || value.parse::<u32>().map_err(|_| ShapeError::NotWhole(pair().0, pair().1));
            let real = || match value.parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
                _ => Err(ShapeError::NotPositive(pair().0, pair().1)),
            };
            match key {
                "parameters" => shape.parameters = Some(real()?),
                "layers" => shape.layers = Some(count()?),
                "hidden" => shape.hidden = Some(count()?),
                "heads" => shape.heads = Some(count()?),
                "ffn" => shape.ffn = Some(count()?),
                "vocab" => shape.vocab = Some(count()?),
                "dtype" => shape.dtype = Some(value.to_string()),
                "peak_tflops" => shape.peak_tflops = Some(real()?),
                _ => return Err(ShapeError::UnknownModelKey(key.to_string())),
            }
        }
        shape.check()?;
        Ok(shape)
    }

    /// A shape that gives no FLOPs is refused.
    pub fn check(&self) -> Result<(), ShapeError> {
        if self.weights().is_none() {
            return Err(ShapeError::NoFlops);
        }
        for (key, value) in [("layers", self.layers), ("hidden", self.hidden), ("ffn", self.ffn)] {
            if value == Some(0) {
                return Err(ShapeError::Zero(key));
            }
        }
        if self.parameters.is_some_and(|p| !(p.is_finite() && p > 0.0)) {
            return Err(ShapeError::NotPositiveField("parameters"));
        }
        if self.peak_tflops.is_some_and(|p| !(p.is_finite() && p > 0.0)) {
            return Err(ShapeError::NotPositiveField("peak_tflops"));
        }
        Ok(())
    }
}

/// The tokens of an LLM inference run: prefill of `batch × seq` tokens per instance, decode of `batch` tokens per
/// step (instance).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tokens {
    /// Sequences per batch.
    pub batch: f64,
    /// Prompt length, tokens.
    pub seq: Option<f64>,
    /// Decode steps after each prefill (for the decode context).
    pub decode_steps: Option<f64>,
}

impl Tokens {
    /// Parses `batch=4,seq=1024,decode_steps=32`.
    pub fn parse(text: &str) -> Result<Tokens, ShapeError> {
        let mut values: BTreeMap<&str, f64> = BTreeMap::new();
        for (key, value) in pairs(text)? {
            if !["batch", "seq", "decode_steps"].contains(&key) {
                return Err(ShapeError::UnknownTokensKey(key.to_string()));
            }
            match value.parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => values.insert(key, v),
                _ => return Err(ShapeError::NotPositive(key.to_string(), value.to_string())),
            };
        }
        let batch = *values.get("batch").ok_or(ShapeError::NoBatch)?;
        Ok(Tokens { batch, seq: values.get("seq").copied(), decode_steps: values.get("decode_steps").copied() })
    }

    /// Tokens one instance of the phase processes and the mean context per token; `None` for other phases.
    pub fn of_phase(&self, phase: &str) -> Option<(f64, Option<f64>)> {
        match phase {
            "prefill" => Some((self.batch * self.seq?, self.seq.map(|s| (s + 1.0) / 2.0))),
            "decode" => Some((self.batch, self.seq.map(|s| s + (self.decode_steps.unwrap_or(1.0) + 1.0) / 2.0))),
            _ => None,
        }
    }
}

fn pairs(text: &str) -> Result<Vec<(&str, &str)>, ShapeError> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').ok_or_else(|| ShapeError::NotPair(p.trim().to_string()))?;
            Ok((k.trim(), v.trim()))
        })
        .collect()
}

/// Why a `--model` or `--tokens` text (or a study's `model`/`tokens`) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// A comma-separated part without `=`.
    #[error("'{0}' is not KEY=VALUE")]
    NotPair(String),
    /// A count that is not a whole number: (key, value).
    #[error("{0}={1}: not a whole number")]
    NotWhole(String, String),
    /// A real that is not a positive number: (key, value).
    #[error("{0}={1}: not a positive number")]
    NotPositive(String, String),
    /// A key the model shape does not have.
    #[error("unknown key '{0}' (parameters, layers, hidden, heads, ffn, vocab, dtype, peak_tflops)")]
    UnknownModelKey(String),
    /// A key the token counts do not have.
    #[error("unknown key '{0}' (batch, seq, decode_steps)")]
    UnknownTokensKey(String),
    /// Neither the parameter count nor the layer sizes are given.
    #[error("the model needs `parameters`, or `layers`, `hidden` and `ffn`")]
    NoFlops,
    /// A layer size of 0.
    #[error("{0} must be positive")]
    Zero(&'static str),
    /// A real field set to something that is not a positive number.
    #[error("{0} must be a positive number")]
    NotPositiveField(&'static str),
    /// The token counts lack the batch size.
    #[error("`batch` is needed")]
    NoBatch,
}

/// A `bench` results file that could not be read for the GEMM peak. The text is one line naming the file.
#[derive(Debug, thiserror::Error)]
#[error("{}", format!("{}: {error}", path.display()).replace('\n', " "))]
pub struct BenchError {
    /// The results file.
    pub path: std::path::PathBuf,
    /// Why it could not be read.
    pub error: Box<shardscope_bench::results::Error>,
}

/// Why no MFU is given although a peak is: the shape or token counts cannot describe the run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Inconsistent {
    /// The utilisation is not a finite number ≥ 0.
    #[error("no finite utilisation from {achieved_tflops} TFLOP/s on {gpus} GPU(s)")]
    NotFinite {
        /// The achieved throughput, TFLOP/s.
        achieved_tflops: f64,
        /// GPUs of the run.
        gpus: u32,
    },
    /// More than the peak of all GPUs together.
    #[error(
        "the model FLOPs imply {achieved_tflops:.1} TFLOP/s on {gpus} GPU(s), {pct:.0} % of the peak: the model \
         shape or token counts do not describe this run"
    )]
    AbovePeak {
        /// The achieved throughput, TFLOP/s.
        achieved_tflops: f64,
        /// GPUs of the run.
        gpus: u32,
        /// The utilisation it gives, percent.
        pct: f64,
    },
    /// More than the peak of one GPU while busy.
    #[error(
        "the model FLOPs imply {busy_tflops:.1} TFLOP/s per GPU while busy, above the peak {peak_tflops:.1}: the \
         model shape or token counts do not describe this run"
    )]
    BusyAbovePeak {
        /// The throughput while busy, TFLOP/s per GPU.
        busy_tflops: f64,
        /// The peak of one GPU, TFLOP/s.
        peak_tflops: f64,
    },
}

/// The peak one GPU can do, and where the figure came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Peak {
    /// TFLOP/s of one GPU.
    pub tflops: f64,
    /// `bench` (measured) or `datasheet` (given).
    pub kind: &'static str,
    /// What exactly: the bench file and GEMM shape, or the study file.
    pub source: String,
}

/// The best GEMM throughput of `dtype` in `bench` results, TFLOP/s.
pub fn measured_gemm_peak(results: &BenchResults, dtype: &str, source: &str) -> Option<Peak> {
    let best = results
        .gemm
        .iter()
        .filter(|g| g.dtype.eq_ignore_ascii_case(dtype) && g.tflops.is_finite() && g.tflops > 0.0)
        .max_by(|a, b| a.tflops.total_cmp(&b.tflops))?;
    Some(Peak {
        tflops: best.tflops,
        kind: "bench",
        source: format!("{source}: {dtype} GEMM {}×{}×{} on GPU {}", best.m, best.n, best.k, best.gpu),
    })
}

/// The peak to divide by: measured by `bench` when its results are given (and have the dtype), else the datasheet.
pub fn peak(bench: Option<&Path>, shape: &ModelShape, datasheet_source: &str) -> Result<Option<Peak>, BenchError> {
    if let Some(path) = bench {
        let results = BenchResults::load(path)
            .map_err(|error| BenchError { path: path.to_path_buf(), error: Box::new(error) })?;
        if let Some(p) = measured_gemm_peak(&results, shape.dtype(), &path.display().to_string()) {
            return Ok(Some(p));
        }
    }
    Ok(shape.peak_tflops.map(|tflops| Peak { tflops, kind: "datasheet", source: datasheet_source.to_string() }))
}

/// Achieved FLOP/s and MFU of one phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseMfu {
    /// Phase name (`prefill`, `decode`).
    pub phase: String,
    /// Tokens of one instance.
    pub tokens_per_instance: f64,
    /// Mean keys each token attends to, when known.
    pub context_per_token: Option<f64>,
    /// Whether the attention term is in the FLOPs.
    pub attention_counted: bool,
    /// Model FLOPs of one token.
    pub flops_per_token: f64,
    /// Model FLOPs of one instance.
    pub flops_per_instance: f64,
    /// The slowest rank's median instance time.
    pub instance_p50_ns: i64,
    /// GPUs (ranks) the instance ran on.
    pub gpus: u32,
    /// Model FLOPs of one instance ÷ its time, TFLOP/s (all GPUs together).
    pub achieved_tflops: f64,
    /// FLOPs of all instances ÷ the GPUs' summed busy time in the phase, TFLOP/s per GPU.
    pub busy_tflops_per_gpu: Option<f64>,
    /// The peak of one GPU.
    pub peak: Option<Peak>,
    /// achieved ÷ (peak × GPUs), percent; absent without a peak or when inconsistent.
    pub mfu_pct: Option<f64>,
    /// Why no MFU is given although a peak is: the shape or token counts cannot describe the run.
    pub inconsistent: Option<String>,
}

/// MFU from its parts, or why it cannot be true. `busy_tflops_per_gpu` is the throughput the GPUs would have had
/// while busy. A result is never above 100 %.
pub fn utilisation(
    achieved_tflops: f64,
    gpus: u32,
    busy_tflops_per_gpu: Option<f64>,
    peak_tflops: f64,
) -> Result<f64, Inconsistent> {
    let capacity = peak_tflops * f64::from(gpus.max(1));
    let pct = 100.0 * achieved_tflops / capacity;
    if !pct.is_finite() || pct < 0.0 {
        return Err(Inconsistent::NotFinite { achieved_tflops, gpus });
    }
    if pct > 100.0 {
        return Err(Inconsistent::AbovePeak { achieved_tflops, gpus, pct });
    }
    if let Some(busy) = busy_tflops_per_gpu.filter(|b| *b > peak_tflops) {
        return Err(Inconsistent::BusyAbovePeak { busy_tflops: busy, peak_tflops });
    }
    Ok(pct)
}

/// Per phase with known tokens (prefill, decode): achieved FLOP/s and MFU from the report's instance times, or
/// from `instance_p50_ns` where it names the phase (the slowest rank's median after the warm-up).
pub fn phase_mfu(
    report: &Report,
    shape: &ModelShape,
    tokens: &Tokens,
    peak: Option<&Peak>,
    instance_p50_ns: &BTreeMap<String, i64>,
) -> Vec<PhaseMfu> {
    let mut names: Vec<&str> = Vec::new();
    for rank in &report.ranks {
        for phase in &rank.phases {
            if !names.contains(&phase.name.as_str()) {
                names.push(&phase.name);
            }
        }
    }
    let gpus = report.ranks.len() as u32;
    let mut out = Vec::new();
    for name in names {
        let Some((tokens_per_instance, context)) = tokens.of_phase(name) else { continue };
        let Some((flops_per_token, attention_counted)) = shape.flops_per_token(context) else { continue };
        let per_rank: Vec<(i64, u64, i64)> = report
            .ranks
            .iter()
            .filter_map(|r| {
                let phase = r.phases.iter().find(|p| p.name == name)?;
                let d = phase.figures.instances.as_ref().filter(|d| d.count > 0)?;
                Some((d.p50_ns, d.count, phase.figures.gpu_busy_ns))
            })
            .collect();
        let measured = instance_p50_ns.get(name).copied().or_else(|| per_rank.iter().map(|r| r.0).max());
        let Some(instance_p50_ns) = measured.filter(|&ns| ns > 0) else { continue };
        let flops_per_instance = tokens_per_instance * flops_per_token;
        let achieved_tflops = flops_per_instance / (instance_p50_ns as f64 * 1e-9) / 1e12;
        // Each rank does its share of every instance it ran; the GPUs together did count × FLOPs.
        let busy_ns: i64 = per_rank.iter().map(|r| r.2).sum();
        let instances = per_rank.iter().map(|r| r.1).max().unwrap_or(0) as f64;
        let busy_tflops_per_gpu = (busy_ns > 0).then(|| {
            flops_per_instance * instances / (busy_ns as f64 * 1e-9) / 1e12 * per_rank.len() as f64
                / f64::from(gpus.max(1))
        });
        let (mfu_pct, inconsistent) = match peak {
            None => (None, None),
            Some(p) => match utilisation(achieved_tflops, gpus, busy_tflops_per_gpu, p.tflops) {
                Ok(pct) => (Some(pct), None),
                Err(why) => (None, Some(why.to_string())),
            },
        };
        out.push(PhaseMfu {
            phase: name.to_string(),
            tokens_per_instance,
            context_per_token: context.filter(|_| attention_counted),
            attention_counted,
            flops_per_token,
            flops_per_instance,
            instance_p50_ns,
            gpus,
            achieved_tflops,
            busy_tflops_per_gpu,
            peak: peak.cloned(),
            mfu_pct,
            inconsistent,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_workloads_weights_and_flops_follow_the_formula() {
        let shape = ModelShape::parse("layers=8,hidden=4096,ffn=11008,heads=32").unwrap();
        let n = 8.0 * (4.0 * 4096.0f64.powi(2) + 3.0 * 4096.0 * 11008.0);
        assert_eq!(shape.weights(), Some(n));
        let tokens = Tokens::parse("batch=4,seq=1024,decode_steps=32").unwrap();
        let (prefill_tokens, prefill_context) = tokens.of_phase("prefill").unwrap();
        assert_eq!((prefill_tokens, prefill_context), (4096.0, Some(512.5)));
        let (decode_tokens, decode_context) = tokens.of_phase("decode").unwrap();
        assert_eq!((decode_tokens, decode_context), (4.0, Some(1024.0 + 16.5)));
        let (flops, attention) = shape.flops_per_token(Some(512.5)).unwrap();
        assert!(attention);
        assert_eq!(flops, 2.0 * n + 4.0 * 8.0 * 4096.0 * 512.5);
        assert_eq!(ModelShape::parse("parameters=1e9").unwrap().flops_per_token(Some(9.0)), Some((2e9, false)));
    }

    #[test]
    fn bad_shapes_and_token_counts_are_refused() {
        assert!(ModelShape::parse("layers=8").unwrap_err().to_string().contains("parameters"));
        assert!(ModelShape::parse("parameters=-3").is_err());
        assert!(ModelShape::parse("colour=3,parameters=1").unwrap_err().to_string().contains("unknown key"));
        assert!(Tokens::parse("seq=5").unwrap_err().to_string().contains("batch"));
        assert!(Tokens::parse("batch=0").is_err());
    }

    #[test]
    fn a_utilisation_above_the_peak_is_refused_not_reported() {
        assert_eq!(utilisation(400.0, 2, Some(300.0), 800.0), Ok(25.0));
        assert!(utilisation(1700.0, 2, None, 800.0).unwrap_err().to_string().contains("do not describe"));
        assert!(utilisation(400.0, 2, Some(900.0), 800.0).unwrap_err().to_string().contains("while busy"));
    }
}
