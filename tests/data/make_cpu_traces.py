"""Record the small CPU traces the findings tests use (torch.profiler, CPU, ``record_shapes=True``).

Each workload runs once as a warm-up outside the trace, then three times inside it, each time in a
``ProfilerStep#N`` range, on one thread. Tensors are fp32 and large enough (4 MiB) to leave the
caches. Run from the repository root:

    python tests/data/make_cpu_traces.py

* ``cpu_elementwise_chain.json.gz`` — a small GEMM, then 5 pointwise ops over its [1024, 1024]
  output (mul → add → tanh → mul → sigmoid), then a second small GEMM.
* ``cpu_attention.json.gz`` — eager attention over [8, 256, 64] q/k/v: bmm → div → softmax → bmm.
* ``cpu_adamw.json.gz`` — a training step of a 2-layer MLP (512 → 1024 → 512) with
  ``torch.optim.AdamW(foreach=False)``: the per-parameter optimizer loop.
* ``cpu_conversions.json.gz`` — a dtype round trip (fp32 → bf16 → fp32 of the same tensor) and a
  materialised permute (``x.permute(0, 2, 1).contiguous()``).
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

HERE = Path(__file__).parent


def chain(x, w1, w2, scale, shift):
    h = x @ w1                       # aten::mm  [1024, 64] x [64, 1024]
    h = h * scale                    # aten::mul  (tensor operands: a scalar would add an aten::to)
    h = h + shift                    # aten::add
    h = torch.tanh(h)                # aten::tanh
    h = h * scale                    # aten::mul
    h = torch.sigmoid(h)             # aten::sigmoid
    return h @ w2                    # aten::mm  [1024, 1024] x [1024, 64]


def attention(q, k, v):
    scores = torch.bmm(q, k.transpose(1, 2))     # [8, 256, 256]
    scores = scores / 8.0
    probs = torch.softmax(scores, dim=-1)
    return torch.bmm(probs, v)


def conversions(x, y):
    z = x.to(torch.bfloat16).to(torch.float32)   # round trip of the same tensor
    p = y.permute(0, 2, 1).contiguous()           # materialised permute
    return z, p


def adamw_step(model, opt, x):
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()


def record(name: str, fn, *args) -> None:
    fn(*args)  # warm-up, outside the trace
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for i in range(3):
            with record_function(f"ProfilerStep#{i}"):
                fn(*args)
    out = HERE / name
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    record("cpu_elementwise_chain.json.gz", chain, torch.randn(1024, 64), torch.randn(64, 1024) / 8,
           torch.randn(1024, 64) / 32, torch.full((1024, 1024), 0.5), torch.ones(1024, 1024))
    record("cpu_attention.json.gz", attention, torch.randn(8, 256, 64), torch.randn(8, 256, 64),
           torch.randn(8, 256, 64))
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
    record("cpu_adamw.json.gz", adamw_step, mlp, torch.optim.AdamW(mlp.parameters(), lr=1e-3, foreach=False),
           torch.randn(64, 512))
    record("cpu_conversions.json.gz", conversions, torch.randn(1024, 1024), torch.randn(16, 256, 256))


if __name__ == "__main__":
    main()
