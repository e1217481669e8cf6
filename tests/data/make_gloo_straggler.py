"""Record tests/data/gloo_straggler/: a 2-rank gloo all_reduce loop on CPU where rank 1 is slow.

Rank 1 sleeps SLOW_S before each of STEPS all_reduces, so rank 0 waits for it inside every call.
Run: python tests/data/make_gloo_straggler.py   (about 20 s; writes two small gzip traces)
"""

import gzip
import os
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

STEPS = 4
SLOW_S = 0.05
OUT = Path(__file__).resolve().parent / "gloo_straggler"


def worker(rank: int, world: int, port: int) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x = torch.randn(1 << 18)
    dist.all_reduce(x.clone())  # connect before profiling
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(STEPS):
            y = x * 2 + 1
            if rank == 1:
                time.sleep(SLOW_S)
            dist.all_reduce(y)
            y.sum()
    raw = OUT / f"rank{rank}.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(f"{raw}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    OUT.mkdir(exist_ok=True)
    mp.spawn(worker, args=(2, 29000 + os.getpid() % 1000), nprocs=2)
    sys.exit(0)
