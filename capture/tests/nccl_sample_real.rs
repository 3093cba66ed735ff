//! The `--comm-only` kernel sample's widening, checked on a real run where every NCCL kernel was timed both by
//! CUPTI and by NCCL's channel timers (`sample-traces/comm_only/tp2_timers_h100x2.sqlite.gz`, two H100s): the
//! first 64 collectives of each process fit the kernels' extra length, and every later collective's
//! channel-timed transfer, widened by it, must come within 5 % of CUPTI's (it is about half of it unwidened).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use shardscope_capture::nccl_sample;
use shardscope_model::Kernel;

/// A (start, end) pair, ns.
type Span = (i64, i64);
/// Per collective (pid, communicator, sequence number): bytes, CUPTI kernel span, channel span.
type Timed = HashMap<(i64, i64, i64), (i64, Span, Span)>;

fn unpacked(name: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-traces/comm_only").join(name);
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).ok()?).read_to_end(&mut bytes).ok()?;
    let target = std::env::temp_dir().join(format!("shardscope-sample-real-{}.sqlite", std::process::id()));
    std::fs::write(&target, bytes).ok()?;
    Some(target)
}

fn collectives(path: &Path) -> Timed {
    let db = rusqlite::Connection::open(path).unwrap();
    let mut query = db
        .prepare(
            "SELECT n.globalPid, n.commId, n.seqNumber, n.bytes, k.start, k.end, min(h.start), max(h.end)
               FROM SHARDSCOPE_NCCL_COLLECTIVES n
               JOIN CUPTI_ACTIVITY_KIND_KERNEL k
                 ON k.globalPid = n.globalPid AND k.correlationId = n.kernelCorrelationId AND k.start = n.kernelStart
               JOIN SHARDSCOPE_NCCL_CHANNELS h ON h.globalPid = n.globalPid AND h.event = n.event
              WHERE n.kind = 'coll' AND h.start IS NOT NULL AND h.end IS NOT NULL
              GROUP BY n.globalPid, n.event",
        )
        .unwrap();
    let rows = query
        .query_map([], |r| {
            Ok(((r.get(0)?, r.get(1)?, r.get(2)?), (r.get(3)?, (r.get(4)?, r.get(5)?), (r.get(6)?, r.get(7)?))))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

fn timer_kernel(span: Span) -> Kernel {
    Kernel { start_ns: span.0, end_ns: span.1, ..Kernel::default() }
}

/// Median over the collectives of `bytes` seen on both ranks of (transfer by `pick`) ÷ (transfer by CUPTI), where
/// a transfer is the last end minus the latest start over the ranks (the analyzer's definition).
fn transfer_ratio(timed: &Timed, spans: &HashMap<(i64, i64, i64), Span>, bytes: i64) -> (usize, f64) {
    // Per (communicator, sequence number): each rank's CUPTI kernel and channel spans.
    let mut ranks: HashMap<(i64, i64), Vec<(Span, Span)>> = HashMap::new();
    for (&(pid, comm, seq), &(size, kernel, _)) in timed {
        if let (true, Some(&span)) = (size == bytes, spans.get(&(pid, comm, seq))) {
            ranks.entry((comm, seq)).or_default().push((kernel, span));
        }
    }
    let transfer =
        |parts: &[(i64, i64)]| parts.iter().map(|p| p.1).max().unwrap() - parts.iter().map(|p| p.0).max().unwrap();
    let mut ratios: Vec<f64> = ranks
        .values()
        .filter(|parts| parts.len() == 2)
        .map(|parts| {
            let kernels: Vec<_> = parts.iter().map(|p| p.0).collect();
            let channels: Vec<_> = parts.iter().map(|p| p.1).collect();
            transfer(&channels) as f64 / transfer(&kernels) as f64
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    (ratios.len(), ratios[ratios.len() / 2])
}

#[test]
fn the_sample_widens_channel_spans_to_cuptis_transfers_on_a_real_two_gpu_run() {
    let Some(path) = unpacked("tp2_timers_h100x2.sqlite.gz") else {
        panic!("sample-traces/comm_only/tp2_timers_h100x2.sqlite.gz is part of the repository and could not be read");
    };
    let timed = collectives(&path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(timed.len(), 4_226, "every collective of both ranks, timed both ways");
    let raw: HashMap<_, _> = timed.iter().map(|(&key, &(_, _, channels))| (key, channels)).collect();
    let mut widened = HashMap::new();
    let mut pids: Vec<i64> = timed.keys().map(|k| k.0).collect();
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        let mut ours: Vec<_> = timed.iter().filter(|(k, _)| k.0 == pid).collect();
        ours.sort_by_key(|(_, v)| v.1.0);
        let sampled: Vec<Span> = ours.iter().take(64).map(|(_, v)| v.1).collect();
        let mut kernels: Vec<Kernel> = ours.iter().map(|(_, v)| timer_kernel(v.2)).collect();
        let (named, process) = nccl_sample::fit(&sampled, &kernels);
        let fitted = process.expect("a fit");
        // The first few collectives' channel starts were placed 60 µs to 3.4 ms from their kernels' (the GPU
        // clock's estimate is poorest there, and the very first kernel starts slowly): those pairs do not count.
        assert!((56..=64).contains(&fitted.matches), "{fitted:?}");
        assert!((3_100..3_500).contains(&fitted.kernel_minus_channels_ns), "{fitted:?}");
        nccl_sample::widen(&mut kernels, &named, process);
        // The sampled collectives are left out of the check: only what the sample did not see counts.
        for ((key, _), kernel) in ours.iter().zip(&kernels).skip(64) {
            widened.insert(**key, (kernel.start_ns, kernel.end_ns));
        }
    }
    // 32 KiB decode all-reduces and 32 MiB prefill all-reduces.
    for (bytes, unwidened_below) in [(32_768, 0.7), (33_554_432, 0.99)] {
        let (n, ratio) = transfer_ratio(&timed, &widened, bytes);
        assert!(n >= 40, "{bytes} B: {n} collectives after the sample");
        assert!((0.95..=1.05).contains(&ratio), "{bytes} B: widened transfer {ratio:.3} of CUPTI's");
        let (_, raw_ratio) = transfer_ratio(&timed, &raw, bytes);
        assert!(raw_ratio < unwidened_below, "{bytes} B: unwidened {raw_ratio:.3}: the check would not see a fault");
    }
}
