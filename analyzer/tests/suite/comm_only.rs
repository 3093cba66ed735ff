//! A communication-only capture gives the figures a full capture gives: the same two ranks' all-reduces,
//! recorded once as CUPTI kernels linked to the NCCL plugin's operations (a full capture) and once only as
//! the plugin's kernel-channel GPU timers (`capture --comm-only`: each GPU's timer off the wall clock by its
//! own amount, each channel reported to the host some time after the GPU wrote it), match into the same
//! instances with the same per-collective wait, transfer and late rank.

use shardscope_analyzer::figures::categories::Classifier;
use shardscope_analyzer::figures::collectives::{Matching, match_traces};
use shardscope_capture::nccl_spool::{ChannelTiming, NcclProcess};
use shardscope_capture::nccl_timers;
use shardscope_io::nccl::{self, NcclOperation, OpKind};
use shardscope_model::{Device, Kernel, Process, ProcessIdx, Trace};

const SESSION_START_UTC_NS: i64 = 1_764_000_000_000_000_000;
/// Wall clock minus `CLOCK_MONOTONIC` on the host.
const WALL_MINUS_MONOTONIC_NS: i64 = 1_763_000_000_000_000_000;
/// Each GPU's `%globaltimer` minus wall time (as seen on two H200s: about 0.35 ms, different per GPU).
const TIMER_AHEAD_NS: [i64; 2] = [353_500, 348_200];
const COLLECTIVES: u64 = 40;
const COMM_ID: u64 = 0xc0ffee;

/// One rank's part of one all-reduce, in wall ns: its kernel's start and end, as both recorders see them.
#[derive(Clone, Copy)]
struct Truth {
    start: i64,
    end: i64,
}

/// Rank 1 arrives late at most collectives, rank 0 at a few; the transfer varies with the collective.
fn truth(rank: usize, seq: u64) -> Truth {
    let base = SESSION_START_UTC_NS + 1_000_000 + seq as i64 * 200_000;
    let lateness = [if seq.is_multiple_of(6) { 9_000 } else { 0 }, ((seq * 7) % 5) as i64 * 3_000];
    let latest = base + lateness[0].max(lateness[1]);
    let transfer = 4_000 + (seq % 4) as i64 * 1_500;
    Truth { start: base + lateness[rank], end: latest + transfer + rank as i64 * 150 }
}

/// A delay of the host's report of a channel time that never comes out the same twice; 0 for the first stop.
fn delay(rank: usize, seq: u64, what: u64) -> i64 {
    if seq == 0 && what == 1 { 0 } else { 500 + ((seq * 31 + what * 17 + rank as u64 * 13) % 23) as i64 * 700 }
}

fn operation(rank: usize, seq: u64) -> NcclOperation {
    NcclOperation {
        kind: OpKind::Collective,
        event: seq + 1,
        comm_id: COMM_ID,
        comm_name: String::new(),
        rank: rank as i32,
        n_ranks: 2,
        seq: Some(seq),
        func: "AllReduce".into(),
        datatype: "ncclBfloat16".into(),
        count: 1 << 20,
        element_bytes: Some(2),
        bytes: Some(2 << 20),
        root: Some(0),
        peer: None,
        algo: "RING".into(),
        proto: "SIMPLE".into(),
        n_channels: 2,
        n_warps: 16,
        group: 0,
        cpu_start_ns: truth(rank, seq).start - 3_000 - WALL_MINUS_MONOTONIC_NS,
        cpu_end_ns: None,
        gpu_start_ns: None,
        gpu_end_ns: None,
        kernel_channels: 0,
        interface_version: 5,
    }
}

/// The plugin's view of one rank: operations with two timed channels each (the second starting a little
/// later and ending a little earlier, so the operation spans the first), on the GPU's timer.
fn plugin_process(rank: usize) -> NcclProcess {
    let ahead = TIMER_AHEAD_NS[rank];
    let mut process = NcclProcess {
        pid: 100 + rank as u32,
        clock_syncs: vec![(0, WALL_MINUS_MONOTONIC_NS as u64)],
        ..NcclProcess::default()
    };
    for seq in 0..COLLECTIVES {
        let t = truth(rank, seq);
        let mut op = operation(rank, seq);
        op.gpu_start_ns = Some(t.start + ahead);
        op.gpu_end_ns = Some(t.end + ahead);
        op.kernel_channels = 2;
        for channel in 0..2u8 {
            let (start, stop) = (t.start + i64::from(channel) * 150, t.end - i64::from(channel) * 200);
            process.channels.push(ChannelTiming {
                operation_event: op.event,
                channel,
                gpu_start_ns: start + ahead,
                gpu_stop_ns: Some(stop + ahead),
                reported_start_ns: start + delay(rank, seq, 0) - WALL_MINUS_MONOTONIC_NS,
                reported_stop_ns: Some(stop + delay(rank, seq, 1) - WALL_MINUS_MONOTONIC_NS),
            });
        }
        process.operations.push(op);
    }
    process
}

/// Two processes (ranks 0 and 1), each owning one GPU, on one host.
fn two_rank_trace() -> Trace {
    let mut trace = Trace { clock_offset_ns: Some(SESSION_START_UTC_NS), ..Trace::default() };
    for rank in 0..2u32 {
        let process = trace.add_process(Process {
            pid: 100 + rank,
            global_pid: u64::from(100 + rank) << 24,
            host: Some("node".into()),
            rank: Some(rank),
            world_size: Some(2),
            ..Process::default()
        });
        trace.add_device(Device { ordinal: rank, process: Some(process), ..Device::default() });
    }
    trace
}

/// The full capture: CUPTI's NCCL kernels at the true times, linked to the plugin's operations.
fn full_capture() -> Trace {
    let mut trace = two_rank_trace();
    let name = trace.names.intern("ncclDevKernel_AllReduce_Sum_bf16_RING_SIMPLE(ncclDevKernelArgsStorage<4096ul>)");
    for rank in 0..2usize {
        for seq in 0..COLLECTIVES {
            let t = truth(rank, seq);
            trace.kernels.push(Kernel {
                start_ns: t.start - SESSION_START_UTC_NS,
                end_ns: t.end - SESSION_START_UTC_NS,
                name,
                short_name: name,
                device: shardscope_model::DeviceIdx(rank as u32),
                process: ProcessIdx(rank as u32),
                stream: 13,
                correlation_id: seq as u32 + 1,
                ..Kernel::default()
            });
        }
        let process = plugin_process(rank);
        let to_trace = |t: i64| Some(process.realtime_ns(t)? - SESSION_START_UTC_NS);
        let stats = nccl::attach_to_kernels(&mut trace, ProcessIdx(rank as u32), &process.operations, &to_trace);
        assert_eq!(stats.launches_linked, COLLECTIVES);
    }
    trace.finish();
    trace
}

/// The communication-only capture: kernels made from the timers, each GPU's clock estimated from the reports.
fn comm_only_capture() -> Trace {
    let mut trace = two_rank_trace();
    for (rank, &ahead) in TIMER_AHEAD_NS.iter().enumerate() {
        let process = plugin_process(rank);
        let clock = nccl_timers::estimate_gpu_clock(&process).expect("reports");
        // The first stop was reported at once: the estimate is exact.
        assert_eq!(clock.timer_minus_utc_ns, ahead);
        let (stats, _) = nccl_timers::add_timer_kernels(
            &mut trace,
            ProcessIdx(rank as u32),
            shardscope_model::DeviceIdx(rank as u32),
            &process,
            Some(&clock),
            SESSION_START_UTC_NS,
        );
        assert_eq!((stats.launches, stats.launches_without_channels, stats.launches_partial), (COLLECTIVES, 0, 0));
    }
    trace.finish();
    trace
}

fn matching(trace: &Trace) -> Matching {
    match_traces(std::slice::from_ref(trace), &Classifier::builtin())
}

#[test]
fn timers_give_the_same_wait_transfer_and_late_rank_as_kernels() {
    let full = matching(&full_capture());
    let comm_only = matching(&comm_only_capture());
    assert_eq!(full.instances.len(), COLLECTIVES as usize);
    assert_eq!((full.unmatched_kernels, comm_only.unmatched_kernels), (0, 0));
    assert_eq!(comm_only.instances.len(), full.instances.len());
    let mut late_ranks = [0; 2];
    for (a, b) in full.instances.iter().zip(&comm_only.instances) {
        assert_eq!((a.seq, a.communicator.as_str(), a.bytes), (b.seq, b.communicator.as_str(), b.bytes));
        assert_eq!(a.communicator, format!("{COMM_ID:#x}"), "matched by communicator and sequence number");
        assert_eq!((a.transfer_ns, a.max_wait_ns, a.wait_total_ns), (b.transfer_ns, b.max_wait_ns, b.wait_total_ns));
        assert_eq!(a.rank_wait_ns, b.rank_wait_ns);
        assert_eq!(a.late_rank, b.late_rank);
        assert_eq!(a.busbw_gbps, b.busbw_gbps);
        assert_eq!(a.shares, b.shares);
        late_ranks[a.late_rank as usize] += 1;
    }
    assert!(late_ranks[0] > 0 && late_ranks[1] > late_ranks[0], "{late_ranks:?}");
    // The figures are the fabricated ones: at seq 1 rank 1 is (7 mod 5) × 3 µs = 6 µs late, and the transfer
    // runs 5.5 µs from its arrival to rank 0's end, 150 ns more to its own.
    let seq1 = &full.instances[1];
    assert_eq!((seq1.seq, seq1.late_rank, seq1.max_wait_ns, seq1.transfer_ns), (1, 1, 6_000, 5_650));
}

/// When every report is late (no report heard of at once), each GPU's times come out late by its promptest
/// report's delay: the per-collective figures move by at most the difference of the two ranks' delays.
#[test]
fn late_reports_shift_the_figures_by_at_most_the_difference_of_the_delays() {
    let full = matching(&full_capture());
    let mut trace = two_rank_trace();
    let mut promptest = [0i64; 2];
    for rank in 0..2usize {
        let mut process = plugin_process(rank);
        let extra = 800 + rank as i64 * 1_200;
        for channel in &mut process.channels {
            channel.reported_start_ns += extra;
            channel.reported_stop_ns = channel.reported_stop_ns.map(|t| t + extra);
        }
        let clock = nccl_timers::estimate_gpu_clock(&process).unwrap();
        promptest[rank] = TIMER_AHEAD_NS[rank] - clock.timer_minus_utc_ns;
        assert_eq!(promptest[rank], extra, "the estimate is late by the promptest report's delay");
        let device = shardscope_model::DeviceIdx(rank as u32);
        let _ = nccl_timers::add_timer_kernels(
            &mut trace,
            ProcessIdx(rank as u32),
            device,
            &process,
            Some(&clock),
            SESSION_START_UTC_NS,
        );
    }
    trace.finish();
    let shifted = matching(&trace);
    let bound = (promptest[1] - promptest[0]).abs();
    assert_eq!(shifted.instances.len(), full.instances.len());
    for (a, b) in full.instances.iter().zip(&shifted.instances) {
        assert!(
            (a.transfer_ns - b.transfer_ns).abs() <= bound,
            "seq {}: {} vs {}",
            a.seq,
            a.transfer_ns,
            b.transfer_ns
        );
        assert!((a.max_wait_ns - b.max_wait_ns).abs() <= bound, "seq {}", a.seq);
    }
}

#[test]
fn a_comm_only_capture_says_so_in_the_report() {
    let mut trace = comm_only_capture();
    trace.source.path = "tp2-comm.sqlite".into();
    assert_eq!(shardscope_analyzer::report::capture_mode_note(&trace), None, "no mode recorded, nothing said");
    trace.source.capture_mode = Some(shardscope_io::nsys::CAPTURE_MODE_COMM_ONLY.into());
    let note = shardscope_analyzer::report::capture_mode_note(&trace).unwrap();
    assert!(note.starts_with("tp2-comm.sqlite: communication-only capture"), "{note}");
    assert!(note.contains("exposed communication is not known"), "{note}");
    assert!(note.contains("no kernel sample"), "{note}");
    trace.source.capture_mode = Some("full".into());
    assert_eq!(shardscope_analyzer::report::capture_mode_note(&trace), None);
}

/// The note says what the file's kernel sample did, and a sample fact that is not what a capture writes (damaged,
/// the wrong shape, huge numbers) is said to be unreadable or unfitted, never a panic.
#[test]
fn the_comm_only_note_says_what_the_kernel_sample_did() {
    let mut trace = comm_only_capture();
    trace.source.capture_mode = Some(shardscope_io::nsys::CAPTURE_MODE_COMM_ONLY.into());
    let note_with = |sample: &str| {
        let mut trace = trace.clone();
        trace.source.nccl_kernel_sample = Some(sample.into());
        shardscope_analyzer::report::capture_mode_note(&trace).unwrap()
    };
    let fitted = note_with(
        r#"[{"pid":1,"kernelsTimed":595,"ncclKernels":64,"process":{"kernelMinusChannelsNs":3264,"matches":60}},
            {"pid":2,"kernelsTimed":595,"ncclKernels":64,"process":{"kernelMinusChannelsNs":3328,"matches":63}}]"#,
    );
    assert!(fitted.contains("widened by 3.26–3.33 µs") && fitted.contains("2 of 2 processes"), "{fitted}");
    let unfitted = note_with(r#"[{"pid":1,"kernelsTimed":10,"ncclKernels":2}]"#);
    assert!(unfitted.contains("fitted no process"), "{unfitted}");
    for damaged in ["", "{", "[1,2]", r#"[{"process":{"kernelMinusChannelsNs":"x"}}]"#, &"[".repeat(10_000)] {
        assert!(note_with(damaged).contains("could not be read"), "{damaged:.40}");
    }
    let huge = note_with(r#"[{"process":{"kernelMinusChannelsNs":9223372036854775807}}]"#);
    assert!(huge.contains("widened by"), "{huge}");
}

/// A real `--comm-only` capture of the reference workload on two H100s (`sample-traces/comm_only/`): every
/// collective matched across the ranks, and the small all-reduces' transfer is the kernel's length, not the
/// channels' (NCCL's channel timers leave out about 3.3 µs of start-up and wind-down, which the capture's kernel
/// sample put back: unwidened, the median was about 4.2 µs; CUPTI gave 7.5 µs in a run with the same timers on).
#[test]
fn a_real_comm_only_capture_matches_every_collective_with_kernel_length_transfers() {
    let trace = crate::common::repo_root().join("sample-traces/comm_only/tp2_comm_only_h100x2.sqlite.gz");
    let output = crate::common::analyzer(&["report", trace.to_str().unwrap(), "--format", "json"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let collectives = &report["collectives"];
    assert_eq!(
        (collectives["matched_instances"].as_u64(), collectives["unmatched_kernels"].as_u64()),
        (Some(2113), Some(0))
    );
    let group = |bucket: &str| {
        collectives["groups"].as_array().unwrap().iter().find(|g| g["size_bucket"] == bucket).unwrap().clone()
    };
    let small = group("<64 KiB");
    assert_eq!(small["count"], 2049);
    let transfer_ns = small["transfer_median_ns"].as_i64().unwrap();
    assert!((6_500..9_000).contains(&transfer_ns), "32 KiB all-reduce transfer {transfer_ns} ns");
    assert_eq!(group("16-256 MiB")["count"], 64);
    let notes = report["notes"].to_string();
    assert!(notes.contains("communication-only capture"), "{notes}");
    assert!(notes.contains("widened by 3.26–3.33 µs"), "the file's kernel sample: {notes}");
}
