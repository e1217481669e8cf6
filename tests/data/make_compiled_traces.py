"""Record the small torch.compile CPU traces of tests/test_compiled_cpu.py (torch.profiler, CPU,
``record_shapes=True``, one thread).

Each workload is compiled and called twice before the trace (compilation and first-call warm-up
stay out of it, except in ``cpu_compile_in_window``), then runs three times inside it, each time in
a ``ProfilerStep#N`` range. The script's own ``time.perf_counter()`` around every traced call goes
to ``compiled_timings.json`` (µs), the independent clock the tests compare bwdiag's busy time with.
Run from the repository root (about a minute on two cores):

    python tests/data/make_compiled_traces.py

* ``cpu_compiled_chain.json.gz`` — inference (``no_grad``): a compiled pointwise chain
  (mul → add → tanh → mul → sigmoid over [512, 512] fp32; Inductor fuses it into one C++ loop that
  records no op), then a 1-element step counter updated eagerly (``acc + 1``, ``* 0.5``).
* ``cpu_compiled_chain_grad.json.gz`` — the same chain with ``x.requires_grad``, then
  ``y.sum().backward()``: the forward runs inside ``CompiledFunction`` (the graph inputs' shapes
  recorded), the backward inside ``CompiledFunctionBackward``.
* ``cpu_compiled_mlp_train.json.gz`` — a training step of a compiled MLP (256 → 512 → 256, ReLU)
  with ``torch._inductor.config.cpp.enable_kernel_profile = True``: extern ``aten::addmm``/``mm``
  calls and named ``graph_*_cpp_fused_*`` kernels inside the graph calls.
* ``cpu_compile_in_window.json.gz`` — a tiny compiled function whose *first* call (compilation)
  falls in step 0.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

HERE = Path(__file__).parent


def chain(x, scale, shift):
    h = x * scale
    h = h + shift
    h = torch.tanh(h)
    h = h * scale
    return torch.sigmoid(h)


def record(name: str, step, warm: int = 2) -> list[float]:
    for _ in range(warm):
        step()
    times = []
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for i in range(3):
            with record_function(f"ProfilerStep#{i}"):
                times.append(step())
    out = HERE / name
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return times


def timed(fn):
    """perf_counter (µs) around the compiled call only."""
    def call(*args):
        t = time.perf_counter()
        out = fn(*args)
        return out, (time.perf_counter() - t) * 1e6
    return call


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    timings: dict[str, list[float]] = {}
    x, s, b = torch.randn(512, 512), torch.full((512, 512), 0.5), torch.ones(512, 512)

    f = timed(torch.compile(chain))
    acc = [torch.zeros(1)]

    def infer():
        with torch.no_grad():
            _, us = f(x, s, b)
            acc[0] = (acc[0] + 1) * 0.5  # the 1-element leftover, eager
        return us
    timings["cpu_compiled_chain.json.gz"] = record("cpu_compiled_chain.json.gz", infer)

    xg = x.clone().requires_grad_(True)
    g = timed(torch.compile(chain))

    def train_chain():
        y, us = g(xg, s, b)
        y.sum().backward()
        return us
    timings["cpu_compiled_chain_grad.json.gz"] = record("cpu_compiled_chain_grad.json.gz", train_chain)

    import torch._inductor.config as inductor_config
    inductor_config.cpp.enable_kernel_profile = True
    torch._dynamo.reset()
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    m = timed(torch.compile(mlp))
    xm = torch.randn(64, 256)

    def train_mlp():
        y, us = m(xm)
        y.square().mean().backward()
        return us
    timings["cpu_compiled_mlp_train.json.gz"] = record("cpu_compiled_mlp_train.json.gz", train_mlp)
    inductor_config.cpp.enable_kernel_profile = False

    torch._dynamo.reset()
    tiny = timed(torch.compile(lambda a: torch.relu(a) + 1))
    a = torch.randn(64)
    timings["cpu_compile_in_window.json.gz"] = record("cpu_compile_in_window.json.gz", lambda: tiny(a)[1], warm=0)

    (HERE / "compiled_timings.json").write_text(json.dumps(
        {"torch": torch.__version__, "threads": 1, "call_us": timings}, indent=1) + "\n")
    print(f"wrote {HERE / 'compiled_timings.json'}")


if __name__ == "__main__":
    main()
