"""Record ``cpu_elementwise_chain.json.gz``: a CPU workload whose time is an unfused elementwise chain.

Each step: a small GEMM, then a chain of 5 pointwise ops over its [1024, 1024] fp32 output (4 MiB
per tensor, larger than L2), then a second small GEMM. Recorded with torch.profiler on
CPU with ``record_shapes=True``: three steps (``ProfilerStep#N`` ranges), one thread. Run from the repository root:

    python tests/data/make_cpu_chain.py
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

OUT = Path(__file__).with_name("cpu_elementwise_chain.json.gz")


def step(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, scale: torch.Tensor,
         shift: torch.Tensor) -> torch.Tensor:
    h = x @ w1                       # aten::mm  [1024, 64] x [64, 1024]
    h = h * scale                    # aten::mul  (tensor operands: a scalar would add an aten::to)
    h = h + shift                    # aten::add
    h = torch.tanh(h)                # aten::tanh
    h = h * scale                    # aten::mul
    h = torch.sigmoid(h)             # aten::sigmoid
    return h @ w2                    # aten::mm  [1024, 1024] x [1024, 64]


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(1024, 64)
    w1 = torch.randn(64, 1024) / 8
    w2 = torch.randn(1024, 64) / 32
    scale = torch.full((1024, 1024), 0.5)
    shift = torch.ones(1024, 1024)
    step(x, w1, w2, scale, shift)  # warm-up, outside the trace
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for i in range(3):
            with record_function(f"ProfilerStep#{i}"):
                step(x, w1, w2, scale, shift)
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as src, gzip.open(OUT, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
