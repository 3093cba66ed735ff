// Host time of one kernel launch, the quantity a recorder adds to on a launch-bound run.
//
// Launches an empty kernel in batches small enough never to fill the launch queue (so the GPU never
// makes the host wait), times only the launching of each batch, synchronises between batches, and
// prints the median, 10th and 90th percentile ns per launch over all batches. An NVTX range around
// every batch gives recorders that trace NVTX their usual work too.
//
// With CONTEXTS > 1 the measurement is repeated in that many fresh primary contexts of one process
// (`cudaDeviceReset` between them), a line per context, and the last line gives the median and mean of
// the contexts' medians (the median first, where a single context prints its own). The host cost of a
// launch settles at a different level in each new process (±10–25 % on a virtual machine); if it does so
// per context too, averaging contexts inside one process narrows what a few processes can resolve.
//
// Taking turns (LAUNCH_COST_TURNS=IN,OUT,READY, three FIFO paths): two processes on one CPU time their
// batches alternately, so that whatever the machine does over seconds touches both alike. After its
// warm-up a process writes a byte to READY; then before each batch it waits for a byte on IN and after
// the batch (synchronised) it passes the byte on to OUT, the other process's IN. Whoever starts the two
// off writes the first byte into one of the INs once READY holds two bytes.
//
//     nvcc -O2 -o launch_cost workloads/launch_cost.cu && ./launch_cost 2000 100 [CONTEXTS]
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

__global__ void empty_kernel() {}

static void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) {
        std::fprintf(stderr, "launch_cost: %s: %s\n", what, cudaGetErrorString(status));
        std::exit(2);
    }
}

/// The FIFOs of LAUNCH_COST_TURNS, opened read-write so that opening never waits for the other side;
/// all -1 when the variable is unset (every batch then runs at once).
struct Turns {
    int in = -1, out = -1, ready = -1;

    static Turns from_env() {
        Turns turns;
        const char* spec = std::getenv("LAUNCH_COST_TURNS");
        if (spec == nullptr || *spec == '\0') return turns;
        std::string paths[3];
        int field = 0;
        for (const char* c = spec; *c != '\0'; ++c) {
            if (*c == ',') {
                if (++field > 2) break;
            } else {
                paths[field] += *c;
            }
        }
        if (field != 2) {
            std::fprintf(stderr, "launch_cost: LAUNCH_COST_TURNS: three FIFO paths IN,OUT,READY\n");
            std::exit(2);
        }
        int* fds[3] = {&turns.in, &turns.out, &turns.ready};
        for (int i = 0; i < 3; ++i) {
            *fds[i] = open(paths[i].c_str(), O_RDWR);
            if (*fds[i] < 0) {
                std::fprintf(stderr, "launch_cost: %s: %s\n", paths[i].c_str(), std::strerror(errno));
                std::exit(2);
            }
        }
        return turns;
    }
    bool on() const { return in >= 0; }
    static void put(int fd) {
        const char token = 't';
        if (write(fd, &token, 1) != 1) {
            std::fprintf(stderr, "launch_cost: passing the turn: %s\n", std::strerror(errno));
            std::exit(2);
        }
    }
    void wait_turn() const {
        char token;
        if (read(in, &token, 1) != 1) {
            std::fprintf(stderr, "launch_cost: waiting for the turn: %s\n", std::strerror(errno));
            std::exit(2);
        }
    }
};

/// Median, 10th and 90th percentile of the batches' ns per launch in one context.
struct LaunchNs {
    double median, p10, p90;
};

static LaunchNs time_one_context(int batches, int per_batch, const Turns& turns) {
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // Warm-up: module load, the recorder's first buffers.
    for (int i = 0; i < 5 * per_batch; ++i) empty_kernel<<<1, 1, 0, stream>>>();
    check(cudaStreamSynchronize(stream), "warm-up");
    if (turns.on()) Turns::put(turns.ready);

    std::vector<double> ns_per_launch;
    ns_per_launch.reserve(batches);
    for (int b = 0; b < batches; ++b) {
        if (turns.on()) turns.wait_turn();
        nvtxRangePushA("batch");
        const auto started = std::chrono::steady_clock::now();
        for (int i = 0; i < per_batch; ++i) empty_kernel<<<1, 1, 0, stream>>>();
        const auto launched = std::chrono::steady_clock::now();
        nvtxRangePop();
        check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        if (turns.on()) Turns::put(turns.out);
        ns_per_launch.push_back(std::chrono::duration<double, std::nano>(launched - started).count() / per_batch);
    }
    check(cudaGetLastError(), "launch");
    check(cudaStreamDestroy(stream), "cudaStreamDestroy");
    std::sort(ns_per_launch.begin(), ns_per_launch.end());
    auto at = [&](double q) { return ns_per_launch[static_cast<size_t>(q * (ns_per_launch.size() - 1))]; };
    return {at(0.5), at(0.1), at(0.9)};
}

int main(int argc, char** argv) {
    const int batches = argc > 1 ? std::atoi(argv[1]) : 2000;
    const int per_batch = argc > 2 ? std::atoi(argv[2]) : 100;
    const int contexts = argc > 3 ? std::atoi(argv[3]) : 1;
    if (batches <= 0 || per_batch <= 0 || per_batch > 1000 || contexts <= 0 || contexts > 1000) {
        std::fprintf(stderr, "launch_cost: usage: launch_cost BATCHES LAUNCHES_PER_BATCH (1..1000) [CONTEXTS (1..1000)]\n");
        return 2;
    }
    const Turns turns = Turns::from_env();
    if (turns.on() && contexts != 1) {
        std::fprintf(stderr, "launch_cost: LAUNCH_COST_TURNS takes one context\n");
        return 2;
    }
    if (contexts == 1) {
        const LaunchNs ns = time_one_context(batches, per_batch, turns);
        std::printf("launch_ns median %.1f p10 %.1f p90 %.1f launches %d\n", ns.median, ns.p10, ns.p90,
                    batches * per_batch);
        return 0;
    }
    std::vector<double> medians;
    for (int c = 0; c < contexts; ++c) {
        if (c > 0) check(cudaDeviceReset(), "cudaDeviceReset");
        const LaunchNs ns = time_one_context(batches, per_batch, turns);
        std::printf("context %d ns_per_launch median %.1f p10 %.1f p90 %.1f\n", c, ns.median, ns.p10, ns.p90);
        medians.push_back(ns.median);
    }
    double sum = 0;
    for (double m : medians) sum += m;
    std::sort(medians.begin(), medians.end());
    std::printf("launch_ns median %.1f mean %.1f min %.1f max %.1f contexts %d launches %d\n",
                medians[medians.size() / 2], sum / contexts, medians.front(), medians.back(), contexts,
                batches * per_batch * contexts);
    return 0;
}
