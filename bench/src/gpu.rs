//! Thin owned wrappers over the CUDA driver API: one [`Gpu`] per device (primary context, one stream, a pair
//! of timing events), device buffers that free themselves, and [`time_per_launch_us`], the event-timed loop
//! every measurement uses.
//!
//! One thread drives all GPUs, so every call that depends on the current context first binds the GPU's
//! context ([`Gpu::bind`]); NCCL switches devices behind our back, which makes this necessary.

use std::ffi::c_void;

use anyhow::{Context, Result, bail};
use cudarc::driver::{result as cu, sys};

use shardscope_bench::results::GpuInfo;

/// One GPU with its primary context (shared with NCCL and cuBLAS, which use the runtime API) and a
/// non-blocking stream that carries all measured work.
pub struct Gpu {
    /// Ordinal among the visible devices.
    pub ordinal: u32,
    /// Driver handle of the device.
    pub device: sys::CUdevice,
    /// The device's primary context.
    pub context: sys::CUcontext,
    /// Stream for all measured work on this GPU.
    pub stream: sys::CUstream,
    /// Recorded before the measured launches.
    start_event: sys::CUevent,
    /// Recorded after the measured launches.
    end_event: sys::CUevent,
}

impl Gpu {
    /// Retains the primary context of device `ordinal` and creates its stream and events.
    pub fn open(ordinal: u32) -> Result<Self> {
        let device = cu::device::get(ordinal as i32).with_context(|| format!("GPU {ordinal}: cuDeviceGet"))?;
        // SAFETY: `device` is a valid handle from cuDeviceGet.
        let context = unsafe { cu::primary_ctx::retain(device) }.with_context(|| format!("GPU {ordinal}: context"))?;
        // SAFETY: the context was just retained.
        unsafe { cu::ctx::set_current(context) }.with_context(|| format!("GPU {ordinal}: cuCtxSetCurrent"))?;
        let stream = cu::stream::create(cu::stream::StreamKind::NonBlocking)
            .with_context(|| format!("GPU {ordinal}: stream"))?;
        let start_event = cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?;
        let end_event = cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?;
        Ok(Gpu { ordinal, device, context, stream, start_event, end_event })
    }

    /// Makes this GPU's context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        // SAFETY: the context stays retained for the lifetime of `self`.
        unsafe { cu::ctx::set_current(self.context) }.with_context(|| format!("GPU {}: cuCtxSetCurrent", self.ordinal))
    }

    /// Waits for all work on this GPU's stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the stream belongs to this live context.
        unsafe { cu::stream::synchronize(self.stream) }
            .with_context(|| format!("GPU {}: stream synchronize", self.ordinal))
    }

    /// Name, SM count, memory size and compute capability as the driver reports them.
    pub fn info(&self) -> Result<GpuInfo> {
        let attribute = |which| -> Result<i32> {
            // SAFETY: valid device handle and attribute enum.
            Ok(unsafe { cu::device::get_attribute(self.device, which) }?)
        };
        use sys::CUdevice_attribute as A;
        Ok(GpuInfo {
            ordinal: self.ordinal,
            name: cu::device::get_name(self.device)?,
            sm_count: attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            // SAFETY: valid device handle.
            memory_bytes: unsafe { cu::device::total_mem(self.device) }? as u64,
            compute_capability: format!(
                "{}.{}",
                attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?
            ),
            l2_cache_bytes: Some(attribute(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64),
        })
    }

    /// Allocates `bytes` of device memory on this GPU, filled with the byte `fill`.
    pub fn alloc(&self, bytes: usize, fill: u8) -> Result<DeviceBuffer> {
        self.bind()?;
        // SAFETY: this GPU's context is current.
        let pointer = unsafe { cu::malloc_sync(bytes) }
            .with_context(|| format!("GPU {}: cannot allocate {bytes} bytes", self.ordinal))?;
        let buffer = DeviceBuffer { pointer, context: self.context };
        // SAFETY: `pointer` holds `bytes` bytes in the current context.
        unsafe { cu::memset_d8_async(pointer, fill, bytes, self.stream) }?;
        self.synchronize()?;
        Ok(buffer)
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // Teardown errors cannot be acted on; the process is about to exit anyway.
        // SAFETY: the handles were created in this context and are not used after this point.
        unsafe {
            let _ = cu::ctx::set_current(self.context);
            let _ = cu::event::destroy(self.start_event);
            let _ = cu::event::destroy(self.end_event);
            let _ = cu::stream::destroy(self.stream);
            let _ = cu::primary_ctx::release(self.device);
        }
    }
}

/// Device memory on one GPU, freed on drop.
pub struct DeviceBuffer {
    /// Device address (unified across GPUs).
    pub pointer: sys::CUdeviceptr,
    /// Context that owns the allocation.
    context: sys::CUcontext,
}

impl DeviceBuffer {
    /// The address as an untyped pointer, for NCCL and cuBLAS.
    pub fn as_ptr(&self) -> *mut c_void {
        self.pointer as *mut c_void
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: the allocation belongs to `context` and is freed exactly once.
        unsafe {
            let _ = cu::ctx::set_current(self.context);
            let _ = cu::free_sync(self.pointer);
        }
    }
}

/// How long to measure: a few untimed launches, then at least `min_iterations` timed ones, more for
/// short operations so that one measurement spans at least `min_total_ms`.
#[derive(Debug, Clone, Copy)]
pub struct TimingPlan {
    /// Untimed launches before measuring (clocks ramp up, NCCL connects, cuBLAS picks kernels).
    pub warmup: u32,
    /// Fewest timed launches.
    pub min_iterations: u32,
    /// Most timed launches, whatever the duration.
    pub max_iterations: u32,
    /// Shortest acceptable measured span; event timing resolves about 0.5 µs.
    pub min_total_ms: f64,
}

/// Mean time of one `launch` in µs: events are recorded on every GPU in `gpus` around the timed
/// launches and the slowest GPU's span counts (for a collective this is the whole operation).
/// `launch` enqueues work on the GPUs' streams and must not synchronise.
pub fn time_per_launch_us(gpus: &[&Gpu], plan: TimingPlan, mut launch: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..plan.warmup {
        launch()?;
    }
    for gpu in gpus {
        gpu.synchronize()?;
    }
    // A first timed pass sizes the second: short operations get more iterations.
    let first_us = timed_pass(gpus, plan.min_iterations, &mut launch)?;
    let total_ms = first_us * f64::from(plan.min_iterations) / 1e3;
    if total_ms >= plan.min_total_ms || plan.min_iterations >= plan.max_iterations {
        return Ok(first_us);
    }
    let wanted = (plan.min_total_ms / total_ms.max(1e-6) * f64::from(plan.min_iterations)).ceil();
    let iterations = (wanted as u32).clamp(plan.min_iterations, plan.max_iterations);
    timed_pass(gpus, iterations, &mut launch)
}

/// One timed pass of `iterations` launches; mean µs per launch on the slowest GPU.
fn timed_pass(gpus: &[&Gpu], iterations: u32, launch: &mut impl FnMut() -> Result<()>) -> Result<f64> {
    if iterations == 0 {
        bail!("timing needs at least one iteration");
    }
    for gpu in gpus {
        // SAFETY: event and stream belong to the same live context.
        unsafe { cu::event::record(gpu.start_event, gpu.stream) }?;
    }
    for _ in 0..iterations {
        launch()?;
    }
    for gpu in gpus {
        // SAFETY: as above.
        unsafe { cu::event::record(gpu.end_event, gpu.stream) }?;
    }
    let mut slowest_ms = 0.0f64;
    for gpu in gpus {
        // SAFETY: both events were recorded on this GPU's stream above.
        unsafe { cu::event::synchronize(gpu.end_event) }?;
        // SAFETY: both events were recorded on this GPU's stream above and are still alive.
        let elapsed_ms = unsafe { cu::event::elapsed(gpu.start_event, gpu.end_event) }
            .with_context(|| format!("GPU {}: cuEventElapsedTime", gpu.ordinal))?;
        slowest_ms = slowest_ms.max(f64::from(elapsed_ms));
    }
    Ok(slowest_ms * 1e3 / f64::from(iterations))
}
