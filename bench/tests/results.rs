//! The result types without a GPU: bus-bandwidth factors, JSON round trip, interpolation over the sweep,
//! and one-line errors for unreadable files.

use shardscope_bench::results::{
    BenchResults, CollectiveOp, CollectiveResult, CopyKind, CopyResult, Error, GemmResult, GpuInfo, Peaks,
    SCHEMA_VERSION, busbw_factor,
};

/// A collective row whose bandwidths follow from `bytes`, `time_us` and the nccl-tests factor.
fn collective(op: CollectiveOp, nranks: u32, bytes: u64, time_us: f64) -> CollectiveResult {
    let algbw_gbps = bytes as f64 / (time_us * 1e3);
    CollectiveResult {
        op,
        nranks,
        dtype: "bf16".into(),
        bytes,
        time_us,
        algbw_gbps,
        busbw_gbps: algbw_gbps * busbw_factor(op, nranks),
    }
}

/// A small, fully populated result set with hand-made numbers.
fn sample() -> BenchResults {
    let mut results = BenchResults {
        schema_version: SCHEMA_VERSION,
        host: "node-a".into(),
        started_unix_s: 1_795_000_000,
        cuda_driver_version: Some(13000),
        nccl_version: Some(22803),
        gpus: vec![GpuInfo {
            ordinal: 0,
            name: "Test GPU".into(),
            sm_count: 132,
            memory_bytes: 150_000_000_000,
            compute_capability: "9.0".into(),
            l2_cache_bytes: Some(50 << 20),
        }],
        copy: vec![
            CopyResult { kind: CopyKind::D2d, src: 0, dst: 0, bytes: 1 << 30, time_us: 500.0, gbps: 2147.483648 },
            // Fits in the 50 MiB L2: faster, but not a device-memory figure.
            CopyResult { kind: CopyKind::D2d, src: 0, dst: 0, bytes: 16 << 20, time_us: 6.0, gbps: 2796.202667 },
            CopyResult { kind: CopyKind::P2p, src: 0, dst: 1, bytes: 1 << 30, time_us: 2500.0, gbps: 429.4967296 },
            CopyResult { kind: CopyKind::P2p, src: 1, dst: 0, bytes: 1 << 20, time_us: 10.0, gbps: 104.8576 },
        ],
        collectives: vec![
            // Listed out of order on purpose: lookups must sort by size.
            collective(CollectiveOp::AllReduce, 2, 4096, 20.0),
            collective(CollectiveOp::AllReduce, 2, 1024, 10.0),
            collective(CollectiveOp::AllReduce, 2, 1 << 20, 30.0),
            collective(CollectiveOp::AllGather, 2, 1 << 20, 25.0),
            collective(CollectiveOp::AllReduce, 4, 1 << 20, 50.0),
        ],
        gemm: vec![
            GemmResult { m: 8192, n: 8192, k: 8192, dtype: "bf16".into(), gpu: 0, time_us: 1700.0, tflops: 646.8 },
            GemmResult { m: 4, n: 4096, k: 4096, dtype: "bf16".into(), gpu: 0, time_us: 12.0, tflops: 11.2 },
        ],
        peaks: Peaks::default(),
        errors: vec![],
    };
    results.compute_peaks();
    results
}

fn assert_close(actual: f64, expected: f64) {
    assert!((actual - expected).abs() <= 1e-9 * expected.abs().max(1.0), "{actual} != {expected}");
}

#[test]
fn busbw_factors_follow_nccl_tests() {
    assert_close(busbw_factor(CollectiveOp::AllReduce, 2), 1.0);
    assert_close(busbw_factor(CollectiveOp::AllReduce, 4), 1.5);
    assert_close(busbw_factor(CollectiveOp::AllReduce, 8), 1.75);
    assert_close(busbw_factor(CollectiveOp::AllGather, 2), 0.5);
    assert_close(busbw_factor(CollectiveOp::AllGather, 8), 0.875);
    assert_close(busbw_factor(CollectiveOp::ReduceScatter, 4), 0.75);
    assert_close(busbw_factor(CollectiveOp::AllReduce, 1), 0.0);
    assert_close(busbw_factor(CollectiveOp::ReduceScatter, 0), 0.0);
}

#[test]
fn peaks_are_the_best_row_of_each_family() {
    let mut results = sample();
    let peaks = results.peaks.clone();
    // The 16 MiB copy fits in L2 and is left out of the d2d peak.
    assert_close(peaks.d2d_gbps.unwrap(), 2147.483648);
    assert_close(peaks.p2p_gbps.unwrap(), 429.4967296);
    // 1 MiB in 30 µs on 2 ranks (factor 1) beats 1 MiB in 50 µs on 4 ranks (factor 1.5): 34.95 vs 31.46.
    assert_close(peaks.all_reduce_busbw_gbps.unwrap(), 1048576.0 / 30e3);
    assert_close(peaks.all_gather_busbw_gbps.unwrap(), 1048576.0 / 25e3 * 0.5);
    assert_eq!(peaks.reduce_scatter_busbw_gbps, None);
    assert_close(peaks.gemm_bf16_tflops.unwrap(), 646.8);
    // Without a known L2 size every d2d row counts.
    results.gpus[0].l2_cache_bytes = None;
    results.compute_peaks();
    assert_close(results.peaks.d2d_gbps.unwrap(), 2796.202667);
}

#[test]
fn json_round_trip_keeps_every_field() {
    let original = sample();
    let text = serde_json::to_string_pretty(&original).unwrap();
    // The enums are written in the documented snake_case spelling.
    assert!(text.contains("\"op\": \"all_reduce\""), "{text}");
    assert!(text.contains("\"kind\": \"p2p\""), "{text}");
    assert!(text.contains("\"busbw_gbps\""), "{text}");
    assert_eq!(BenchResults::from_json(&text).unwrap(), original);
}

#[test]
fn time_and_busbw_are_interpolated_linearly_in_bytes() {
    let results = sample();
    let op = CollectiveOp::AllReduce;
    // Measured points come back exactly.
    assert_close(results.time_us(op, 2, 4096).unwrap(), 20.0);
    assert_close(results.busbw_gbps(op, 2, 4096).unwrap(), 4096.0 / 20e3);
    // Between 1024 B (10 µs) and 4096 B (20 µs): 2560 B is halfway, 15 µs.
    assert_close(results.time_us(op, 2, 2560).unwrap(), 15.0);
    assert_close(results.busbw_gbps(op, 2, 2560).unwrap(), 2560.0 / 15e3);
    // Between 4096 B (20 µs) and 1 MiB (30 µs): a quarter of the way is 20 + 2.5 µs.
    let quarter = 4096 + (1048576 - 4096) / 4;
    assert_close(results.time_us(op, 2, quarter).unwrap(), 22.5);
    // Below the sweep the latency floor holds; above it time grows with size.
    assert_close(results.time_us(op, 2, 100).unwrap(), 10.0);
    assert_close(results.time_us(op, 2, 4 << 20).unwrap(), 120.0);
    assert_close(results.busbw_gbps(op, 2, 4 << 20).unwrap(), 1048576.0 / 30e3);
    // Rank count and op select their own sweep; unmeasured combinations give None.
    assert_close(results.busbw_gbps(op, 4, 1 << 20).unwrap(), 1048576.0 / 50e3 * 1.5);
    assert_close(results.busbw_gbps(CollectiveOp::AllGather, 2, 1 << 20).unwrap(), 1048576.0 / 25e3 * 0.5);
    assert_eq!(results.busbw_gbps(CollectiveOp::ReduceScatter, 2, 1 << 20), None);
    assert_eq!(results.busbw_gbps(op, 8, 1 << 20), None);
}

#[test]
fn unreadable_files_give_one_line_errors_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("shardscope-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let missing = dir.join("missing.json");
    let error = BenchResults::load(&missing).unwrap_err();
    assert!(matches!(error, Error::Io { .. }));
    assert!(error.to_string().starts_with(&missing.display().to_string()), "{error}");

    let truncated = dir.join("truncated.json");
    let text = serde_json::to_string(&sample()).unwrap();
    std::fs::write(&truncated, &text[..text.len() / 2]).unwrap();
    let error = BenchResults::load(&truncated).unwrap_err();
    assert!(matches!(error, Error::Json { .. }));
    assert!(error.to_string().starts_with(&truncated.display().to_string()), "{error}");
    assert_eq!(error.to_string().lines().count(), 1);

    let future = dir.join("future.json");
    let mut newer = sample();
    newer.schema_version = SCHEMA_VERSION + 1;
    std::fs::write(&future, serde_json::to_string(&newer).unwrap()).unwrap();
    let error = BenchResults::load(&future).unwrap_err();
    assert!(matches!(error, Error::SchemaVersion { found, .. } if found == SCHEMA_VERSION + 1));
    assert!(error.to_string().contains("unsupported bench schema_version"), "{error}");

    std::fs::remove_dir_all(&dir).unwrap();
}

/// The committed measurements of a 2 × H200 machine, checked against values read from the file with Python.
#[test]
fn committed_h200_results_load_and_interpolate() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/results/h200x2.json");
    let results = BenchResults::load(path).unwrap();
    assert_eq!(results.nccl_version, Some(22803));
    assert_eq!(results.gpus.len(), 2);
    assert_eq!(results.gpus[0].sm_count, 132);
    assert_eq!(results.gpus[0].l2_cache_bytes, Some(62914560));
    // 12 sizes × (2 d2d + 2 p2p); 22 sizes × 3 ops; 9 GEMM shapes; nothing failed.
    assert_eq!((results.copy.len(), results.collectives.len(), results.gemm.len()), (48, 66, 9));
    assert!(results.errors.is_empty());

    // Every row obeys the definitions it claims.
    for row in &results.collectives {
        assert_close(row.algbw_gbps, row.bytes as f64 / (row.time_us * 1e3));
        assert_close(row.busbw_gbps, row.algbw_gbps * busbw_factor(row.op, row.nranks));
    }
    for row in &results.copy {
        assert_close(row.gbps, row.bytes as f64 / (row.time_us * 1e3));
    }

    // A measured size returns its row; 384 MiB lies halfway between 256 MiB (885.455 µs) and 512 MiB
    // (1698.715 µs): 1292.085 µs, 311.63 GB/s.
    let all_reduce = CollectiveOp::AllReduce;
    assert_close(results.busbw_gbps(all_reduce, 2, 256 << 20).unwrap(), 303.16092096553564);
    assert_close(results.time_us(all_reduce, 2, 384 << 20).unwrap(), 1292.0852744061015);
    assert_close(results.busbw_gbps(all_reduce, 2, 384 << 20).unwrap(), 311.63050301387955);
    // Beyond 2 GiB the bandwidth of the largest size holds; below 1 KiB the 1 KiB time does.
    assert_close(results.busbw_gbps(all_reduce, 2, 3 << 30).unwrap(), 340.97416768184365);
    assert_close(results.time_us(all_reduce, 2, 64).unwrap(), 10.706527709960938);
    assert_close(results.busbw_gbps(CollectiveOp::AllGather, 2, 1 << 30).unwrap(), 268.62241492182346);

    // The stored peaks are what the rows give; the d2d peak is the 2 GiB copy (2139.46 GB/s), not the
    // L2-resident 16 MiB one (2504.18 GB/s).
    let mut recomputed = results.clone();
    recomputed.compute_peaks();
    assert_eq!(recomputed.peaks, results.peaks);
    assert_close(results.peaks.d2d_gbps.unwrap(), 2139.4632317234673);
    assert_close(results.peaks.all_reduce_busbw_gbps.unwrap(), 340.97416768184365);
    assert_close(results.peaks.gemm_bf16_tflops.unwrap(), 820.5957394066347);
}
