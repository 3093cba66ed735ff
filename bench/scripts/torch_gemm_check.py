"""Independent cross-check of `bench`'s GEMM numbers through PyTorch (which also calls cuBLAS).

Times `torch.nn.functional.linear` (Y = X·Wᵀ, bf16) with CUDA events, 5 warm-up and 20 timed calls, for
the shapes `bench` measures, and prints TFLOP/s as 2·m·n·k / t.
"""

import torch
import torch.nn.functional as F

SHAPES = [(8192, 8192, 8192), (4096, 11008, 4096), (4096, 4096, 11008), (64, 11008, 4096), (4, 11008, 4096)]


def main() -> None:
    for m, n, k in SHAPES:
        x = torch.rand(m, k, dtype=torch.bfloat16, device="cuda") * 2 - 1
        w = torch.rand(n, k, dtype=torch.bfloat16, device="cuda") * 2 - 1
        for _ in range(5):
            F.linear(x, w)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        iterations = 20
        start.record()
        for _ in range(iterations):
            F.linear(x, w)
        end.record()
        torch.cuda.synchronize()
        time_us = start.elapsed_time(end) * 1e3 / iterations
        print(f"torch linear bf16 m={m} n={n} k={k} time_us={time_us:.2f} tflops={2 * m * n * k / (time_us * 1e6):.1f}")


if __name__ == "__main__":
    main()
