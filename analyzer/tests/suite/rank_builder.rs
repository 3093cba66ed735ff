//! One rank's synthetic trace, written as host calls on thread 1 and the GPU work they launch: what the findings'
//! and the critical path's tests build their runs from (each adds the launches its cases need).

use shardscope_model::{ApiCall, Collective, CollectiveOp, Device, DeviceIdx, Kernel, Process, ProcessIdx, Trace};

/// The all-reduce kernel [`RankBuilder::launch`] makes an instance of a collective.
pub const ALL_REDUCE: &str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL";
/// Its message size: 1 MiB.
pub const ALL_REDUCE_BYTES: u64 = 1 << 20;

pub struct RankBuilder {
    pub trace: Trace,
    next_correlation: u32,
}

impl RankBuilder {
    /// Rank `rank`: one process (pid 100 + rank) and its GPU.
    pub fn new(rank: u32) -> RankBuilder {
        let mut trace = Trace::default();
        trace.source.path = format!("synthetic-rank{rank}");
        let process = trace.add_process(Process { pid: 100 + rank, rank: Some(rank), ..Process::default() });
        trace.add_device(Device { ordinal: rank, process: Some(process), ..Device::default() });
        RankBuilder { trace, next_correlation: 1 }
    }

    /// A host call `[start_ns, end_ns)`; returns its correlation id.
    pub fn call(&mut self, name: &str, start_ns: i64, end_ns: i64) -> u32 {
        let correlation_id = self.next_correlation;
        self.next_correlation += 1;
        let name = self.trace.names.intern(name);
        let process = ProcessIdx(0);
        self.trace.api_calls.push(ApiCall {
            start_ns,
            end_ns,
            name,
            process,
            tid: 1,
            correlation_id,
            ..ApiCall::default()
        });
        correlation_id
    }

    /// A 10 ns `cudaLaunchKernel` at `call_ns` launching `name` on `stream` at `[start_ns, end_ns)`.
    pub fn launch_on(&mut self, call_ns: i64, name: &str, stream: u32, start_ns: i64, end_ns: i64) {
        let correlation_id = self.call("cudaLaunchKernel_v7000", call_ns, call_ns + 10);
        let name = self.trace.names.intern(name);
        let (device, process) = (DeviceIdx(0), ProcessIdx(0));
        let kernel = Kernel {
            start_ns,
            end_ns,
            name,
            short_name: name,
            device,
            process,
            stream,
            correlation_id,
            ..Kernel::default()
        };
        self.trace.kernels.push(kernel);
    }

    /// A 10 ns `cudaLaunchKernel` at `call_ns` launching `name` on stream 7 at `[start_ns, end_ns)`; an
    /// [`ALL_REDUCE`] is instance 0 of communicator 1, of [`ALL_REDUCE_BYTES`].
    pub fn launch(&mut self, call_ns: i64, name: &str, start_ns: i64, end_ns: i64) {
        self.launch_on(call_ns, name, 7, start_ns, end_ns);
        if name == ALL_REDUCE {
            let (op, communicator, seq, bytes) = (CollectiveOp::AllReduce, Some(1), Some(0), Some(ALL_REDUCE_BYTES));
            self.mark_collective(Collective { op, communicator, seq, bytes, ..Collective::default() });
        }
    }

    /// Makes the last kernel an instance of `collective`.
    pub fn mark_collective(&mut self, collective: Collective) {
        let index = self.trace.collectives.len() as u32;
        self.trace.collectives.push(collective);
        self.trace.kernels.last_mut().expect("a kernel to mark").collective = Some(index);
    }

    /// The finished trace.
    pub fn finish(mut self) -> Trace {
        self.trace.finish();
        self.trace
    }
}
