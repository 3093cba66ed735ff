//! Op categories on real traces: every trace beside the checkout and in `sample-traces/` (deep-learning programs,
//! compiled and XLA programs, a hydrodynamics stencil code) leaves at most 5 % of its kernel time uncategorised, and named kernels land where a performance engineer expects.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{repo_root, shared_traces};
use shardscope_analyzer::figures::categories::{Classifier, report_label};

/// The largest share of kernel time, in percent, that may stay `other` on a real trace.
const OTHER_BOUND_PCT: f64 = 5.0;

/// Kernel time per report label (`gemm`, `comm.all_reduce`, ...) over all kernels of one file.
fn kernel_ns_by_label(path: &Path) -> BTreeMap<String, i64> {
    let classifier = Classifier::builtin();
    let mut by_label = BTreeMap::new();
    for trace in shardscope_io::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
        for kernel in &trace.kernels {
            let label = report_label(&classifier, classifier.classify(trace.names.get(kernel.name)), None);
            *by_label.entry(label).or_default() += kernel.duration_ns();
        }
    }
    by_label
}

fn files_in(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_in(&path, out);
        } else if ["json", "gz", "sqlite"].iter().any(|ext| path.extension().is_some_and(|e| e == *ext)) {
            out.push(path);
        }
    }
}

/// How many traces of `files` with kernel time were checked to leave at most `OTHER_BOUND_PCT` of it uncategorised.
fn check_little_uncategorised(files: &[PathBuf]) -> usize {
    let mut checked = 0;
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy();
        // A program's own ground truth beside its capture (`sample-traces/engines/*.truth.json`) is no trace.
        if name.ends_with(".truth.json") {
            continue;
        }
        let by_label = kernel_ns_by_label(path);
        let total: i64 = by_label.values().sum();
        if total == 0 {
            continue; // a CPU-only trace
        }
        let other = by_label.get("other").copied().unwrap_or(0);
        let other_pct = 100.0 * other as f64 / total as f64;
        assert!(other_pct <= OTHER_BOUND_PCT, "{}: other {other_pct:.1}% of kernel time: {by_label:?}", path.display());
        checked += 1;
    }
    checked
}

#[test]
fn sample_traces_leave_little_kernel_time_uncategorised() {
    let mut files = Vec::new();
    files_in(&repo_root().join("sample-traces"), &mut files);
    let checked = check_little_uncategorised(&files);
    assert!(checked >= 6, "only {checked} traces checked");
}

#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn shared_traces_leave_little_kernel_time_uncategorised() {
    let mut files = Vec::new();
    files_in(&shared_traces(), &mut files);
    let checked = check_little_uncategorised(&files);
    assert!(checked >= 5, "only {checked} traces checked");
}

/// Named kernel families on real traces. Before base-name matching and the vendor rules, the MI250 trace's
/// `Cijk_*` GEMMs were `other` (27.3 % of kernel time), the V100 CNN trace was 34.7 % `other` (cuDNN convolution
/// and batch norm) and the DLRM rank counted FBGEMM's embedding kernels as GEMM (33.5 % gemm, 2.1 % embedding).
#[test]
#[cfg_attr(not(shared_traces), ignore = "needs ../shared/traces")]
fn vendor_and_model_specific_kernels_land_in_their_categories() {
    let shared = shared_traces();
    let pct = |by: &BTreeMap<String, i64>, label: &str| {
        100.0 * by.get(label).copied().unwrap_or(0) as f64 / by.values().sum::<i64>() as f64
    };
    // AMD MI250: hipBLASLt/Tensile `Cijk_*` GEMMs were `other` (27.3 % of kernel time).
    let amd = kernel_ns_by_label(&shared.join("kineto/mi250_minitoy_train_ROCm6_2_kineto.json.gz"));
    assert!((pct(&amd, "gemm") - 27.3).abs() < 0.1, "{amd:?}");
    assert_eq!(amd.get("other"), None, "{amd:?}");
    // ResNet-style training on V100: cuDNN convolutions, batch norm and pooling.
    let cnn = kernel_ns_by_label(&shared.join("kineto/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"));
    assert!(pct(&cnn, "conv") > 35.0, "{cnn:?}");
    assert!(pct(&cnn, "norm") > 15.0, "{cnn:?}");
    // DLRM with FBGEMM: split_embedding_* kernels are embedding work, not GEMM (their template arguments say fbgemm).
    let dlrm = kernel_ns_by_label(&shared.join("kineto/sampled_2rank/sampled_rank-1.json.gz"));
    assert!(pct(&dlrm, "embedding_sampling") > 20.0, "{dlrm:?}");
    assert!(pct(&dlrm, "gemm") < 12.0, "{dlrm:?}");
    assert!(pct(&dlrm, "quantization") > 1.0, "{dlrm:?}");
}

/// ROCm traces keep kernel names mangled: the report demangles them for the category and for display.
#[test]
fn mangled_rocm_names_are_demangled() {
    let mangled = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_";
    let trace = format!(
        r#"{{"schemaVersion": 1, "deviceProperties": [{{"id": 0, "name": "AMD Instinct MI300X"}}],
        "traceEvents": [
          {{"ph": "X", "cat": "kernel", "name": "{mangled}", "pid": 0, "tid": 1, "ts": 10.0, "dur": 4.0,
            "args": {{"device": 0, "stream": 1, "correlation": 7}}}},
          {{"ph": "X", "cat": "kernel", "name": "Cijk_Ailk_Bljk_BBS_BH_MT128x128x64_MI16x16x1", "pid": 0, "tid": 1,
            "ts": 20.0, "dur": 6.0, "args": {{"device": 0, "stream": 1, "correlation": 8}}}}
        ]}}"#
    );
    let path = std::env::temp_dir().join(format!("shardscope-rocm-{}.json", std::process::id()));
    std::fs::write(&path, trace).unwrap();
    let output = common::analyzer(&["report", "--format", "json", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let r: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let rank = &r["ranks"][0];
    assert_eq!(rank["categories"]["elementwise"], 4_000);
    assert_eq!(rank["categories"]["gemm"], 6_000);
    let names: Vec<&str> = rank["kernels"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    assert!(names.iter().any(|n| n.starts_with("void at::native::vectorized_elementwise_kernel<4, ")), "{names:?}");
}
