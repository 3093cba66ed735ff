//! The thresholds of the findings, from `analyzer/rules/findings.toml` (compiled in) or a user's copy of it
//! (`--findings-rules`). Every key must be given and unknown keys are refused, so that a typo never silently
//! falls back to a default.

use std::path::Path;

use serde::{Deserialize, Serialize};

// A findings rules file fails the way a category rules file does: the same error names the file and the cause.
use crate::figures::categories::RulesError;

/// The built-in findings rules, as `analyzer findings --print-rules` prints them.
pub const BUILTIN_FINDINGS_TOML: &str = include_str!("../../rules/findings.toml");

/// A finding that fires on a replayed saving alone.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SavingRule {
    /// The least saving, as a share of the measured time of the modelled steps, percent.
    pub min_saving_pct: f64,
}

/// When a run is launch-bound.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchRule {
    /// The least time the GPU waits for the host on the critical path, percent of the measured time.
    pub min_idle_on_path_pct: f64,
    /// The least replayed saving, percent.
    pub min_saving_pct: f64,
}

/// When collectives are far below the measured link.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveRule {
    /// The least replayed saving, percent.
    pub min_saving_pct: f64,
    /// Below this share of bench's best bus bandwidth at their size, collectives are latency-bound, percent.
    pub latency_bound_below_peak_pct: f64,
}

/// When warm-up dominates.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WarmupRule {
    /// The least excess of the warm-up over as many steady steps, percent of the run.
    pub min_share_of_run_pct: f64,
}

/// When a phase's FLOP rate is low against the GEMM peak.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FlopRateRule {
    /// Below this MFU (achieved model FLOP/s over the GEMM peak of the phase's GPUs), percent, the phase fires;
    /// its GEMM kernels at this efficiency give the bound.
    pub min_mfu_pct: f64,
}

/// When one pipeline stage is busier than the others.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineRule {
    /// The least excess of the busiest stage's compute per step over the stages' mean, percent of the mean.
    pub min_excess_over_mean_pct: f64,
    /// The least saving (replayed, or the bound without a fitting model), percent of the window.
    pub min_saving_pct: f64,
}

/// When a rank's GPU memory is near its capacity.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryRule {
    /// The least peak, as a share of the GPU's total memory, percent.
    pub min_peak_share_pct: f64,
}

/// Every finding's thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FindingsRules {
    /// A late rank.
    pub late_rank: SavingRule,
    /// Exposed communication.
    pub exposed_communication: SavingRule,
    /// Launch-bound steps.
    pub launch_bound: LaunchRule,
    /// Synchronising calls in the step loop.
    pub synchronising_calls: SavingRule,
    /// Host-device copies in the step loop.
    pub host_device_copies: SavingRule,
    /// Collectives far below the measured link.
    pub slow_collectives: CollectiveRule,
    /// Warm-up dominating the run.
    pub warmup: WarmupRule,
    /// Low FLOP rate against the measured GEMM peak.
    pub low_flop_rate: FlopRateRule,
    /// Imbalance between pipeline stages.
    pub pipeline_stage_imbalance: PipelineRule,
    /// Host-device copies from pageable memory in the step loop.
    pub pageable_copies: SavingRule,
    /// GPU memory near capacity.
    pub memory_near_capacity: MemoryRule,
}

impl FindingsRules {
    /// The built-in rules.
    pub fn builtin() -> FindingsRules {
        FindingsRules::from_toml(BUILTIN_FINDINGS_TOML, "built-in findings rules")
            .expect("the built-in rules are valid")
    }

    /// The text of the built-in rules.
    pub fn builtin_text() -> &'static str {
        BUILTIN_FINDINGS_TOML
    }

    /// Rules from a TOML file.
    pub fn load(path: &Path) -> Result<FindingsRules, RulesError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| RulesError::Io { path: path.display().to_string(), source })?;
        FindingsRules::from_toml(&text, &path.display().to_string())
    }

    /// Rules from TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<FindingsRules, RulesError> {
        let invalid = |cause: String| RulesError::Invalid {
            path: origin.to_string(),
            cause: cause.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" "),
        };
        let rules: FindingsRules = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let shares = [
            ("late_rank.min_saving_pct", rules.late_rank.min_saving_pct),
            ("exposed_communication.min_saving_pct", rules.exposed_communication.min_saving_pct),
            ("launch_bound.min_idle_on_path_pct", rules.launch_bound.min_idle_on_path_pct),
            ("launch_bound.min_saving_pct", rules.launch_bound.min_saving_pct),
            ("synchronising_calls.min_saving_pct", rules.synchronising_calls.min_saving_pct),
            ("host_device_copies.min_saving_pct", rules.host_device_copies.min_saving_pct),
            ("slow_collectives.min_saving_pct", rules.slow_collectives.min_saving_pct),
            ("slow_collectives.latency_bound_below_peak_pct", rules.slow_collectives.latency_bound_below_peak_pct),
            ("warmup.min_share_of_run_pct", rules.warmup.min_share_of_run_pct),
            ("low_flop_rate.min_mfu_pct", rules.low_flop_rate.min_mfu_pct),
            ("pipeline_stage_imbalance.min_saving_pct", rules.pipeline_stage_imbalance.min_saving_pct),
            ("pageable_copies.min_saving_pct", rules.pageable_copies.min_saving_pct),
            ("memory_near_capacity.min_peak_share_pct", rules.memory_near_capacity.min_peak_share_pct),
        ];
        for (key, value) in shares {
            if !(0.0..=100.0).contains(&value) {
                return Err(invalid(format!("{key} = {value}: a share in percent, 0 to 100")));
            }
        }
        let excess = rules.pipeline_stage_imbalance.min_excess_over_mean_pct;
        if !(excess.is_finite() && excess >= 0.0) {
            return Err(invalid(format!(
                "pipeline_stage_imbalance.min_excess_over_mean_pct = {excess}: a share in percent, 0 or more"
            )));
        }
        Ok(rules)
    }
}
