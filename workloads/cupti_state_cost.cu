// What each CUPTI state a recorder leaves on costs a launch, measured inside one process.
//
// Between processes the host time of a bare launch varies by up to 30 % (core, clock, placement), which hides
// a 5 % effect. This program switches CUPTI states on and off in one process and times the same work under
// each, in rotated order, many cycles, so every state is compared on the same core and clock:
//
//   launch   host ns per launch of an empty kernel (batches of 100, never filling the queue)
//   graph    wall µs per replay of a graph of 400 tiny kernels, replayed 100 times back to back; the graph is
//            instantiated afresh under each state (CUPTI may prepare a graph's instrumentation at instantiation)
//   loadorder  with the graph-trace kind on: a graph of a kernel loaded before the kind went on against a graph of
//            one first launched (loaded) after it, replayed alternately; then both again with the kind off
//            (`cupti_state_cost loadorder CYCLES -`)
//
// States (CUPTI is first touched after the `fresh` cycles, so `fresh` is the process as it runs uncaptured, unless
// CUPTI_STATE_COST_EARLY is set: then CUPTI is attached before the first CUDA call, as an injected recorder is):
//   none        unsubscribed, no activity kind (CUPTI attached to the driver)
//   detached    as none, then cuptiFinalize: CUPTI detached from the driver until the next state's first call
//   sub         a subscriber, no callback enabled
//   rt-trig     + the runtime callbacks of cudaProfilerStart/Stop
//   drv-trig    + the driver callbacks of cuProfilerStart/Stop
//   both-trig   + both
//   rt-domain   + every runtime callback (the whole domain)
//   device      activity buffers and the device kind, no subscriber
//   graph-kind  the graph-trace activity kind (graph-level records)
//   kernel-kind the concurrent-kernel activity kind (node-level records)
//   graph-live  the graph-trace kind switched on while a graph instantiated before it is replayed (the graph part
//               replays that one graph instead of a fresh one): CUPTI 13.0 crashed in cuGraphLaunch (a SIGSEGV
//               handler prints where)
//   graph-device the graph-trace kind with the device kind (as a capture switches them)
//   graph-kernel both: the graph-trace kind switched on first, then the concurrent-kernel kind (how a capture at
//               graph level that also records kernels outside graphs switches them)
//   node-cb     a subscriber with the graph-node created/cloned resource callbacks
//   events      no CUPTI; a timing CUDA event recorded before and after each graph launch (how a recorder could
//               time whole graphs without CUPTI; graph part only)
//   all-off     what capture leaves on outside a window: subscriber, both triggers, node callbacks, device kind
//
//     nvcc -O2 -I$CUDA/extras/CUPTI/include -o cupti_state_cost workloads/cupti_state_cost.cu -lcupti
//     ./cupti_state_cost launch 30 none,sub,both-trig,device
//
// Prints how many graph-trace records CUPTI delivered and how many carry timestamps, then one line per state:
// "state NAME part PART median X min Y max Z ratio_to_fresh R cycles N" (X: ns per launch or µs per replay, the
// median over cycles of each cycle's median).
#include <cupti.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

__global__ void empty_kernel() {}
__global__ void tick(int* counter) { counter[threadIdx.x] += 1; }
// Used only by the load-order part: first launched (and so loaded) after the graph-trace kind is on.
__global__ void tock(int* counter) { counter[threadIdx.x] += 2; }

static void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) {
        std::fprintf(stderr, "cupti_state_cost: %s: %s\n", what, cudaGetErrorString(status));
        std::exit(2);
    }
}

static void check_cupti(CUptiResult status, const char* what) {
    if (status != CUPTI_SUCCESS) {
        const char* text = "?";
        cuptiGetResultString(status, &text);
        std::fprintf(stderr, "cupti_state_cost: %s: %s\n", what, text);
        std::exit(2);
    }
}

static void CUPTIAPI on_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

static const size_t BUFFER_BYTES = 8 << 20;
static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, BUFFER_BYTES));
    *size = BUFFER_BYTES;
    *max_records = 0;
}
// Graph-trace records delivered, and how many of them carry timestamps.
static size_t graph_records = 0, graph_records_timed = 0;
static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_GRAPH_TRACE) continue;
        uint64_t start = 0;  // after the kind and the correlation id
        std::memcpy(&start, reinterpret_cast<uint8_t*>(record) + 8, sizeof start);
        graph_records++;
        graph_records_timed += start != 0;
    }
    std::free(buffer);
}

// One CUPTI state: what `enter` switches on, `leave` switches off again.
struct Cupti {
    CUpti_SubscriberHandle subscriber = nullptr;
    bool buffers = false;

    void subscribe() { check_cupti(cuptiSubscribe(&subscriber, on_callback, nullptr), "cuptiSubscribe"); }
    void callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
        check_cupti(cuptiEnableCallback(1, subscriber, domain, cbid), "cuptiEnableCallback");
    }
    void kind(CUpti_ActivityKind kind, bool on) {
        if (!buffers) {
            check_cupti(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register buffers");
            buffers = true;
        }
        check_cupti(on ? cuptiActivityEnable(kind) : cuptiActivityDisable(kind), "cuptiActivityEnable/Disable");
    }

    void enter(const std::string& state) {
        if (state == "detached") {
            check_cupti(cuptiActivityFlushAll(0), "flush");
            buffers = false;  // registered again after the next attach
            return check_cupti(cuptiFinalize(), "cuptiFinalize");
        }
        if (state == "none") {  // attached (again, after `detached`), nothing on
            subscribe();
            check_cupti(cuptiUnsubscribe(subscriber), "cuptiUnsubscribe");
            return;
        }
        if (state == "fresh" || state == "events") return;
        if (state == "device") return kind(CUPTI_ACTIVITY_KIND_DEVICE, true);
        if (state == "graph-kind") return kind(CUPTI_ACTIVITY_KIND_GRAPH_TRACE, true);
        if (state == "kernel-kind") return kind(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, true);
        if (state == "graph-live") return kind(CUPTI_ACTIVITY_KIND_GRAPH_TRACE, true);
        if (state == "graph-device") {
            kind(CUPTI_ACTIVITY_KIND_DEVICE, true);
            return kind(CUPTI_ACTIVITY_KIND_GRAPH_TRACE, true);
        }
        if (state == "graph-kernel") {
            kind(CUPTI_ACTIVITY_KIND_GRAPH_TRACE, true);
            return kind(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, true);
        }
        subscribe();
        if (state == "all-off") {
            kind(CUPTI_ACTIVITY_KIND_DEVICE, true);
            for (const char* part : {"both-trig", "node-cb"}) enable_callbacks(part);
            return;
        }
        enable_callbacks(state);
    }

    void enable_callbacks(const std::string& state) {
        if (state == "rt-trig" || state == "both-trig") {
            callback(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000);
            callback(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000);
        }
        if (state == "drv-trig" || state == "both-trig") {
            callback(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart);
            callback(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop);
        }
        if (state == "rt-domain") check_cupti(cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API), "domain");
        if (state == "node-cb") {
            callback(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED);
            callback(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED);
        }
    }

    void leave(const std::string& state) {
        if (state == "none" || state == "fresh" || state == "events" || state == "detached") return;
        if (state == "device") return kind(CUPTI_ACTIVITY_KIND_DEVICE, false);
        if (state == "all-off") kind(CUPTI_ACTIVITY_KIND_DEVICE, false);
        if (state == "graph-kernel") kind(CUPTI_ACTIVITY_KIND_GRAPH_TRACE, false);
        if (state == "graph-device") {
            kind(CUPTI_ACTIVITY_KIND_DEVICE, false);
            kind(CUPTI_ACTIVITY_KIND_GRAPH_TRACE, false);
            return check_cupti(cuptiActivityFlushAll(0), "flush");
        }
        if (state == "graph-kind" || state == "kernel-kind" || state == "graph-kernel" || state == "graph-live") {
            kind(state == "graph-kind" || state == "graph-live" ? CUPTI_ACTIVITY_KIND_GRAPH_TRACE : CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, false);
            check_cupti(cuptiActivityFlushAll(0), "flush");
            return;
        }
        check_cupti(cuptiUnsubscribe(subscriber), "cuptiUnsubscribe");
        subscriber = nullptr;
    }
};

static double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

// Median host ns per launch over 200 batches of 100 empty kernels.
static double launch_ns(cudaStream_t stream) {
    std::vector<double> per_launch;
    for (int batch = 0; batch < 200; ++batch) {
        const auto started = std::chrono::steady_clock::now();
        for (int i = 0; i < 100; ++i) empty_kernel<<<1, 1, 0, stream>>>();
        const auto launched = std::chrono::steady_clock::now();
        check(cudaStreamSynchronize(stream), "synchronize");
        per_launch.push_back(std::chrono::duration<double, std::nano>(launched - started).count() / 100);
    }
    return median(per_launch);
}

// Median wall µs per replay over 3 batches of 100 back-to-back replays of a freshly instantiated graph.
static double replay_us(cudaGraph_t graph, cudaStream_t stream, bool events, cudaGraphExec_t kept) {
    cudaEvent_t marks[2 * 100];
    if (events)
        for (auto& mark : marks) check(cudaEventCreate(&mark), "event create");
    cudaGraphExec_t exec = kept;
    if (!kept) check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    for (int i = 0; i < 10; ++i) check(cudaGraphLaunch(exec, stream), "warm-up");
    check(cudaStreamSynchronize(stream), "warm-up");
    std::vector<double> per_replay;
    for (int batch = 0; batch < 3; ++batch) {
        const auto started = std::chrono::steady_clock::now();
        for (int i = 0; i < 100; ++i) {
            if (events) check(cudaEventRecord(marks[2 * i], stream), "event record");
            check(cudaGraphLaunch(exec, stream), "launch");
            if (events) check(cudaEventRecord(marks[2 * i + 1], stream), "event record");
        }
        check(cudaStreamSynchronize(stream), "synchronize");
        per_replay.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started).count() / 100);
    }
    if (!kept) check(cudaGraphExecDestroy(exec), "exec destroy");
    if (events)
        for (auto& mark : marks) check(cudaEventDestroy(mark), "event destroy");
    return median(per_replay);
}

// A graph of 400 launches of `kernel`, captured on `stream`.
static cudaGraph_t captured_graph(void (*kernel)(int*), int* counter, cudaStream_t stream) {
    cudaGraph_t graph;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
    for (int i = 0; i < 400; ++i) kernel<<<1, 32, 0, stream>>>(counter);
    check(cudaStreamEndCapture(stream, &graph), "end capture");
    return graph;
}

// The load-order part (see the top): whether the graph-trace kind costs more on kernels loaded while it is on.
static int load_order(int cycles) {
    if (cycles <= 0 || cycles > 1000) return 2;
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    int* counter;
    check(cudaMalloc(&counter, 32 * sizeof(int)), "malloc");
    cudaGraph_t before = captured_graph(tick, counter, stream);
    replay_us(before, stream, false, nullptr);  // loads `tick`, warms up
    Cupti cupti;
    cupti.kind(CUPTI_ACTIVITY_KIND_GRAPH_TRACE, true);
    cudaGraph_t after = captured_graph(tock, counter, stream);
    std::map<std::string, std::vector<double>> samples;
    for (int cycle = 0; cycle < cycles; ++cycle) {
        samples["on, loaded before"].push_back(replay_us(before, stream, false, nullptr));
        samples["on, loaded after"].push_back(replay_us(after, stream, false, nullptr));
    }
    cupti.kind(CUPTI_ACTIVITY_KIND_GRAPH_TRACE, false);
    check_cupti(cuptiActivityFlushAll(0), "flush");
    for (int cycle = 0; cycle < cycles; ++cycle) {
        samples["off, loaded before"].push_back(replay_us(before, stream, false, nullptr));
        samples["off, loaded after"].push_back(replay_us(after, stream, false, nullptr));
    }
    for (const auto& [what, values] : samples)
        std::printf("loadorder kind %s: median %.2f min %.2f max %.2f\n", what.c_str(), median(values),
                    *std::min_element(values.begin(), values.end()), *std::max_element(values.begin(), values.end()));
    return 0;
}

// Where a crash happened, on stderr (no debugger on the GPU machines).
static void on_crash(int signal_number) {
    void* frames[32];
    const int depth = backtrace(frames, 32);
    std::fprintf(stderr, "cupti_state_cost: signal %d\n", signal_number);
    backtrace_symbols_fd(frames, depth, 2);
    _exit(128 + signal_number);
}

int main(int argc, char** argv) {
    signal(SIGSEGV, on_crash);
    const bool known = std::strcmp(argv[1], "launch") == 0 || std::strcmp(argv[1], "graph") == 0 ||
                       std::strcmp(argv[1], "loadorder") == 0;
    if (argc != 4 || !known) {
        std::fprintf(stderr, "cupti_state_cost: usage: cupti_state_cost launch|graph|loadorder CYCLES STATE,STATE,...\n");
        return 2;
    }
    const bool graph_part = std::strcmp(argv[1], "graph") == 0;
    if (std::strcmp(argv[1], "loadorder") == 0) return load_order(std::atoi(argv[2]));
    const int cycles = std::atoi(argv[2]);
    std::vector<std::string> states;
    std::stringstream list(argv[3]);
    for (std::string state; std::getline(list, state, ',');) states.push_back(state);
    if (cycles <= 0 || cycles > 1000 || states.empty()) {
        std::fprintf(stderr, "cupti_state_cost: CYCLES in 1..1000 and at least one state\n");
        return 2;
    }
    Cupti cupti;
    // CUPTI_STATE_COST_EARLY set: CUPTI attached before the context exists (as an injected recorder is), so
    // `fresh` is then "attached from the start, nothing on", to compare with a process where it is not.
    if (std::getenv("CUPTI_STATE_COST_EARLY") != nullptr) {
        uint64_t now_ns = 0;
        check_cupti(cuptiGetTimestamp(&now_ns), "early timestamp");
    }
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    int* counter;
    check(cudaMalloc(&counter, 32 * sizeof(int)), "malloc");
    cudaGraph_t graph;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
    for (int i = 0; i < 400; ++i) tick<<<1, 32, 0, stream>>>(counter);
    check(cudaStreamEndCapture(stream, &graph), "end capture");
    std::string current;
    cudaGraphExec_t kept;
    check(cudaGraphInstantiate(&kept, graph, 0), "instantiate");
    auto measure = [&] {
        if (!graph_part) return launch_ns(stream);
        return replay_us(graph, stream, current == "events", current == "graph-live" ? kept : nullptr);
    };
    measure();  // warm-up: module load, first launches

    std::map<std::string, std::vector<double>> samples;
    // `fresh` first, before any CUPTI call: the process as it runs with no recorder.
    for (int cycle = 0; cycle < cycles; ++cycle) samples["fresh"].push_back(measure());
    for (int cycle = 0; cycle < cycles; ++cycle) {
        for (size_t i = 0; i < states.size(); ++i) {
            const std::string& state = states[(i + cycle) % states.size()];
            current = state;
            cupti.enter(state);
            samples[state].push_back(measure());
            cupti.leave(state);
        }
    }
    if (cupti.buffers) check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
    std::printf("graph_records %zu timed %zu\n", graph_records, graph_records_timed);
    const double base = median(samples["fresh"]);
    for (const auto& [state, values] : samples) {
        std::printf("state %s part %s median %.2f min %.2f max %.2f ratio_to_fresh %.4f cycles %zu\n", state.c_str(),
                    argv[1], median(values), *std::min_element(values.begin(), values.end()),
                    *std::max_element(values.begin(), values.end()), median(values) / base, values.size());
    }
    return 0;
}
