//! CUPTI records that only the capture file keeps: the trace model has no field for them, so they go
//! from their spool record straight to their own nsys table, here, in one module.
//!
//! Today that is CUPTI's synchronisation records (`CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`), or, when they
//! were not recorded (the default: they lengthen the launch path of every stream wait), the same host
//! waits derived from the synchronising calls' own API records.
//!
//! A new activity kind of this sort touches three files: its record in `spool/src/cupti.rs`,
//! its enable condition and decoder in `capture/inject/src/decode.rs`, and its merge step, range filter
//! and table here. [`crate::merge`] hands every record it does not know to [`SideRecords::take`], and
//! [`crate::sqlite`] calls [`SideRecords::write_tables`] once.

use std::collections::HashMap;

use rusqlite::{Connection, params};
use shardscope_model::{ApiCall, ProcessIdx, Trace};
use shardscope_spool::cupti::SpoolRecord;

/// A CUDA synchronisation call's effect, on the session timeline.
#[derive(Debug, Clone, Copy, Default)]
pub struct SyncEvent {
    /// Process that synchronised.
    pub process: ProcessIdx,
    /// Start, ns since session start.
    pub start_ns: i64,
    /// End, ns since session start.
    pub end_ns: i64,
    /// CUPTI synchronisation type.
    pub sync_type: u32,
    /// CUDA context id.
    pub context_id: u32,
    /// CUDA stream id (`u32::MAX` when none).
    pub stream_id: u32,
    /// CUDA event id (`u32::MAX` when none).
    pub event_id: u32,
    /// Correlation id of the API call.
    pub correlation_id: u32,
}

/// What one process's spool gave this module, for the merge's bookkeeping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TakenCounts {
    /// CUPTI synchronisation records.
    pub syncs: u64,
}

/// The records of every process that only the capture file keeps, on the session timeline.
#[derive(Debug, Default)]
pub struct SideRecords {
    /// Synchronisation events.
    pub syncs: Vec<SyncEvent>,
}

/// The process whose spool is being merged: what [`SideRecords`] needs to place its records.
pub struct ProcessClock<'a> {
    /// The process.
    pub process: ProcessIdx,
    /// A CUPTI time of this process as session ns.
    pub to_session: &'a dyn Fn(u64) -> i64,
}

impl SideRecords {
    /// Takes `record` if it is one of this module's kinds (true), counting it in `counts`.
    pub fn take(&mut self, at: &ProcessClock, record: &SpoolRecord, counts: &mut TakenCounts) -> bool {
        match record {
            SpoolRecord::Sync(s) => {
                counts.syncs += 1;
                self.syncs.push(SyncEvent {
                    process: at.process,
                    start_ns: (at.to_session)(s.start_ns),
                    end_ns: (at.to_session)(s.end_ns),
                    sync_type: s.sync_type,
                    context_id: s.context_id,
                    stream_id: s.stream_id,
                    event_id: s.event_id,
                    correlation_id: s.correlation_id,
                });
                true
            }
            _ => false,
        }
    }

    /// After a process's spool: what can be derived from its other records when the kind itself was not
    /// recorded. `calls` are the process's API calls, `context_id` the CUDA context of its first kernel.
    pub fn end_of_process(&mut self, trace: &Trace, calls: &[ApiCall], context_id: u32, counts: &TakenCounts) {
        if counts.syncs == 0 {
            self.syncs.extend(syncs_from_api_calls(trace, calls, context_id));
        }
    }

    /// Keeps the records that start inside the capture range.
    pub fn retain_inside(&mut self, inside: &dyn Fn(ProcessIdx, i64) -> bool) {
        self.syncs.retain(|s| inside(s.process, s.start_ns));
    }

    /// Creates and fills this module's tables. `context_device` maps (process, CUDA context id) to the
    /// GPU ordinal its kernels ran on: a synchronisation names a context, nsys' row names a GPU.
    pub fn write_tables(
        &self,
        conn: &Connection,
        trace: &Trace,
        context_device: &HashMap<(u32, u32), u32>,
    ) -> rusqlite::Result<()> {
        conn.execute_batch(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL, end INTEGER NOT NULL, \
             deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, \
             streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, deprecatedSyncType INTEGER, \
             syncType INTEGER NOT NULL, eventId INTEGER NOT NULL, eventSyncId INTEGER);",
        )?;
        let mut sync = conn.prepare(
            "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, deviceId, contextId, streamId, \
             correlationId, globalPid, syncType, eventId) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?;
        for s in &self.syncs {
            let global_pid = trace.processes.get(s.process.0 as usize).map_or(0, |p| p.global_pid) as i64;
            let device = context_device.get(&(s.process.0, s.context_id)).copied().unwrap_or(0);
            sync.execute(params![
                s.start_ns,
                s.end_ns,
                device,
                s.context_id,
                s.stream_id,
                s.correlation_id,
                global_pid,
                s.sync_type,
                s.event_id
            ])?;
        }
        Ok(())
    }
}

/// CUPTI's synchronisation types (`CUpti_ActivitySynchronizationType`), as nsys' `syncType` column holds them.
mod sync_type {
    pub const EVENT_SYNCHRONIZE: u32 = 1;
    pub const STREAM_WAIT_EVENT: u32 = 2;
    pub const STREAM_SYNCHRONIZE: u32 = 3;
    pub const CONTEXT_SYNCHRONIZE: u32 = 4;
}

/// The synchronisation type of a runtime or driver call that synchronises, if it is one.
fn sync_type_of_call(name: &str) -> Option<u32> {
    const CALLS: &[(&str, u32)] = &[
        ("cudaEventSynchronize", sync_type::EVENT_SYNCHRONIZE),
        ("cuEventSynchronize", sync_type::EVENT_SYNCHRONIZE),
        ("cudaStreamWaitEvent", sync_type::STREAM_WAIT_EVENT),
        ("cuStreamWaitEvent", sync_type::STREAM_WAIT_EVENT),
        ("cudaStreamSynchronize", sync_type::STREAM_SYNCHRONIZE),
        ("cuStreamSynchronize", sync_type::STREAM_SYNCHRONIZE),
        ("cudaDeviceSynchronize", sync_type::CONTEXT_SYNCHRONIZE),
        ("cuCtxSynchronize", sync_type::CONTEXT_SYNCHRONIZE),
    ];
    CALLS.iter().find(|(prefix, _)| name.starts_with(prefix)).map(|&(_, kind)| kind)
}

/// Synchronisation events derived from the API records of synchronising calls: the call's own span is the
/// host's wait. The stream and event are not in an API record (`u32::MAX`, as for "none").
fn syncs_from_api_calls(trace: &Trace, calls: &[ApiCall], context_id: u32) -> Vec<SyncEvent> {
    calls
        .iter()
        .filter_map(|call| {
            Some(SyncEvent {
                process: call.process,
                start_ns: call.start_ns,
                end_ns: call.end_ns,
                sync_type: sync_type_of_call(trace.names.get(call.name))?,
                context_id,
                stream_id: u32::MAX,
                event_id: u32::MAX,
                correlation_id: call.correlation_id,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardscope_model::ApiKind;
    use shardscope_spool::cupti::SyncRecord;

    #[test]
    fn synchronising_calls_become_synchronisation_events_and_others_do_not() {
        let mut trace = Trace::default();
        let call = |trace: &mut Trace, name: &str, start_ns: i64, correlation_id: u32| ApiCall {
            start_ns,
            end_ns: start_ns + 500,
            name: trace.names.intern(name),
            kind: ApiKind::Runtime,
            process: ProcessIdx(0),
            tid: 1,
            correlation_id,
        };
        let calls = vec![
            call(&mut trace, "cudaLaunchKernel_v7000", 10, 1),
            call(&mut trace, "cudaStreamSynchronize_v3020", 20, 2),
            call(&mut trace, "cudaStreamWaitEvent_v3020", 30, 3),
            call(&mut trace, "cuCtxSynchronize", 40, 4),
            call(&mut trace, "cudaEventSynchronize_v3020", 50, 5),
            call(&mut trace, "cudaEventRecord_v3020", 60, 6),
        ];
        let syncs = syncs_from_api_calls(&trace, &calls, 7);
        let seen: Vec<(i64, i64, u32, u32)> =
            syncs.iter().map(|s| (s.start_ns, s.end_ns, s.sync_type, s.correlation_id)).collect();
        assert_eq!(
            seen,
            [
                (20, 520, sync_type::STREAM_SYNCHRONIZE, 2),
                (30, 530, sync_type::STREAM_WAIT_EVENT, 3),
                (40, 540, sync_type::CONTEXT_SYNCHRONIZE, 4),
                (50, 550, sync_type::EVENT_SYNCHRONIZE, 5),
            ]
        );
        assert!(syncs.iter().all(|s| s.context_id == 7 && s.stream_id == u32::MAX && s.event_id == u32::MAX));
    }

    #[test]
    fn recorded_synchronisations_are_taken_and_suppress_the_derived_ones() {
        let mut trace = Trace::default();
        let calls = vec![ApiCall {
            start_ns: 5,
            end_ns: 9,
            name: trace.names.intern("cudaStreamSynchronize_v3020"),
            kind: ApiKind::Runtime,
            process: ProcessIdx(0),
            tid: 1,
            correlation_id: 3,
        }];
        let shift = |ns: u64| ns as i64 - 100;
        let at = ProcessClock { process: ProcessIdx(2), to_session: &shift };
        let record = SyncRecord { start_ns: 1_000, end_ns: 1_500, sync_type: 3, ..SyncRecord::default() };

        let mut side = SideRecords::default();
        let mut counts = TakenCounts::default();
        assert!(side.take(&at, &SpoolRecord::Sync(record), &mut counts));
        assert!(!side.take(&at, &SpoolRecord::BuffersRefused { count: 1 }, &mut counts));
        side.end_of_process(&trace, &calls, 1, &counts);
        assert_eq!(counts.syncs, 1);
        assert_eq!(side.syncs.len(), 1, "a recorded synchronisation must suppress the derived ones");
        assert_eq!((side.syncs[0].process, side.syncs[0].start_ns, side.syncs[0].end_ns), (ProcessIdx(2), 900, 1_400));

        let mut derived = SideRecords::default();
        derived.end_of_process(&trace, &calls, 1, &TakenCounts::default());
        assert_eq!(derived.syncs.len(), 1, "without recorded ones, the synchronising call is the wait");

        side.retain_inside(&|_, start_ns| start_ns >= 1_000);
        assert!(side.syncs.is_empty());
    }
}
