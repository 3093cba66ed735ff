/* A stand-in libcupti for tests without a GPU: it answers the calls the injection library makes at start
 * and writes each enabling call to the file named by FAKE_CUPTI_LOG, one per line:
 *   kind <activity kind>
 *   runtime <callback id> <0|1>
 *   driver <callback id> <0|1>
 *   resource-callback <callback id> <0|1>
 * Built with -DNO_SINGLE_CALLS it lacks cuptiActivityEnableRuntimeApi/DriverApi, like a CUPTI older than 12.6.
 * fake_cupti_graph_node() plays CUPTI calling the subscriber for a graph node made or cloned; node and graph ids
 * are the handles' own values.
 * Callback names follow CUPTI's spelling; ids are this fake's own. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUptiResult;
enum { OK = 0, INVALID_PARAMETER = 1 };
enum { DOMAIN_DRIVER = 1, DOMAIN_RUNTIME = 2 };

static const char *RUNTIME_NAMES[] = {NULL, "cudaGetDevice_v3020", "cudaLaunchKernel_v7000",
                                      "cudaStreamIsCapturing_v10000", "cudaMemcpyAsync_v3020",
                                      "cudaStreamSynchronize_v3020", "cudaGetLastError_v3020"};
static const char *DRIVER_NAMES[] = {NULL, "cuCtxGetCurrent", "cuLaunchKernelEx", "cuDriverGetVersion",
                                     "cuGetProcAddress_v2", "cuStreamWaitEvent"};

static void note(const char *what, unsigned a, int b) {
    const char *path = getenv("FAKE_CUPTI_LOG");
    FILE *log = path ? fopen(path, "a") : NULL;
    if (!log) return;
    if (b < 0) fprintf(log, "%s %u\n", what, a); else fprintf(log, "%s %u %d\n", what, a, b);
    fclose(log);
}

CUptiResult cuptiGetVersion(uint32_t *version) { *version = 130001; return OK; }
CUptiResult cuptiGetTimestamp(uint64_t *ts) { *ts = 1000; return OK; }
/* CUPTI allows one subscriber per process: a second one is refused (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED). */
static int subscribers;
typedef void (*Callback)(void *userdata, int domain, uint32_t cbid, const void *data);
static Callback subscriber_callback;
static void *subscriber_data;
CUptiResult cuptiSubscribe(void **subscriber, void *callback, void *data) {
    if (subscribers > 0) return 39;
    subscribers++;
    subscriber_callback = (Callback)callback;
    subscriber_data = data;
    *subscriber = (void *)1;
    return OK;
}
CUptiResult cuptiActivityEnable(int kind) { note("kind", (unsigned)kind, -1); return OK; }
CUptiResult cuptiActivityRegisterCallbacks(void *requested, void *completed) {
    (void)requested; (void)completed; return OK;
}
CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, void **record) {
    (void)buffer; (void)valid; (void)record; return 12; /* MAX_LIMIT_REACHED: no records */
}
CUptiResult cuptiActivityFlushAll(uint32_t flag) { (void)flag; return OK; }
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
CUptiResult cuptiActivityEnableRuntimeApi(uint32_t cbid, uint8_t enable) { note("runtime", cbid, enable); return OK; }
CUptiResult cuptiActivityEnableDriverApi(uint32_t cbid, uint8_t enable) { note("driver", cbid, enable); return OK; }
#endif

/* The callback API's enabling call, and graph node and graph ids (the handles' values). */
static int graph_callbacks_on;
CUptiResult cuptiEnableCallback(uint32_t enable, void *subscriber, int domain, uint32_t cbid) {
    (void)subscriber;
    if (domain != 3) return INVALID_PARAMETER;
    note("resource-callback", cbid, (int)enable);
    if (enable) graph_callbacks_on++;
    return OK;
}
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
    subscriber_callback(subscriber_data, 3, cbid, &resource);
    return 1;
}
