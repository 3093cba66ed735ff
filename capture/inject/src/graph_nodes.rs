//! CUDA graph nodes: which thread made each node and when, so that a kernel replayed from a graph can be
//! attributed to the NVTX ranges (PyTorch modules) that were open when its node was captured.
//!
//! CUPTI calls the subscriber on the thread that makes a node (`CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED`, during
//! stream capture or a graph API call) and when instantiation or cloning copies one
//! (`CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED`, with the node it came from). A replayed kernel's record names the
//! node of the instantiated graph, so the clones lead back to the made node. The callback only reads two ids and
//! the clock and appends a record to a short-locked list; the background thread writes the list with its next
//! batch. Nodes are made while graphs are built, never during replay, so this costs nothing per step.

use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

use shardscope_cupti_sys::v13 as cupti;
use shardscope_spool::cupti::{GraphNodeRecord, SpoolRecord};

/// `CUpti_CallbackIdResource` values (stable across CUPTI 12 and 13).
const CBID_GRAPHNODE_CREATED: u32 = 13;
const CBID_GRAPHNODE_CLONED: u32 = 20;

/// CUPTI's `CUpti_ResourceData`: what a resource callback receives.
#[repr(C)]
struct ResourceData {
    context: *mut c_void,
    resource_handle: *mut c_void,
    resource_descriptor: *mut c_void,
}

/// CUPTI's `CUpti_GraphData`, the descriptor of graph callbacks.
#[repr(C)]
struct GraphData {
    graph: *mut c_void,
    original_graph: *mut c_void,
    node: *mut c_void,
    original_node: *mut c_void,
    node_type: u32,
    dependency: *mut c_void,
    graph_exec: *mut c_void,
}

type GetNodeId = unsafe extern "C" fn(node: *mut c_void, id: *mut u64) -> cupti::CUptiResult;
type GetGraphId = unsafe extern "C" fn(graph: *mut c_void, id: *mut u32) -> cupti::CUptiResult;

/// The CUPTI functions the callback uses.
struct Ids {
    api: &'static cupti::Cupti,
    node_id: GetNodeId,
    graph_id: Option<GetGraphId>,
}

static IDS: OnceLock<Ids> = OnceLock::new();
/// Records made by the callback, waiting for the background thread.
static PENDING: Mutex<Vec<SpoolRecord>> = Mutex::new(Vec::new());

/// Switches the two node callbacks on for `subscriber`. Returns false (and records nothing) where this CUPTI
/// lacks the callback API or node ids.
pub(crate) fn enable(
    api: &'static cupti::Cupti,
    library: &libloading::Library,
    subscriber: cupti::CUpti_SubscriberHandle,
) -> bool {
    prepare(api, library) && switch_callbacks_on(api, subscriber)
}

/// Finds what the node callbacks need in this CUPTI without calling it, for [`enable_again`] at the first attach
/// of a process that starts detached. False where this CUPTI lacks the callback API or node ids.
pub(crate) fn prepare(api: &'static cupti::Cupti, library: &libloading::Library) -> bool {
    if api.cuptiEnableCallback.is_err() {
        return false;
    }
    // SAFETY: CUPTI exports these functions with exactly these signatures.
    let node_id = unsafe { library.get::<GetNodeId>(b"cuptiGetGraphNodeId\0") }.map(|f| *f);
    // SAFETY: as above.
    let graph_id = unsafe { library.get::<GetGraphId>(b"cuptiGetGraphId\0") }.map(|f| *f).ok();
    let Ok(node_id) = node_id else { return false };
    IDS.set(Ids { api, node_id, graph_id }).is_ok()
}

/// Switches the two node callbacks on again for a new subscriber (CUPTI attached for a window), where [`prepare`]
/// found them.
pub(crate) fn enable_again(api: &'static cupti::Cupti, subscriber: cupti::CUpti_SubscriberHandle) {
    if IDS.get().is_some() {
        switch_callbacks_on(api, subscriber);
    }
}

/// Switches the node-made and node-cloned callbacks on for `subscriber`; true when CUPTI took both.
fn switch_callbacks_on(api: &cupti::Cupti, subscriber: cupti::CUpti_SubscriberHandle) -> bool {
    [CBID_GRAPHNODE_CREATED, CBID_GRAPHNODE_CLONED].into_iter().all(|cbid| {
        // SAFETY: a subscriber CUPTI handed out, a valid domain and callback id.
        unsafe { api.cuptiEnableCallback(1, subscriber, cupti::CUPTI_CB_DOMAIN_RESOURCE, cbid) == 0 }
    })
}

/// The subscriber's callback lands here: keeps graph node callbacks, ignores everything else.
///
/// # Safety
/// `data` is what CUPTI passes with `domain` and `cbid`: for resource callbacks, a `CUpti_ResourceData`.
pub(crate) unsafe fn on_callback(domain: cupti::CUpti_CallbackDomain, cbid: u32, data: *const c_void) {
    if domain != cupti::CUPTI_CB_DOMAIN_RESOURCE || !(cbid == CBID_GRAPHNODE_CREATED || cbid == CBID_GRAPHNODE_CLONED) {
        return;
    }
    let Some(ids) = IDS.get() else { return };
    // SAFETY: resource callbacks pass a CUpti_ResourceData, valid during the call (checked for null).
    let Some(resource) = (unsafe { (data as *const ResourceData).as_ref() }) else { return };
    // SAFETY: graph callbacks' descriptor is a CUpti_GraphData, valid during the call (checked for null).
    let Some(graph) = (unsafe { (resource.resource_descriptor as *const GraphData).as_ref() }) else { return };
    let node_of = |node: *mut c_void| {
        let mut id = 0u64;
        // SAFETY: a node handle CUPTI passed and an out-pointer.
        (!node.is_null() && unsafe { (ids.node_id)(node, &mut id) } == 0).then_some(id)
    };
    let Some(node_id) = node_of(graph.node) else { return };
    let original_node_id = match cbid {
        CBID_GRAPHNODE_CLONED => match node_of(graph.original_node) {
            Some(id) => id,
            None => return,
        },
        _ => 0,
    };
    let mut graph_id = 0u32;
    if let Some(get) = ids.graph_id.filter(|_| !graph.graph.is_null()) {
        // SAFETY: a graph handle CUPTI passed and an out-pointer; on failure the id stays 0.
        unsafe { get(graph.graph, &mut graph_id) };
    }
    let mut timestamp_ns = 0u64;
    // SAFETY: plain out-parameter call.
    unsafe { ids.api.cuptiGetTimestamp(&mut timestamp_ns) };
    // CUPTI names a thread by its pthread_t cut to 32 bits in marker and API records; the merge maps both alike.
    // SAFETY: pthread_self has no preconditions.
    let tid = unsafe { libc::pthread_self() } as u32;
    let record = GraphNodeRecord { node_id, original_node_id, graph_id, timestamp_ns, tid };
    PENDING.lock().unwrap_or_else(|e| e.into_inner()).push(SpoolRecord::GraphNode(record));
}

/// Takes the records made since the last call, for the background thread to write.
pub(crate) fn take_pending() -> Vec<SpoolRecord> {
    std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()))
}
