"""An op whose own host work keeps the GPU waiting: a planner, a cache miss, a Python-side loop.

Seen on an H200 (PyTorch 2.11): KV-cache decoding through ``F.scaled_dot_product_attention`` spent
35 ms per token inside ``aten::_cudnn_attention_forward`` on the host — cuDNN builds an execution
plan for every new key length — while the GPU's work per token was 0.2 ms. That time is neither
dispatch overhead between kernels (CUDA graphs cannot capture a shape that changes every step) nor a
sync: it is one op's own work, and its fix depends on the op. The measurement is
:func:`.helpers.slow_host_ops`, which the host-bound and launch rules leave out of their wait.
"""

from __future__ import annotations

import re

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import (
    SLOW_HOST_OP_US,
    fmt_time,
    host_wait_cap,
    host_wait_cap_line,
    slow_host_ops,
)
from bwdiag.diagnose.model import FindingKind

#: At most this many op names get a finding of their own.
TOP_OPS = 3

_CUDNN_ATTENTION = re.compile(r"cudnn_attention")
_SDPA_FIX = (
    "from torch.nn.attention import sdpa_kernel, SDPBackend\n"
    "with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):  # no per-shape plan\n"
    "    out = model(...)\n"
    "# or keep the shapes static: a KV cache attended over its full (masked) length, or padded to a few buckets"
)
_CUDNN_CONV = re.compile(r"cudnn_convolution|miopen_convolution")
_CONV_FIX = (
    "# cuDNN autotunes (torch.backends.cudnn.benchmark=True) or plans each new input shape on its first calls:\n"
    "# run a few warm-up steps of every shape before the timed/profiled ones (bwdiag run --wait N),\n"
    "# keep input shapes static (pad or bucket them), or torch.backends.cudnn.benchmark = False for ever-changing shapes"
)
_WARMUP_FIX = (
    "# record after a few warm-up steps, so one-off initialisation stays out of the window:\n"
    "# bwdiag run --wait 5 train.py   (or torch.profiler.schedule(wait=..., warmup=...))\n"
    "# in a benchmark, run every op once before timing it"
)
_GENERIC_FIX = (
    "# find what the op does on the host: py-spy record --native -- python train.py\n"
    "# keep its inputs' shapes static (planners and autotuners cache per shape), or move the work out of the step"
)


def slow_host_work(ctx: RuleContext) -> list[RuleResult]:
    """GPU traces: per op name, the GPU's host-wait idle inside that op's own host time."""
    if ctx.is_cpu or ctx.idle is None:
        return []
    by_name: dict[str, list] = {}
    for pos, a in enumerate(ctx.analyses):
        for w in slow_host_ops(a):
            by_name.setdefault(w.name, []).append((pos, w))
    ranked = sorted(by_name.items(), key=lambda kv: -sum(w.wait_us for _, w in kv[1]))
    results = []
    cap = host_wait_cap(ctx)  # the wait the unprofiled run can have, when the capture timed it
    for name, found in ranked[:TOP_OPS]:
        measured = sum(w.wait_us for _, w in found) / ctx.ranks
        saving = measured if cap is None else min(measured, cap)
        if cap is not None:
            cap -= saving
        if not ctx.worth_reporting(saving):
            continue
        calls = sum(w.calls for _, w in found)
        host = sum(w.host_us for _, w in found)
        evidence = [
            f"{calls:,} call{'s' if calls != 1 else ''} of {name} take {fmt_time(host / calls)} each on the host "
            f"(at least {fmt_time(SLOW_HOST_OP_US)} of their own work, their child ops excluded)",
            f"the GPU waits for them: {ctx.per_step(measured)} of idle falls inside their own host time",
            *host_wait_cap_line(ctx, measured, saving),
        ]
        first = sum(w.first_calls for _, w in found)
        if first == calls:
            evidence.append(f"{'each is' if calls > 1 else 'it is'} the first call of {name} on its thread in the "
                            "trace: one-off initialisation (cuBLAS/cuDNN handles, CUDA module loading, autotuning), "
                            "paid again only when shapes change")
            title, fix = f"{name}: its first call waits on one-off initialisation", _WARMUP_FIX
        elif _CUDNN_ATTENTION.search(name):
            evidence.append("cuDNN attention builds an execution plan per new input shape: with a key length "
                            "that grows every decode step, every call plans again")
            title, fix = f"Attention plans a new cuDNN graph every call ({name})", _SDPA_FIX
        elif _CUDNN_CONV.search(name):
            evidence.append("cuDNN chooses (benchmark=True: times) convolution algorithms for each new input shape "
                            "on its first calls: a one-off per shape, paid in every step when shapes change")
            title, fix = f"Convolutions wait on cuDNN's algorithm search ({name})", _CONV_FIX
        else:
            title, fix = f"{name} keeps the GPU waiting on its own host work", _GENERIC_FIX
        results.append(ctx.finding(FindingKind.HOST_BOUND, title, saving, evidence, fix, idle_us=saving))
    return results
