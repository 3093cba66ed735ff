// Programs for the capture window benchmark (benchmarks/scripts/capture_window.py), one per first argument:
//
//   graph KERNELS REPLAYS [OFFSET|quiet]
//                            a CUDA graph of KERNELS tiny kernels, replayed REPLAYS times back to back; prints
//                            the median wall time per replay over 5 batches ("replay_us …"). The kernels add one
//                            to a counter; with OFFSET the counter sits OFFSET bytes into a 64 MiB allocation;
//                            with `quiet` the kernels touch no memory (their time does not depend on where the
//                            counter landed, which a recorder's own allocations move)
//   steady SECONDS           a long-running program: batches of 50 tiny kernels every ~2 ms for SECONDS seconds,
//                            like a server under light load; prints the launches and the elapsed time
//   profiler STEPS FIRST LAST OPS
//                            STEPS steps of OPS kernels each, with cudaProfilerStart before step FIRST and
//                            cudaProfilerStop after step LAST - 1; prints how many kernels it launched between
//                            the two calls ("launched_between …"), to compare with what a recorder kept. Each
//                            step is also an NVTX range "step" of the default domain and, inside it, one of the
//                            domain "window-check" whose message is a string registered before the first step
//                            (both made while a recorder that starts with recording off is not yet recording);
//                            prints the steps between the calls ("nvtx_steps_between …")
//
//     nvcc -O2 -o capture_window workloads/capture_window.cu
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

__global__ void tick(int* counter) { counter[threadIdx.x] += 1; }

// A tiny kernel that touches no memory (the store never runs: no thread has that index), so its time does not
// depend on where an allocation landed.
__global__ void quiet(int* counter) {
    if (threadIdx.x == 1024) counter[0] = 1;
}

// Bytes of the allocation a `graph ... OFFSET` run places its counter in.
static const size_t kPlacementBytes = 64u << 20;

static void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) {
        std::fprintf(stderr, "capture_window: %s: %s\n", what, cudaGetErrorString(status));
        std::exit(2);
    }
}

static double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

static int graph(int kernels, int replays, int* counter, bool touch_memory, cudaStream_t stream) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
    for (int i = 0; i < kernels; ++i) {
        if (touch_memory) {
            tick<<<1, 32, 0, stream>>>(counter);
        } else {
            quiet<<<1, 32, 0, stream>>>(counter);
        }
    }
    check(cudaStreamEndCapture(stream, &graph), "end capture");
    check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    for (int i = 0; i < 20; ++i) check(cudaGraphLaunch(exec, stream), "warm-up launch");
    check(cudaStreamSynchronize(stream), "warm-up");
    std::vector<double> us_per_replay;
    for (int batch = 0; batch < 5; ++batch) {
        const auto started = std::chrono::steady_clock::now();
        for (int i = 0; i < replays; ++i) check(cudaGraphLaunch(exec, stream), "launch");
        check(cudaStreamSynchronize(stream), "synchronize");
        us_per_replay.push_back(seconds_since(started) * 1e6 / replays);
    }
    std::sort(us_per_replay.begin(), us_per_replay.end());
    std::printf("replay_us %.2f min %.2f max %.2f kernels_per_replay %d replays %d\n", us_per_replay[2],
                us_per_replay.front(), us_per_replay.back(), kernels, 5 * replays + 20);
    return 0;
}

static int steady(double seconds, int* counter, cudaStream_t stream) {
    const auto started = std::chrono::steady_clock::now();
    long launches = 0;
    while (seconds_since(started) < seconds) {
        for (int i = 0; i < 50; ++i) tick<<<1, 32, 0, stream>>>(counter);
        launches += 50;
        check(cudaStreamSynchronize(stream), "synchronize");
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::printf("steady launches %ld elapsed_s %.3f\n", launches, seconds_since(started));
    return 0;
}

static int profiler(int steps, int first, int last, int ops, int* counter, cudaStream_t stream) {
    nvtxDomainHandle_t domain = nvtxDomainCreateA("window-check");
    nvtxEventAttributes_t attributes = {};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    attributes.message.registered = nvtxDomainRegisterStringA(domain, "registered step");
    long between = 0, nvtx_steps = 0;
    for (int step = 0; step < steps; ++step) {
        if (step == first) check(cudaProfilerStart(), "cudaProfilerStart");
        nvtxRangePushA("step");
        nvtxDomainRangePushEx(domain, &attributes);
        for (int i = 0; i < ops; ++i) tick<<<1, 32, 0, stream>>>(counter);
        nvtxDomainRangePop(domain);
        nvtxRangePop();
        if (step >= first && step < last) {
            between += ops;
            nvtx_steps += 1;
        }
        if (step == last - 1) check(cudaProfilerStop(), "cudaProfilerStop");
    }
    check(cudaStreamSynchronize(stream), "synchronize");
    std::printf("launched_between %ld\nnvtx_steps_between %ld\n", between, nvtx_steps);
    return 0;
}

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    int* counter;
    cudaStream_t stream;
    check(cudaMalloc(&counter, 32 * sizeof(int)), "cudaMalloc");
    check(cudaMemset(counter, 0, 32 * sizeof(int)), "cudaMemset");
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (std::strcmp(mode, "graph") == 0 && argc == 4)
        return graph(std::atoi(argv[2]), std::atoi(argv[3]), counter, true, stream);
    if (std::strcmp(mode, "graph") == 0 && argc == 5 && std::strcmp(argv[4], "quiet") == 0)
        return graph(std::atoi(argv[2]), std::atoi(argv[3]), counter, false, stream);
    if (std::strcmp(mode, "graph") == 0 && argc == 5) {
        const size_t offset = std::strtoull(argv[4], nullptr, 10) & ~size_t{127};
        if (offset + 32 * sizeof(int) > kPlacementBytes) {
            std::fprintf(stderr, "capture_window: OFFSET must be below %zu\n", kPlacementBytes);
            return 2;
        }
        char* placed;
        check(cudaMalloc(&placed, kPlacementBytes), "cudaMalloc placement");
        check(cudaMemset(placed, 0, kPlacementBytes), "cudaMemset placement");
        return graph(std::atoi(argv[2]), std::atoi(argv[3]), reinterpret_cast<int*>(placed + offset), true, stream);
    }
    if (std::strcmp(mode, "steady") == 0 && argc == 3) return steady(std::atof(argv[2]), counter, stream);
    if (std::strcmp(mode, "profiler") == 0 && argc == 6)
        return profiler(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]), counter, stream);
    std::fprintf(stderr,
                 "capture_window: usage: capture_window graph KERNELS REPLAYS [OFFSET|quiet] | steady SECONDS | "
                 "profiler STEPS FIRST LAST OPS\n");
    return 2;
}
