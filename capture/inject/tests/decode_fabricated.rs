//! Feeds the decoder CUPTI activity buffers built by hand with the CUDA 12 and CUDA 13 record
//! structs, the way CUPTI would fill them, and checks every field that reaches the spool.

use std::ffi::CString;

use shardscope_cupti_sys::v12::CUpti_ActivityKernel9;
use shardscope_cupti_sys::v13::{self, CUpti_ActivityKernel10};
use shardscope_inject::decode::{Decoder, Layout, walk_records};
use shardscope_spool::cupti::{ApiRecord, KernelRecord, MarkerRecord, SpoolRecord};

/// Appends a record's bytes at the next 8-byte boundary, as CUPTI packs its buffers.
fn push<T: Copy>(buffer: &mut Vec<u8>, record: &T) {
    // SAFETY: T is a plain-old-data CUPTI struct; viewing it as bytes is sound.
    let bytes = unsafe { std::slice::from_raw_parts(record as *const T as *const u8, std::mem::size_of::<T>()) };
    buffer.extend_from_slice(bytes);
    buffer.resize(buffer.len().next_multiple_of(8), 0);
}

fn namer() -> shardscope_inject::decode::CallbackNamer {
    Box::new(|driver, cbid| match (driver, cbid) {
        (false, 211) => Some("cudaLaunchKernel_v7000".to_string()),
        (true, 20) => Some("cuMemcpyHtoD_v2".to_string()),
        _ => None,
    })
}

struct Strings {
    kernel: CString,
    range: CString,
    domain: CString,
    device: CString,
}

fn strings() -> Strings {
    Strings {
        kernel: CString::new("_Z10gemm_tileILi128EEvPKfS1_Pfi").unwrap(),
        range: CString::new("decode").unwrap(),
        domain: CString::new("NCCL").unwrap(),
        device: CString::new("NVIDIA H200").unwrap(),
    }
}

/// The records common to both layouts (they have the same structs in 12.9 and 13.0).
fn push_common(buffer: &mut Vec<u8>, s: &Strings) {
    let mut memcpy = v13::CUpti_ActivityMemcpy6 {
        kind: v13::CUPTI_ACTIVITY_KIND_MEMCPY,
        copyKind: 1,
        bytes: 4096,
        start: 2_000,
        end: 2_500,
        deviceId: 1,
        streamId: 7,
        correlationId: 42,
        ..Default::default()
    };
    memcpy.srcKind = 3;
    push(buffer, &memcpy);
    push(
        buffer,
        &v13::CUpti_ActivityMemset4 {
            kind: v13::CUPTI_ACTIVITY_KIND_MEMSET,
            value: 0,
            bytes: 512,
            start: 3_000,
            end: 3_100,
            deviceId: 1,
            streamId: 7,
            correlationId: 43,
            ..Default::default()
        },
    );
    push(
        buffer,
        &v13::CUpti_ActivityAPI {
            kind: v13::CUPTI_ACTIVITY_KIND_RUNTIME,
            cbid: 211,
            start: 900,
            end: 950,
            processId: 1234,
            threadId: 1235,
            correlationId: 41,
            returnValue: 0,
        },
    );
    push(
        buffer,
        &v13::CUpti_ActivityAPI {
            kind: v13::CUPTI_ACTIVITY_KIND_DRIVER,
            cbid: 20,
            start: 1_900,
            end: 2_600,
            processId: 1234,
            threadId: 1235,
            correlationId: 42,
            returnValue: 0,
        },
    );
    let mut start = v13::CUpti_ActivityMarker2 {
        kind: v13::CUPTI_ACTIVITY_KIND_MARKER,
        flags: v13::CUPTI_ACTIVITY_FLAG_MARKER_START,
        timestamp: 800,
        id: 5,
        name: s.range.as_ptr(),
        domain: s.domain.as_ptr(),
        ..Default::default()
    };
    start.objectId.pt = v13::CUpti_ActivityObjectKindId__bindgen_ty_1 { processId: 1234, threadId: 1235 };
    push(buffer, &start);
    let mut end = v13::CUpti_ActivityMarker2 {
        kind: v13::CUPTI_ACTIVITY_KIND_MARKER,
        flags: v13::CUPTI_ACTIVITY_FLAG_MARKER_END,
        timestamp: 5_000,
        id: 5,
        ..Default::default()
    };
    end.objectId.pt = v13::CUpti_ActivityObjectKindId__bindgen_ty_1 { processId: 1234, threadId: 1235 };
    push(buffer, &end);
    push(
        buffer,
        &v13::CUpti_ActivitySynchronization2 {
            kind: v13::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
            type_: 3,
            start: 4_000,
            end: 4_900,
            correlationId: 44,
            contextId: 1,
            streamId: 7,
            cudaEventId: u32::MAX,
            ..Default::default()
        },
    );
    let mut device = v13::CUpti_ActivityDevice5 {
        kind: v13::CUPTI_ACTIVITY_KIND_DEVICE,
        globalMemoryBandwidth: 4_800_000_000,
        globalMemorySize: 150_000_000_000,
        coreClockRate: 1_980_000,
        numMultiprocessors: 132,
        computeCapabilityMajor: 9,
        id: 1,
        name: s.device.as_ptr(),
        ..Default::default()
    };
    device.uuid.bytes[0] = 0x5a;
    push(buffer, &device);
}

fn expected_kernel() -> KernelRecord {
    KernelRecord {
        start_ns: 1_000,
        end_ns: 1_800,
        device_id: 1,
        context_id: 1,
        stream_id: 7,
        correlation_id: 41,
        grid: [128, 2, 1],
        block: [256, 1, 1],
        registers_per_thread: 96,
        static_shared_bytes: 1024,
        dynamic_shared_bytes: 49152,
        grid_id: 17,
        name_id: 1,
        ..KernelRecord::default()
    }
}

macro_rules! kernel_struct {
    ($ty:ident, $s:expr) => {
        $ty {
            kind: v13::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
            registersPerThread: 96,
            start: 1_000,
            end: 1_800,
            deviceId: 1,
            contextId: 1,
            streamId: 7,
            gridX: 128,
            gridY: 2,
            gridZ: 1,
            blockX: 256,
            blockY: 1,
            blockZ: 1,
            staticSharedMemory: 1024,
            dynamicSharedMemory: 49152,
            correlationId: 41,
            gridId: 17,
            name: $s.kernel.as_ptr(),
            ..Default::default()
        }
    };
}

fn decode_all(layout: Layout, buffer: &[u8]) -> (usize, Vec<SpoolRecord>, u64) {
    let mut decoder = Decoder::new(layout, namer());
    let mut out = Vec::new();
    // SAFETY: walk_records hands out pointers to whole records inside `buffer`.
    let walked = walk_records(layout, buffer, |record| unsafe { decoder.decode(record, &mut out) });
    (walked, out, decoder.undecoded)
}

fn check_common(records: &[SpoolRecord]) {
    let name = |id: u32| {
        records.iter().find_map(|r| match r {
            SpoolRecord::Name { id: i, text } if *i == id => Some(text.clone()),
            _ => None,
        })
    };
    let kernel = records.iter().find_map(|r| if let SpoolRecord::Kernel(k) = r { Some(*k) } else { None }).unwrap();
    assert_eq!(kernel, expected_kernel());
    assert_eq!(name(kernel.name_id).as_deref(), Some("_Z10gemm_tileILi128EEvPKfS1_Pfi"));

    let memcpy = records.iter().find_map(|r| if let SpoolRecord::Memcpy(m) = r { Some(*m) } else { None }).unwrap();
    assert_eq!(
        (memcpy.copy_kind, memcpy.src_kind, memcpy.bytes, memcpy.start_ns, memcpy.end_ns),
        (1, 3, 4096, 2_000, 2_500)
    );
    assert_eq!((memcpy.device_id, memcpy.stream_id, memcpy.correlation_id), (1, 7, 42));
    let memset = records.iter().find_map(|r| if let SpoolRecord::Memset(m) = r { Some(*m) } else { None }).unwrap();
    assert_eq!((memset.bytes, memset.correlation_id, memset.end_ns), (512, 43, 3_100));

    let apis: Vec<ApiRecord> =
        records.iter().filter_map(|r| if let SpoolRecord::Api(a) = r { Some(*a) } else { None }).collect();
    assert_eq!(apis.len(), 2);
    assert!(!apis[0].driver && apis[1].driver);
    assert_eq!(name(apis[0].name_id).as_deref(), Some("cudaLaunchKernel_v7000"));
    assert_eq!(name(apis[1].name_id).as_deref(), Some("cuMemcpyHtoD_v2"));
    assert_eq!((apis[0].pid, apis[0].tid, apis[0].correlation_id), (1234, 1235, 41));

    let markers: Vec<MarkerRecord> =
        records.iter().filter_map(|r| if let SpoolRecord::Marker(m) = r { Some(*m) } else { None }).collect();
    assert_eq!(markers.len(), 2);
    assert_eq!((markers[0].flags, markers[0].id, markers[0].tid, markers[0].timestamp_ns), (2, 5, 1235, 800));
    assert_eq!(name(markers[0].name_id).as_deref(), Some("decode"));
    assert_eq!(name(markers[0].domain_id).as_deref(), Some("NCCL"));
    assert_eq!((markers[1].flags, markers[1].name_id, markers[1].domain_id), (4, 0, 0));

    let sync = records.iter().find_map(|r| if let SpoolRecord::Sync(s) = r { Some(*s) } else { None }).unwrap();
    assert_eq!((sync.sync_type, sync.start_ns, sync.end_ns, sync.correlation_id), (3, 4_000, 4_900, 44));
    let device =
        records.iter().find_map(|r| if let SpoolRecord::Device(d) = r { Some(d.clone()) } else { None }).unwrap();
    assert_eq!(
        (device.device_id, device.name.as_str(), device.sm_count, device.uuid[0]),
        (1, "NVIDIA H200", 132, 0x5a)
    );
    assert_eq!(
        (device.memory_bytes, device.memory_bandwidth_kib_per_s, device.clock_rate_khz),
        (150_000_000_000, 4_800_000_000, 1_980_000)
    );
}

#[test]
fn cuda12_layout_buffer_decodes() {
    let s = strings();
    let mut buffer = Vec::new();
    push(&mut buffer, &kernel_struct!(CUpti_ActivityKernel9, s));
    push_common(&mut buffer, &s);
    let (walked, records, undecoded) = decode_all(Layout::Cuda12, &buffer);
    assert_eq!(walked, 9);
    assert_eq!(undecoded, 0);
    check_common(&records);
}

#[test]
fn cuda13_layout_buffer_decodes() {
    let s = strings();
    let mut buffer = Vec::new();
    // Two kernels with the same name pointer: one Name record, both pointing at it.
    push(&mut buffer, &kernel_struct!(CUpti_ActivityKernel10, s));
    let mut second = kernel_struct!(CUpti_ActivityKernel10, s);
    second.isDeviceLaunched = 1;
    second.correlationId = 99;
    push(&mut buffer, &second);
    push_common(&mut buffer, &s);
    let (walked, records, undecoded) = decode_all(Layout::Cuda13, &buffer);
    assert_eq!(walked, 10);
    assert_eq!(undecoded, 0);
    check_common(&records);
    let kernels: Vec<&KernelRecord> =
        records.iter().filter_map(|r| if let SpoolRecord::Kernel(k) = r { Some(k) } else { None }).collect();
    assert_eq!(kernels[1].correlation_id, 99);
    assert_eq!(kernels[0].name_id, kernels[1].name_id);
    let name_records = records.iter().filter(|r| matches!(r, SpoolRecord::Name { .. })).count();
    // kernel, two API names, range, domain.
    assert_eq!(name_records, 5);
}

#[test]
fn layouts_differ_where_cuda13_appended_fields() {
    // Reading a CUDA 13 buffer with CUDA 12 sizes would misplace every record after a kernel.
    let k12 = Layout::Cuda12.record_size(v13::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL).unwrap();
    let k13 = Layout::Cuda13.record_size(v13::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL).unwrap();
    assert_eq!(k13, k12 + 8);
    assert_eq!(Layout::for_cupti_version(28), Layout::Cuda12);
    assert_eq!(Layout::for_cupti_version(130001), Layout::Cuda13);
}

#[test]
fn unknown_kinds_are_counted_not_decoded() {
    let mut decoder = Decoder::new(Layout::Cuda13, namer());
    let mut out = Vec::new();
    let overhead = v13::CUpti_Activity { kind: v13::CUPTI_ACTIVITY_KIND_OVERHEAD };
    // SAFETY: a bare header is a whole record for a kind the decoder does not read.
    unsafe { decoder.decode(&overhead, &mut out) };
    assert!(out.is_empty());
    assert_eq!(decoder.undecoded, 1);
}
