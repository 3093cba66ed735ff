/* A stand-in libcupti for tests without a GPU: it answers the calls the injection library makes and writes
 * each enabling call to the file named by FAKE_CUPTI_LOG, one per line:
 *   kind <activity kind>            (cuptiActivityEnable)
 *   kind_off <activity kind>        (cuptiActivityDisable)
 *   runtime <callback id> <0|1>
 *   driver <callback id> <0|1>
 *   callback <domain × 1000 + callback id> <0|1>
 *   resource-callback <callback id> <0|1>   (the resource domain, 3)
 *   domain <domain> <0|1>           (cuptiEnableDomain: every callback of a domain, which a library must not ask)
 *   all-domains <0|1>               (cuptiEnableAllDomains, likewise)
 * Built with -DNO_SINGLE_CALLS it lacks cuptiActivityEnableRuntimeApi/DriverApi, like a CUPTI older than 12.6.
 * Callback names follow CUPTI's spelling; ids are this fake's own.
 *
 * It also plays the workload, for the capture window tests, through fake_* functions:
 *   fake_activity: work of `kind` happens (a launch); CUPTI makes its record only if the kind (or, for API
 *     records, the single call) is switched on now, as the record of a kernel is created at its launch. The
 *     record stays pending until fake_complete_all (the kernel finishes). cuptiActivityFlushAll(0) hands over
 *     completed records only; a forced flush hands over the unfinished ones too, with zero timestamps (as
 *     CUPTI does), so a library that forced a flush at a window's end would lose their times.
 *   fake_api_call / fake_nvtx: a runtime/driver or NVTX call; the subscriber's callback runs if switched on.
 * fake_delivered() counts the subscriber's callbacks CUPTI made so far, and fake_switches_on(domain, cbid) how
 * many switches act on one call of `cbid` (its callback, its single API record, its whole API kind): what a
 * launch pays in CUPTI beyond the driver's own work. fake_graph_node_activity() is a kernel of a replayed graph:
 * it gets a record only at node level (CUPTI makes no node record while the graph trace kind is on).
 * The first call into CUPTI attaches it; cuptiFinalize() detaches: subscriber, callbacks, kinds and buffer callbacks
 * are gone; the next call into CUPTI attaches it again (fake_attached() says where it stands, fake_attaches() how
 * often a call attached it, the first time included).
 * With FAKE_CUPTI_HOLD_BUFFER set, switching a kind on asks the library for a buffer that CUPTI keeps (empty, never
 * returned, forgotten at cuptiFinalize), as CUPTI may hold buffers ahead of records.
 * fake_cupti_graph_node() plays CUPTI calling the subscriber for a graph node made or cloned; node and graph
 * ids are the handles' own values.
 * InitializeInjectionNvtx2 is CUPTI's NVTX hook: like CUPTI's, it attaches CUPTI, and it puts a function of its own
 * in the core module's nvtxRangePushA slot of the export table it is given; fake_nvtx_pushes() counts the pushes
 * that reached that function, fake_nvtx_inits() the calls of the hook.
 * Records sit in buffers at a fixed stride that this fake's cuptiActivityGetNextRecord walks. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUptiResult;
enum { OK = 0, INVALID_PARAMETER = 1 };
enum { DOMAIN_DRIVER = 1, DOMAIN_RUNTIME = 2 };

static const char *RUNTIME_NAMES[] = {NULL, "cudaGetDevice_v3020", "cudaLaunchKernel_v7000",
                                      "cudaStreamIsCapturing_v10000", "cudaMemcpyAsync_v3020",
                                      "cudaStreamSynchronize_v3020", "cudaGetLastError_v3020",
                                      "cudaProfilerStart_v4000", "cudaProfilerStop_v4000",
                                      "cudaGraphLaunch_v10000"};
static const char *DRIVER_NAMES[] = {NULL, "cuCtxGetCurrent", "cuLaunchKernelEx", "cuDriverGetVersion",
                                     "cuGetProcAddress_v2", "cuStreamWaitEvent", "cuProfilerStart",
                                     "cuProfilerStop", "cuGraphLaunch"};

static void note(const char *what, unsigned a, int b) {
    const char *path = getenv("FAKE_CUPTI_LOG");
    FILE *log = path ? fopen(path, "a") : NULL;
    if (!log) return;
    if (b < 0) fprintf(log, "%s %u\n", what, a); else fprintf(log, "%s %u %d\n", what, a, b);
    fclose(log);
}

/* CUPTI attaches at the process's first call into it (the version and the callback names need no driver and
 * attach nothing) and is attached until cuptiFinalize; any later call attaches it again. */
static int attached;
static int finalized;
static unsigned long attaches;
static void touch(void) {
    if (attached) return;
    attached = 1;
    attaches++;
    if (finalized) note("attach", (unsigned)attaches, -1);
}
int fake_attached(void) { return attached; }
unsigned long fake_attaches(void) { return attaches; }

/* NVTX's export table for tools (nvtxTypes.h): the callbacks table is id 1, the core module 1, its
 * nvtxRangePushA slot 9. */
typedef void (*NvtxFunctionPointer)(void);
typedef int (*GetModuleFunctionTable)(int module, NvtxFunctionPointer ***table, unsigned *size);
struct NvtxCallbacks { size_t struct_size; GetModuleFunctionTable get_module_function_table; };
static unsigned long nvtx_pushes, nvtx_inits;
static int fake_range_push_a(const char *message) {
    (void)message;
    __atomic_fetch_add(&nvtx_pushes, 1, __ATOMIC_RELAXED);
    return 0;
}
int InitializeInjectionNvtx2(const void *(*get_export_table)(uint32_t)) {
    touch();
    nvtx_inits++;
    const struct NvtxCallbacks *callbacks = get_export_table(1);
    NvtxFunctionPointer **table = NULL;
    unsigned size = 0;
    if (!callbacks || !callbacks->get_module_function_table(1, &table, &size) || size <= 9 || !table[9]) return 0;
    *table[9] = (NvtxFunctionPointer)fake_range_push_a;
    return 1;
}
unsigned long fake_nvtx_pushes(void) { return nvtx_pushes; }
unsigned long fake_nvtx_inits(void) { return nvtx_inits; }

CUptiResult cuptiGetVersion(uint32_t *version) { *version = 130001; return OK; }
CUptiResult cuptiGetTimestamp(uint64_t *ts) {
    touch();
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    *ts = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    return OK;
}
/* CUPTI allows one subscriber per process: a second one is refused (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED). */
typedef void (*Callback)(void *userdata, int domain, uint32_t cbid, const void *data);
typedef void (*Requested)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*Completed)(void *context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);
static int subscribers;
static Callback subscriber_callback;
static void *subscriber_data;
static Requested buffer_requested;
static Completed buffer_completed;

enum { MAX_KIND = 64, MAX_CBID = 64, DOMAINS = 8, RECORD_STRIDE = 1024, MAX_PENDING = 256 };
enum { KIND_DRIVER = 4, KIND_RUNTIME = 5, KIND_KERNEL = 3, KIND_CONCURRENT_KERNEL = 10, KIND_GRAPH_TRACE = 51 };
static int kind_on[MAX_KIND];
static int runtime_on[MAX_CBID], driver_on[MAX_CBID];
static int callback_on[DOMAINS][MAX_CBID];
/* Graph node callbacks (resource domain) switched on so far. */
static int graph_callbacks_on;
/* Subscriber callbacks made so far. */
static unsigned long delivered;
static void deliver(int domain, uint32_t cbid, const void *data) {
    __atomic_fetch_add(&delivered, 1, __ATOMIC_RELAXED);
    subscriber_callback(subscriber_data, domain, cbid, data);
}

struct Pending { uint8_t bytes[RECORD_STRIDE]; size_t size; size_t timestamps_at; int complete; };
static struct Pending pending[MAX_PENDING];
static int pending_count;
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;

CUptiResult cuptiSubscribe(void **subscriber, void *callback, void *data) {
    touch();
    if (subscribers > 0) return 39;
    subscribers++;
    subscriber_callback = (Callback)callback;
    subscriber_data = data;
    *subscriber = (void *)1;
    return OK;
}
CUptiResult cuptiEnableCallback(uint32_t enable, void *subscriber, int domain, uint32_t cbid) {
    (void)subscriber;
    touch();
    if (domain < 0 || domain >= DOMAINS || cbid >= MAX_CBID) return INVALID_PARAMETER;
    callback_on[domain][cbid] = enable != 0;
    if (domain == 3) {
        note("resource-callback", cbid, (int)enable);
        if (enable) graph_callbacks_on++;
        return OK;
    }
    note("callback", (unsigned)domain * 1000u + cbid, (int)enable);
    return OK;
}
CUptiResult cuptiEnableDomain(uint32_t enable, void *subscriber, int domain) {
    (void)subscriber;
    touch();
    if (domain < 0 || domain >= DOMAINS) return INVALID_PARAMETER;
    for (int cbid = 0; cbid < MAX_CBID; cbid++) callback_on[domain][cbid] = enable != 0;
    note("domain", (unsigned)domain, (int)enable);
    return OK;
}
CUptiResult cuptiEnableAllDomains(uint32_t enable, void *subscriber) {
    (void)subscriber;
    for (int domain = 0; domain < DOMAINS; domain++)
        for (int cbid = 0; cbid < MAX_CBID; cbid++) callback_on[domain][cbid] = enable != 0;
    note("all-domains", enable, -1);
    return OK;
}
/* A buffer this fake holds without records (FAKE_CUPTI_HOLD_BUFFER). */
static uint8_t *held_buffer;
/* Switches a kind on and makes the records of what already exists: only noted here. */
CUptiResult cuptiActivityEnableAndDump(int kind) {
    touch();
    if (kind < 0 || kind >= MAX_KIND) return INVALID_PARAMETER;
    kind_on[kind] = 1;
    note("kind-dump", (unsigned)kind, -1);
    return OK;
}
CUptiResult cuptiActivityEnable(int kind) {
    touch();
    if (getenv("FAKE_CUPTI_HOLD_BUFFER") && !held_buffer && buffer_requested) {
        size_t size = 0, max_records = 0;
        buffer_requested(&held_buffer, &size, &max_records);
    }
    if (kind >= 0 && kind < MAX_KIND) kind_on[kind] = 1;
    note("kind", (unsigned)kind, -1);
    return OK;
}
CUptiResult cuptiActivityDisable(int kind) {
    touch();
    if (kind >= 0 && kind < MAX_KIND) kind_on[kind] = 0;
    note("kind_off", (unsigned)kind, -1);
    return OK;
}
CUptiResult cuptiActivityRegisterCallbacks(void *requested, void *completed) {
    touch();
    buffer_requested = (Requested)requested;
    buffer_completed = (Completed)completed;
    return OK;
}
CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, void **record) {
    uint8_t *next = *record ? (uint8_t *)*record + RECORD_STRIDE : buffer;
    if (next + RECORD_STRIDE > buffer + valid) return 12; /* MAX_LIMIT_REACHED */
    *record = next;
    return OK;
}
/* Hands the deliverable pending records to the library in one buffer. */
CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    touch();
    int forced = (flag & 1) != 0;
    pthread_mutex_lock(&pending_lock);
    uint8_t *buffer = NULL;
    size_t size = 0, max_records = 0, valid = 0;
    int kept = 0;
    for (int i = 0; i < pending_count; i++) {
        struct Pending *p = &pending[i];
        if (!p->complete && !forced) { pending[kept++] = *p; continue; }
        if (!buffer) {
            if (!buffer_requested) break;
            buffer_requested(&buffer, &size, &max_records);
            if (!buffer) break;
        }
        if (valid + RECORD_STRIDE > size) { pending[kept++] = *p; continue; }
        if (!p->complete) memset(p->bytes + p->timestamps_at, 0, 16);
        memcpy(buffer + valid, p->bytes, p->size);
        valid += RECORD_STRIDE;
    }
    pending_count = kept;
    pthread_mutex_unlock(&pending_lock);
    if (buffer && buffer_completed) buffer_completed(NULL, 0, buffer, size, valid);
    return OK;
}

/* Detaches: CUPTI forgets the subscriber, its callbacks, the kinds and the buffer callbacks. */
CUptiResult cuptiFinalize(void) {
    subscribers = 0;
    subscriber_callback = NULL;
    memset(callback_on, 0, sizeof callback_on);
    memset(kind_on, 0, sizeof kind_on);
    graph_callbacks_on = 0;
    buffer_requested = NULL;
    buffer_completed = NULL;
    held_buffer = NULL;
    attached = 0;
    finalized = 1;
    note("finalize", 0, -1);
    return OK;
}

/* ---- the workload's side, for the tests ---- */

/* Work of `kind` (an API record of callback `cbid` for the API kinds) happens; its record is made if
 * recording of it is on. Returns 1 when a record was made. */
static int work_seen;
int fake_activity(int kind, uint32_t cbid, const void *record, size_t size, size_t timestamps_at, int complete) {
    work_seen = 1;
    int on = kind >= 0 && kind < MAX_KIND && kind_on[kind];
    if (kind == KIND_RUNTIME && cbid < MAX_CBID) on = on || runtime_on[cbid];
    if (kind == KIND_DRIVER && cbid < MAX_CBID) on = on || driver_on[cbid];
    if (!on || size > RECORD_STRIDE) return 0;
    pthread_mutex_lock(&pending_lock);
    int made = pending_count < MAX_PENDING;
    if (made) {
        struct Pending *p = &pending[pending_count++];
        memset(p->bytes, 0, sizeof p->bytes);
        memcpy(p->bytes, record, size);
        p->size = size;
        p->timestamps_at = timestamps_at;
        p->complete = complete;
    }
    pthread_mutex_unlock(&pending_lock);
    return made;
}
/* A kernel node of a replayed graph: a record at node level only. */
int fake_graph_node_activity(const void *record, size_t size, size_t timestamps_at) {
    if (kind_on[KIND_GRAPH_TRACE]) return 0;
    return fake_activity(KIND_CONCURRENT_KERNEL, 0, record, size, timestamps_at, 1);
}
unsigned long fake_delivered(void) { return __atomic_load_n(&delivered, __ATOMIC_RELAXED); }
/* Switches that act on one call of `cbid` in `domain` (1 driver, 2 runtime). */
int fake_switches_on(int domain, uint32_t cbid) {
    if (domain < 0 || domain >= DOMAINS || cbid >= MAX_CBID) return -1;
    int on = callback_on[domain][cbid];
    if (domain == DOMAIN_RUNTIME) on += runtime_on[cbid] + kind_on[KIND_RUNTIME];
    if (domain == DOMAIN_DRIVER) on += driver_on[cbid] + kind_on[KIND_DRIVER];
    return on;
}
/* Activity kinds on that make a record of every kernel launch outside a graph. */
int fake_kernel_kinds_on(void) { return kind_on[KIND_KERNEL] + kind_on[KIND_CONCURRENT_KERNEL]; }
/* Every running kernel finishes. */
void fake_complete_all(void) {
    pthread_mutex_lock(&pending_lock);
    for (int i = 0; i < pending_count; i++) pending[i].complete = 1;
    pthread_mutex_unlock(&pending_lock);
}
/* CUPTI's CUpti_CallbackData, as far as the library reads it. */
struct CallbackData { uint32_t site; const char *function_name; const void *params; void *return_value;
                      const char *symbol; void *context; uint32_t context_uid; uint64_t *correlation_data;
                      uint32_t correlation_id; };
/* A runtime (domain 2) or driver (1) call enters (site 0) or exits (site 1). */
void fake_api_call(int domain, uint32_t cbid, uint32_t site) {
    if (domain < 0 || domain >= DOMAINS || cbid >= MAX_CBID || !callback_on[domain][cbid] || !subscriber_callback)
        return;
    struct CallbackData data;
    memset(&data, 0, sizeof data);
    data.site = site;
    deliver(domain, cbid, &data);
}
/* CUPTI's CUpti_NvtxData. */
struct NvtxData { const char *function_name; const void *params; const void *return_value; };
/* An NVTX call with its parameter struct (and return value for the create and register calls). */
void fake_nvtx(uint32_t cbid, const void *params, const void *return_value) {
    enum { DOMAIN_NVTX = 5 };
    if (cbid >= MAX_CBID || !callback_on[DOMAIN_NVTX][cbid] || !subscriber_callback) return;
    struct NvtxData data = {"nvtx", params, return_value};
    deliver(DOMAIN_NVTX, cbid, &data);
}
CUptiResult cuptiActivityGetNumDroppedRecords(void *context, uint32_t stream, size_t *dropped) {
    (void)context; (void)stream; *dropped = 0; return OK;
}
CUptiResult cuptiGetCallbackName(int domain, uint32_t cbid, const char **name) {
    const char **names = domain == DOMAIN_RUNTIME ? RUNTIME_NAMES : domain == DOMAIN_DRIVER ? DRIVER_NAMES : NULL;
    size_t count = domain == DOMAIN_RUNTIME ? sizeof RUNTIME_NAMES / sizeof *RUNTIME_NAMES
                                            : sizeof DRIVER_NAMES / sizeof *DRIVER_NAMES;
    if (!names || cbid == 0 || cbid >= count) return INVALID_PARAMETER;
    *name = names[cbid];
    return OK;
}
CUptiResult cuptiGetResultString(CUptiResult result, const char **text) { (void)result; *text = "fake"; return OK; }
#ifndef NO_SINGLE_CALLS
/* With FAKE_CUPTI_SELECTION_AT_START_ONLY set, a single-call selection made after the first call or record is
 * ignored, as CUPTI 13.0 did on an H100 (windows opened mid-run kept their kernels and no API call). */
static int selection_ignored(void) { return work_seen && getenv("FAKE_CUPTI_SELECTION_AT_START_ONLY"); }
CUptiResult cuptiActivityEnableRuntimeApi(uint32_t cbid, uint8_t enable) {
    if (selection_ignored()) { note("runtime-ignored", cbid, enable); return OK; }
    if (cbid < MAX_CBID) runtime_on[cbid] = enable != 0;
    note("runtime", cbid, enable);
    return OK;
}
CUptiResult cuptiActivityEnableDriverApi(uint32_t cbid, uint8_t enable) {
    if (selection_ignored()) { note("driver-ignored", cbid, enable); return OK; }
    if (cbid < MAX_CBID) driver_on[cbid] = enable != 0;
    note("driver", cbid, enable);
    return OK;
}
#endif

/* Graph node and graph ids (the handles' values). */
CUptiResult cuptiGetGraphNodeId(void *node, uint64_t *id) { *id = (uint64_t)(uintptr_t)node; return OK; }
CUptiResult cuptiGetGraphId(void *graph, uint32_t *id) { *id = (uint32_t)(uintptr_t)graph; return OK; }

/* CUPTI's CUpti_ResourceData and CUpti_GraphData. */
typedef struct { void *context; void *resource_handle; void *resource_descriptor; } ResourceData;
typedef struct {
    void *graph, *original_graph, *node, *original_node;
    int node_type;
    void *dependency, *graph_exec;
} GraphData;

/* Calls the subscriber as CUPTI does when a node is made (cbid 13) or cloned (20); returns 0 when the library
 * never switched the graph callbacks on (then CUPTI would not call it either). */
int fake_cupti_graph_node(uint32_t cbid, uintptr_t graph, uintptr_t node, uintptr_t original) {
    if (!subscriber_callback || graph_callbacks_on == 0) return 0;
    GraphData graph_data = {(void *)graph, NULL, (void *)node, (void *)original, 1, NULL, NULL};
    ResourceData resource = {NULL, NULL, &graph_data};
    deliver(3, cbid, &resource);
    return 1;
}
