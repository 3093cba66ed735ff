//! torch.profiler's module calls (`with_modules=True`): `python_function` events named `nn.Module: …` become CPU
//! ranges on their thread, so that module tables can be made from Kineto traces; other Python calls stay out.

use shardscope_io::kineto;
use shardscope_model::RangeKind;

const TRACE: &str = r#"{"traceEvents": [
 {"ph": "X", "cat": "python_function", "name": "nn.Module: Qwen3Model_0", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
 {"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": 1, "tid": 1, "ts": 10, "dur": 20},
 {"ph": "X", "cat": "python_function", "name": "torch/nn/modules/linear.py(124): forward", "pid": 1, "tid": 1,
  "ts": 11, "dur": 5},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 12, "dur": 2,
  "args": {"correlation": 5}},
 {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 50, "dur": 10,
  "args": {"device": 0, "stream": 7, "correlation": 5}}
]}"#;

#[test]
fn module_calls_become_ranges_and_other_python_calls_do_not() {
    let path = std::env::temp_dir().join(format!("shardscope-kineto-modules-{}.json", std::process::id()));
    std::fs::write(&path, TRACE).unwrap();
    let trace = kineto::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let ranges: Vec<(&str, i64, i64, RangeKind, u32)> =
        trace.ranges.iter().map(|r| (trace.names.get(r.name), r.start_ns, r.end_ns, r.kind, r.tid)).collect();
    assert_eq!(
        ranges,
        [
            ("nn.Module: Qwen3Model_0", 0, 100_000, RangeKind::CpuAnnotation, 1),
            ("nn.Module: Linear_0", 10_000, 30_000, RangeKind::CpuAnnotation, 1)
        ]
    );
    let launch = trace.kernels[0].launch.expect("kernel linked to its launch");
    assert_eq!(trace.api_calls[launch as usize].tid, 1);
}
