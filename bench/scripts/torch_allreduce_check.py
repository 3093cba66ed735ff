"""Independent cross-check of `bench`'s all-reduce numbers through PyTorch's NCCL backend.

Run with `python3 -m torch.distributed.run --nproc_per_node=N torch_allreduce_check.py`. Each rank times
bf16 all-reduces with CUDA events (5 warm-up, 20 timed) at a few sizes; rank 0 prints time and bus bandwidth
with the nccl-tests factor 2(n-1)/n, the same definitions `bench` uses. PyTorch ships its own NCCL build,
so small differences from `bench` (system NCCL) are expected.
"""

import os

import torch
import torch.distributed as dist


def main() -> None:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    factor = 2 * (world - 1) / world
    for size_mib in (1, 16, 256, 1024):
        elements = size_mib * (1 << 20) // 2
        tensor = torch.randn(elements, dtype=torch.bfloat16, device="cuda")
        for _ in range(5):
            dist.all_reduce(tensor)
        torch.cuda.synchronize()
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        iterations = 20
        start.record()
        for _ in range(iterations):
            dist.all_reduce(tensor)
        end.record()
        torch.cuda.synchronize()
        time_us = torch.tensor([start.elapsed_time(end) * 1e3 / iterations], device="cuda")
        dist.all_reduce(time_us, op=dist.ReduceOp.MAX)
        if rank == 0:
            nbytes = elements * 2
            busbw = nbytes / (time_us.item() * 1e3) * factor
            print(f"torch all_reduce bf16 nranks={world} bytes={nbytes} time_us={time_us.item():.2f} busbw_gbps={busbw:.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
