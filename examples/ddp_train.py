"""Data-parallel training over 2 processes: the multi-rank `bwdiag run` example.

    bwdiag run --nproc-per-node 2 examples/ddp_train.py --steps 12
    torchrun --nproc-per-node 2 -m bwdiag run examples/ddp_train.py --steps 12

gloo on the CPU, NCCL on GPUs (one per rank). Each rank writes its own trace; one report covers both.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(args.width, 4 * args.width), nn.GELU(), nn.Linear(4 * args.width, args.width),
        nn.GELU(), nn.Linear(args.width, 10),
    ).to(device)
    ddp = DDP(model, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    torch.manual_seed(1 + rank)
    x = torch.randn(args.batch, args.width, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    amp_dtype = torch.bfloat16 if use_cuda else None

    for _ in range(args.steps):
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if rank == 0:
        print(f"rank 0 of {world}: {args.steps} steps, loss {loss.item():.3f}")
    dist.barrier()  # no rank tears gloo down while another still works or still writes its trace
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
