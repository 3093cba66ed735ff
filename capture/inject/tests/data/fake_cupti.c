/* A stand-in libcupti for tests without a GPU: it answers the calls the injection library makes at start
 * and writes each enabling call to the file named by FAKE_CUPTI_LOG, one per line:
 *   kind <activity kind>
 *   runtime <callback id> <0|1>
 *   driver <callback id> <0|1>
 * Built with -DNO_SINGLE_CALLS it lacks cuptiActivityEnableRuntimeApi/DriverApi, like a CUPTI older than 12.6.
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
CUptiResult cuptiSubscribe(void **subscriber, void *callback, void *data) {
    (void)callback; (void)data; *subscriber = (void *)1; return OK;
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
