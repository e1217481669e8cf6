"""What one transcendental op costs per element inside a loop Inductor generated for this CPU.

A fusion finding on a CPU trace predicts the fused loop's time. Its bytes follow from the shapes, but
its arithmetic does not: Inductor's C++ backend evaluates ``tanh``, ``exp``, ``log`` … with its own
vectorised code, which on one host ran 2× faster than ATen's kernel (AMD EPYC, AVX-512: ``tanh`` 0.8
vs 1.3–1.7 ns per element) and on another 5.5× slower. So ``bwdiag calibrate`` times it.

For each op of ``PROBE_OPS``: a compiled function summing ``COPIES`` applications of the op to scaled
copies of one input (``op(x) + op(x · 1.01) + …``: one loop, one read, one write, ``COPIES`` evaluations
Inductor cannot merge), less the same function without the op (``x + x · 1.01 + …``), ÷ (``COPIES`` ×
elements) = ns per element the op adds to a fused loop. Inputs in [0.5, 1.5), inside every op's domain.
Fastest of interleaved rounds (a loaded host only adds time), at one thread and at the process's
thread count (a CPU fusion runs with the threads the user's script has; a trace made by ``bwdiag run``
records them).

*Chained* figures (``chained_ns_per_element``): the same ops where each application feeds the next
(``op(op(x)·a + b)·a + b``, ``CHAIN_DEPTH`` deep, ``a``, ``b`` keeping the values in the op's domain), less
the same affine steps alone. A fused chain is that case: ``sigmoid → mul → add → tanh`` evaluates its two
transcendental ops one after the other on each element, and the loop body, twice as long in latency,
overlaps fewer iterations in the core's reorder window. On the 2-core Intel Xeon dev VM (8 Dec 2026, one
thread, 2 M floats): ``tanh`` 1.25 ns alone in a loop, 1.57 beside three independent copies, 2.02 chained;
``sigmoid`` 0.11 / 0.34 / 0.44. The chain ``sigmoid → tanh`` cost 2.42 ns per element, ``tanh → sigmoid``
2.04, the benchmark's 9-op chain through both 2.61: the chained figures' sum says 2.46, the independent
ones' 1.91. A 4-deep chain costs more still (``tanh`` 2.58 per application), so a loop with three or more
such ops is priced a little low.
"""

from __future__ import annotations

import time
import types
from typing import Any

#: The ops timed, by their ATen names (without ``aten::``), as a trace records them. ``dropout`` is the
#: random number each element draws (Inductor's Philox counter per element, then the mask): in a
#: training step it is often the costliest thing a fused loop still computes — 8–20 ns per element
#: compiled on the Intel Xeon dev VM of 7 Dec 2026 against ATen's ``bernoulli_`` at 6 (`F.dropout` on
#: 131 k floats, one thread: 0.83 ms eager, 1.15 ms compiled), so a fused ``dropout → add → layer_norm``
#: saved nothing there.
PROBE_OPS = ("tanh", "sigmoid", "exp", "log", "gelu", "silu", "erf", "dropout")
#: Ops timed as a training step runs them: on an input that requires grad, so the loop is AOTAutograd's
#: forward, which also writes what the backward needs (dropout's mask) — twice the cost of the same
#: loop under ``no_grad`` on the Intel dev VM (65 k floats, dropout → add: 1.23 against 0.56 ms).
TRAINING_OPS = ("dropout",)
#: Applications of the op per loop iteration (the slope over this many is the op's cost).
COPIES = 4
#: Elements of the probe tensor (fp32): big enough that one call is milliseconds, small enough for the
#: calibration to stay within seconds per op.
ELEMENTS = {False: 1 << 20, True: 1 << 18}
ROUNDS = {False: 7, True: 3}
CALLS = {False: 5, True: 3}
#: Applications of the op in a chained probe (each feeding the next): a fused loop's transcendental ops
#: come one or two to a chain far more often than more.
CHAIN_DEPTH = 2
#: Ops whose chained cost is timed (dropout's draw does not depend on the value it masks).
CHAINED_OPS = tuple(op for op in PROBE_OPS if op != "dropout")
#: ``(a, b)`` of the affine step after each chained application, keeping its output in [0.4, 2), inside
#: the op's domain and away from fast paths (``exp`` · 0.25: below 1.2; ``log`` + 1.5: above 0.8).
CHAIN_AFFINE = {"exp": (0.25, 0.0), "log": (1.0, 1.5)}
DEFAULT_AFFINE = (1.0, 0.5)


def compiled_pointwise(quick: bool) -> dict[str, Any] | None:
    """``{"ns_per_element": {threads: {op: ns}}, "chained_ns_per_element": {threads: {op: ns}},
    "elements": n}`` — at one thread and at this process's
    thread count (the one a script gets by default), keys as strings for JSON — or None where
    torch.compile cannot run here (no C++ compiler for Inductor, an unsupported Python)."""
    import torch
    from torch._dynamo.utils import counters

    threads = torch.get_num_threads()
    saved = {k: v.copy() for k, v in counters.items()}  # the process reads as never having compiled after
    try:
        return _probe(torch, quick, sorted({1, threads}))
    except Exception:  # noqa: BLE001 — any failure of Dynamo/Inductor here means: not measured
        return None
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        counters.clear()
        counters.update(saved)


def _probe(torch: Any, quick: bool, thread_counts: list[int]) -> dict[str, Any]:
    import torch.nn.functional as F

    n = ELEMENTS[quick]
    x = torch.rand(n) + 0.5
    inputs = {False: x, True: x.detach().clone().requires_grad_(True)}
    fns = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "exp": torch.exp, "log": torch.log,
           "gelu": F.gelu, "silu": F.silu, "erf": torch.erf,
           "dropout": lambda t: F.dropout(t, 0.1, training=True)}
    compiled = {name: torch.compile(_summed(fns[name], name)) for name in PROBE_OPS}
    bases = {grad: torch.compile(_summed(None, f"base_{'grad' if grad else 'plain'}")) for grad in inputs}
    affine = {name: CHAIN_AFFINE.get(name, DEFAULT_AFFINE) for name in CHAINED_OPS}
    chained = {name: torch.compile(_chained(fns[name], name, *affine[name])) for name in CHAINED_OPS}
    chain_bases = {ab: torch.compile(_chained(None, f"base_{k}", *ab))
                   for k, ab in enumerate(sorted(set(affine.values())))}
    timed = ([(fn, inputs[grad]) for grad, fn in bases.items()]
             + [(fn, inputs[name in TRAINING_OPS]) for name, fn in compiled.items()]
             + [(fn, x) for fn in (*chained.values(), *chain_bases.values())])
    for fn, arg in timed:
        for _ in range(3):  # compile and warm up each before any timing
            fn(arg)
    per_threads, chained_threads = {}, {}
    for threads in thread_counts:  # Inductor's loops read the thread count per call
        torch.set_num_threads(threads)
        base = {grad: float("inf") for grad in inputs}
        best = {name: float("inf") for name in PROBE_OPS}
        chain_base = {ab: float("inf") for ab in chain_bases}
        chain_best = {name: float("inf") for name in CHAINED_OPS}
        for _ in range(ROUNDS[quick]):  # interleaved: a slow moment of the host hits every op alike
            for grad, fn in bases.items():
                base[grad] = min(base[grad], _per_call(fn, inputs[grad], CALLS[quick]))
            for name, fn in compiled.items():
                best[name] = min(best[name], _per_call(fn, inputs[name in TRAINING_OPS], CALLS[quick]))
            for ab, fn in chain_bases.items():
                chain_base[ab] = min(chain_base[ab], _per_call(fn, x, CALLS[quick]))
            for name, fn in chained.items():
                chain_best[name] = min(chain_best[name], _per_call(fn, x, CALLS[quick]))
        per_threads[str(threads)] = {
            name: round(max(0.0, (best[name] - base[name in TRAINING_OPS]) / (COPIES * n) * 1e9), 3)
            for name in PROBE_OPS}
        chained_threads[str(threads)] = {
            name: round(max(0.0, (chain_best[name] - chain_base[affine[name]]) / (CHAIN_DEPTH * n) * 1e9), 3)
            for name in CHAINED_OPS}
    return {"ns_per_element": per_threads, "chained_ns_per_element": chained_threads, "elements": n}


def _summed(op, name: str):
    """``op(x) + op(x · 1.01) + …`` (``COPIES`` terms; ``op`` None: the scaled copies alone), as a
    function with a code object of its own: Dynamo caches compiled code per code object, and eight
    closures of one would share (and recompile) one cache entry after another."""
    scales = [1.0 + 0.01 * k for k in range(COPIES)]

    def fn(x):
        total = None
        for s in scales:
            term = x * s if op is None else op(x * s)
            total = term if total is None else total + term
        return total
    return types.FunctionType(fn.__code__.replace(co_name=f"probe_{name}"), fn.__globals__,
                              f"probe_{name}", None, fn.__closure__)


def _chained(op, name: str, a: float, b: float):
    """``op(op(x)·a + b)·a + b`` … (``CHAIN_DEPTH`` applications, each reading the one before; ``op``
    None: the affine steps alone), a code object of its own as in :func:`_summed`."""
    def fn(x):
        y = x
        for _ in range(CHAIN_DEPTH):
            y = (y if op is None else op(y)) * a + b
        return y
    return types.FunctionType(fn.__code__.replace(co_name=f"chain_{name}"), fn.__globals__,
                              f"chain_{name}", None, fn.__closure__)


def _per_call(fn, x, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter() - start) / calls
