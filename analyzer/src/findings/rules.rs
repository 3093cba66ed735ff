//! The thresholds of the findings, from `analyzer/rules/findings.toml` (compiled in) or a user's copy of it
//! (`--findings-rules`). Every key must be given and unknown keys are refused, so that a typo never silently
//! falls back to a default.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The built-in findings rules, as `analyzer findings --print-rules` prints them.
pub const BUILTIN_FINDINGS_TOML: &str = include_str!("../../rules/findings.toml");

/// Why a findings rules file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FindingsRulesError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The rules file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid findings TOML, or a threshold is out of range.
    #[error("{path}: {cause}")]
    Invalid {
        /// The rules file.
        path: String,
        /// What is wrong, on one line.
        cause: String,
    },
}

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
    pub fn load(path: &Path) -> Result<FindingsRules, FindingsRulesError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| FindingsRulesError::Io { path: path.display().to_string(), source })?;
        FindingsRules::from_toml(&text, &path.display().to_string())
    }

    /// Rules from TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<FindingsRules, FindingsRulesError> {
        let invalid = |cause: String| FindingsRulesError::Invalid {
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
            ("pageable_copies.min_saving_pct", rules.pageable_copies.min_saving_pct),
            ("memory_near_capacity.min_peak_share_pct", rules.memory_near_capacity.min_peak_share_pct),
        ];
        for (key, value) in shares {
            if !(0.0..=100.0).contains(&value) {
                return Err(invalid(format!("{key} = {value}: a share in percent, 0 to 100")));
            }
        }
        Ok(rules)
    }
}
