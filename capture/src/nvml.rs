//! GPU PCI locations and the links between GPU pairs, from NVIDIA's NVML (`libnvidia-ml`).
//!
//! CUPTI's device records carry no PCI location and say nothing about how GPUs connect, so
//! the launcher asks NVML once, after the run. NVML is loaded at run time; on a machine without
//! the NVIDIA driver [`query`] returns `None` and the trace simply lacks these facts.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

/// One GPU as NVML sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// NVML index.
    pub index: u32,
    /// UUID without NVML's `GPU-` prefix, as nsys writes it (`c422d2bb-0c9d-…`).
    pub uuid: String,
    /// PCI location, `domain:bus:device.function` (`0000:00:06.0`).
    pub bus_location: String,
}

/// How two GPUs connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuLink {
    /// UUID of the first GPU.
    pub uuid_a: String,
    /// UUID of the second GPU.
    pub uuid_b: String,
    /// Active NVLinks of the first GPU when the pair talks over NVLink (0: no NVLink).
    pub nvlinks: u32,
    /// `nvlink` when linked by NVLink, else NVML's common PCIe ancestor: `pcie-switch`,
    /// `pcie-switches`, `pcie-host-bridge`, `numa-node`, `system` (across sockets).
    pub kind: String,
}

/// NVML's `nvmlPciInfo_t` (nvml.h): legacy bus id, five numbers, bus id.
#[repr(C)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

type Device = *mut c_void;

/// NVML's `NVML_P2P_CAPS_INDEX_NVLINK`: "can the pair talk over NVLink".
const P2P_CAPS_INDEX_NVLINK: c_int = 2;

/// NVML's `NVML_NVLINK_MAX_LINKS` in recent drivers (18 on Hopper).
const MAX_NVLINKS: c_uint = 18;

/// Asks NVML for every GPU and every pair's link; `None` when NVML is unavailable.
pub fn query() -> Option<(Vec<GpuInfo>, Vec<GpuLink>)> {
    // SAFETY: loading NVML only runs its initialisers; the handle is leaked so the function
    // pointers below stay valid (and NVML is never unloaded while in use).
    let library = Box::leak(Box::new(unsafe { libloading::Library::new("libnvidia-ml.so.1") }.ok()?));
    // SAFETY: every symbol below is looked up with its signature in nvml.h.
    unsafe {
        let init = library.get::<unsafe extern "C" fn() -> c_int>(b"nvmlInit_v2\0").ok()?;
        let count_fn = library.get::<unsafe extern "C" fn(*mut c_uint) -> c_int>(b"nvmlDeviceGetCount_v2\0").ok()?;
        let by_index = library
            .get::<unsafe extern "C" fn(c_uint, *mut Device) -> c_int>(b"nvmlDeviceGetHandleByIndex_v2\0")
            .ok()?;
        let get_uuid =
            library.get::<unsafe extern "C" fn(Device, *mut c_char, c_uint) -> c_int>(b"nvmlDeviceGetUUID\0").ok()?;
        let get_pci =
            library.get::<unsafe extern "C" fn(Device, *mut PciInfo) -> c_int>(b"nvmlDeviceGetPciInfo_v3\0").ok()?;
        let ancestor = library
            .get::<unsafe extern "C" fn(Device, Device, *mut c_int) -> c_int>(b"nvmlDeviceGetTopologyCommonAncestor\0")
            .ok();
        let link_state = library
            .get::<unsafe extern "C" fn(Device, c_uint, *mut c_int) -> c_int>(b"nvmlDeviceGetNvLinkState\0")
            .ok();
        let p2p_status = library
            .get::<unsafe extern "C" fn(Device, Device, c_int, *mut c_int) -> c_int>(b"nvmlDeviceGetP2PStatus\0")
            .ok();
        if init() != 0 {
            return None;
        }
        let mut count: c_uint = 0;
        if count_fn(&mut count) != 0 {
            return None;
        }
        let mut handles = Vec::new();
        let mut gpus = Vec::new();
        for index in 0..count {
            let mut device: Device = std::ptr::null_mut();
            if by_index(index, &mut device) != 0 {
                continue;
            }
            let mut uuid = [0 as c_char; 96];
            let mut pci: PciInfo = std::mem::zeroed();
            if get_uuid(device, uuid.as_mut_ptr(), uuid.len() as c_uint) != 0 || get_pci(device, &mut pci) != 0 {
                continue;
            }
            let uuid = CStr::from_ptr(uuid.as_ptr()).to_string_lossy();
            let uuid = uuid.strip_prefix("GPU-").unwrap_or(&uuid).to_string();
            let bus_location = format!("{:04x}:{:02x}:{:02x}.0", pci.domain & 0xffff, pci.bus, pci.device);
            handles.push((device, bus_location.clone()));
            gpus.push(GpuInfo { index, uuid, bus_location });
        }
        let mut links = Vec::new();
        for a in 0..handles.len() {
            for b in a + 1..handles.len() {
                // Through NVSwitch a GPU's links reach the switches, not the peer, so ask whether
                // the pair talks over NVLink and count the links of the first GPU (what
                // `nvidia-smi topo -m` shows as NV18 on a two-GPU H200 machine).
                let mut nvlink_ok: c_int = -1;
                let over_nvlink = matches!(&p2p_status, Some(f) if f(handles[a].0, handles[b].0, P2P_CAPS_INDEX_NVLINK, &mut nvlink_ok) == 0 && nvlink_ok == 0);
                let mut nvlinks = 0;
                if over_nvlink && let Some(state) = &link_state {
                    for link in 0..MAX_NVLINKS {
                        let mut active: c_int = 0;
                        if state(handles[a].0, link, &mut active) == 0 && active != 0 {
                            nvlinks += 1;
                        }
                    }
                }
                let kind = if over_nvlink {
                    "nvlink".to_string()
                } else {
                    let mut level: c_int = -1;
                    match &ancestor {
                        Some(f) if f(handles[a].0, handles[b].0, &mut level) == 0 => topology_name(level).to_string(),
                        _ => "unknown".to_string(),
                    }
                };
                links.push(GpuLink { uuid_a: gpus[a].uuid.clone(), uuid_b: gpus[b].uuid.clone(), nvlinks, kind });
            }
        }
        if let Ok(shutdown) = library.get::<unsafe extern "C" fn() -> c_int>(b"nvmlShutdown\0") {
            shutdown();
        }
        Some((gpus, links))
    }
}

/// NVML's `nvmlGpuTopologyLevel_t` values, named.
fn topology_name(level: c_int) -> &'static str {
    match level {
        0 => "same-board",
        10 => "pcie-switch",
        20 => "pcie-switches",
        30 => "pcie-host-bridge",
        40 => "numa-node",
        50 => "system",
        _ => "unknown",
    }
}
