"""Runs of consecutive memory-bound elementwise kernels on one stream (or one CPU thread).

A *run* is what a fusing compiler would turn into one kernel: back-to-back pointwise / norm /
cast / reduction / softmax / dropout kernels (or leaf CPU ops) on the same stream, each with a
byte estimate, each reading a tensor the size of what the one before wrote (traces record shapes,
not tensor identities: this is the dataflow test they allow). Anything else on that stream — a GEMM, a copy,
a collective, a memcpy, a kernel without shapes — ends the run, and so does a ``ProfilerStep#N``
boundary: the last op of one step and the first of the next read and write tensors of one size when
the step repeats a chain, but no compiler fuses across iterations of the user's loop (a 9-op chain
recorded in 4 steps is 9 ops ×4, not 36 ops ×1). View and allocation ops
(``aten::view``, ``aten::empty`` …) move no data and do not end it. Runs over tiny tensors (every
intermediate under ``MIN_INTERMEDIATE_BYTES``) are not reported: there is no traffic to save.

What fusing saves (:attr:`Run.saving_us`): the unfused time minus the fused loop's time, which is
the larger of two floors. *Memory*: the bytes the fused loop still moves at the bandwidth the unfused
kernels achieved (``time × (bytes − saved) / bytes``). *Arithmetic*: what the transcendental ops
(``sigmoid``, ``tanh``, ``exp``, ``gelu``, ``erf``, ``log``, ``pow`` …) spent beyond moving their
bytes — their time minus twice their bytes ÷ the best bandwidth any op of the run reached (the
factor 2 leaves an op within 2× of that line to noise: a launch, a cache miss). A fused loop still
evaluates every ``tanh``; on a CPU thread those cost several ns per element, far beyond the
memory time, so a chain through them is compute-bound once fused. Elementwise ops such as ``mul`` or
``relu`` do a FLOP per element: their time beyond the bandwidth line is allocation and page faults
of their fresh outputs, which fusion removes too, so it is not part of the floor.

On a CPU thread (a run of CPU ops, given ``loop_ns``) the fused loop's two costs add up instead: one
thread reads, evaluates and writes element after element, so the loop takes its memory floor (its bytes
at the best line an op of the run reached: :attr:`Run.memory_floor_us`) *plus* the arithmetic, and that
arithmetic is what Inductor's generated code costs per element on the host
(:mod:`.compiled_loops`: ``bwdiag calibrate`` measures it; ATen's eager kernel, which the trace timed,
can be 2× faster or 5× slower than it), elements × ns for each op it measured — the rule above for
any other transcendental op. Two or more such ops in one run feed each other (the run's dataflow
test), and evaluated one after the other on each element they cost more than side by side: given
``chained_ns``, the calibration's figures for ops in a chain price them (``Run.chained``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bwdiag.costs import Category
from bwdiag.diagnose.findings.compiled_loops import op_key
from bwdiag.diagnose.findings.helpers import arg_bytes, output_bytes, tensor_sizes
from bwdiag.diagnose.names import name_matches

FUSABLE = frozenset({
    Category.ELEMENTWISE.value, Category.NORM.value, Category.CAST.value, Category.REDUCTION.value,
    Category.SOFTMAX.value, Category.RANDOM.value,
})
FUSABLE_BOUNDS = frozenset({"memory", "latency"})

#: Ops that move no data (views, allocations): invisible to a run.
NO_DATA_OPS = re.compile(
    r"^aten::(empty|empty_strided|empty_like|as_strided|view|_unsafe_view|reshape|_reshape_alias|t|"
    r"transpose|permute|expand|expand_as|view_as|unsqueeze|squeeze|slice|select|detach|alias|resize_|"
    r"lift_fresh|result_type|split|chunk|unbind|narrow|numpy_T|contiguous)$"
)

#: The profiler's step spans: a run never crosses one's start.
_PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")

#: A run whose largest intermediate is under this many bytes is not a memory-traffic problem: tensors
#: this small (a 1-element step counter, a scalar loss) stay in L1, and fusing them would save
#: dispatch or launches, not bytes — the bandwidth model of a fusion saving says nothing about them.
MIN_INTERMEDIATE_BYTES = 4096

#: Ops whose per-element arithmetic can outlast their memory traffic (a polynomial or a table per
#: element: transcendental functions, activations built on them, their backward formulas).
TRANSCENDENTAL = re.compile(
    r"^aten::(sigmoid|tanh|exp|exp2|expm1|log|log2|log10|log1p|gelu|silu|mish|softplus|elu|selu|celu|"
    r"erf|erfc|erfinv|pow|sin|cos|tan|asin|acos|atan|atan2|sinh|cosh|asinh|acosh|atanh|logit|"
    r"log_sigmoid_forward|_?softmax|_?log_softmax|gelu_backward|silu_backward|mish_backward|"
    r"softplus_backward|elu_backward|log_sigmoid_backward|lgamma|digamma|"
    # a random draw per element (dropout's mask) is arithmetic a fused loop keeps too
    r"dropout|native_dropout|feature_dropout|alpha_dropout|feature_alpha_dropout|bernoulli)_?$"
)
#: An op's time counts as arithmetic only beyond this many times its memory time at the run's best bandwidth.
ARITHMETIC_MARGIN = 2.0

#: Kernels a compiler already produced (fusing them again is not advice).
COMPILED = re.compile(r"^triton_|fused_|_fused|cutlass|__nv_", re.I)


@dataclass(frozen=True)
class Run:
    """One run of fusable kernels: row positions in the rank's activities, in time order."""

    rows: np.ndarray
    bytes: float  # what the unfused kernels move
    saved_bytes: float  # intermediates a fused kernel keeps on chip (written and read back once)
    time_us: float  # the kernels' summed time
    arithmetic_us: float = 0.0  # transcendental ops' time beyond their memory time: the fused loop pays it
    best_bytes_per_s: float = 0.0  # the highest bandwidth an op of the run reached (the memory line)
    arithmetic_ops: tuple = ()  # names of the ops that contributed to ``arithmetic_us``
    serial: bool = False  # a CPU thread's loop: memory and arithmetic add up (else the larger bounds it)
    chained: bool = False  # its ops' arithmetic priced as ops feeding one another (``loop_arithmetic``)

    @property
    def achieved_bytes_per_s(self) -> float:
        return self.bytes / (self.time_us / 1e6)

    @property
    def memory_floor_us(self) -> float:
        """The fused loop's memory time: the bytes it still moves at the run's achieved bandwidth; on a
        CPU thread (``serial``) at the best any op of the run reached. There the run's average would count
        twice what the loop adds on top of its bytes (the transcendental ops' time is in the average
        *and* in the arithmetic), and what else held the eager ops below the line — a page fault per 4 KiB
        of each fresh output — the fused loop pays for its one output only: on the benchmarks' 9-op chain
        (Intel Xeon VM, 8 Dec 2026) every eager op took 0.9–1.2 ms for 8 MiB outputs whatever its
        arithmetic, 14.1 GB/s on average and 20.7 for the best (``mul``), and the fused loop without its
        ``sigmoid`` and ``tanh`` moved its 33.5 MB in 1.3 ms."""
        rate = self.best_bytes_per_s if self.serial and self.best_bytes_per_s > 0 else self.achieved_bytes_per_s
        return (self.bytes - self.saved_bytes) / rate * 1e6

    @property
    def compute_bound(self) -> bool:
        """Whether the fused loop is bound by the transcendental ops' arithmetic, not by its bytes."""
        return self.arithmetic_us > self.memory_floor_us

    @property
    def fused_us(self) -> float:
        """The fused loop's time: its memory floor plus its arithmetic on a CPU thread (``serial``),
        else the larger of the two."""
        if self.serial:
            return self.memory_floor_us + self.arithmetic_us
        return max(self.memory_floor_us, self.arithmetic_us)

    @property
    def saving_us(self) -> float:
        """Unfused time − the fused loop's time; without arithmetic: the saved bytes at the run's own
        achieved bandwidth."""
        return max(0.0, self.time_us - self.fused_us)


def fusable_runs(acts: pd.DataFrame, ops: pd.DataFrame, min_kernels: int = 2,
                 loop_ns: Mapping[str, float] | None = None,
                 chained_ns: Mapping[str, float] | None = None) -> list[Run]:
    """Every run of at least ``min_kernels`` fusable kernels, per stream, in time order. ``loop_ns``:
    ns per element each op adds to a compiled CPU loop (:func:`.compiled_loops.loop_costs`); given, a
    run of CPU ops is priced as a CPU loop (``Run.serial``). ``chained_ns``: the same where the ops feed
    one another (:func:`.compiled_loops.chained_costs`)."""
    if acts.empty:
        return []
    # map(str), not astype(str): astype keeps a missing stream missing, and lexsort cannot order str with NaN
    order = np.lexsort((acts["ts"].to_numpy(float), acts["stream"].map(str).to_numpy()))
    stream_of = acts["stream"].map(str).to_numpy()[order]
    kind_of = acts["kind"].to_numpy()[order]
    name_of = acts["name"].astype(str).to_numpy()[order]
    op_of = acts["op"].to_numpy()[order]
    fusable = _fusable(acts)[order]
    args = arg_bytes(ops, op_of)
    # What each kernel writes (NaN: not fusable, or unknown); a run goes on while the next kernel
    # reads a tensor the size of that (traces record shapes, not tensor identities: this is the
    # dataflow test they allow).
    out_of = np.where(fusable, args.written(acts["bytes"].to_numpy(float)[order]), np.nan)
    skip = (kind_of == "memset") | ((kind_of == "cpu_op") & name_matches(pd.Series(name_of), NO_DATA_OPS,
                                                                          anchored=True))
    step_of = _step_of(ops, op_of)
    cols = _arrays(acts)
    runs: list[Run] = []
    current: list[int] = []
    prev_out = None  # bytes the last member wrote
    stream = step = None
    for k, pos in enumerate(order.tolist()):
        if stream_of[k] != stream or (step_of[k] != step and not skip[k]):
            _close(current, cols, ops, runs, min_kernels, loop_ns, chained_ns)
            current, prev_out, stream, step = [], None, stream_of[k], step_of[k]
        if skip[k]:
            continue
        out = out_of[k]
        if out != out or (prev_out is not None and prev_out not in args.sizes[args.sig[k]]):  # NaN: ends a run
            _close(current, cols, ops, runs, min_kernels, loop_ns, chained_ns)
            current, prev_out = [], None
            if out != out:
                continue
        current.append(pos)
        prev_out = out
    _close(current, cols, ops, runs, min_kernels, loop_ns, chained_ns)
    return runs


def _step_of(ops: pd.DataFrame, op_of: np.ndarray) -> np.ndarray:
    """Per activity (by its op's row ``op_of``): how many ``ProfilerStep#N`` spans started at or
    before its op did — equal within one step, 0 throughout a trace without step spans. A kernel
    belongs to the step that launched it, wherever it ran."""
    if not len(ops):
        return np.zeros(len(op_of), dtype=np.int64)
    steps = name_matches(ops["name"].astype(str), _PROFILER_STEP, anchored=True)
    starts = np.sort(ops["ts"].to_numpy(float)[steps])
    if not len(starts):
        return np.zeros(len(op_of), dtype=np.int64)
    op_ts = ops["ts"].to_numpy(float)[np.maximum(op_of.astype(np.int64), 0)]
    return np.where(op_of >= 0, np.searchsorted(starts, op_ts, side="right"), -1)


def _fusable(acts: pd.DataFrame) -> np.ndarray:
    """Per row: a memory/latency-bound pointwise-family kernel with shapes and a byte estimate."""
    nbytes = acts["bytes"].to_numpy(float)
    return (
        acts["category"].isin(FUSABLE).to_numpy()
        & acts["bound"].isin(FUSABLE_BOUNDS).to_numpy()
        & acts["kind"].isin(("kernel", "cpu_op")).to_numpy()
        & ~acts["graph"].fillna(False).astype(bool).to_numpy()
        & (acts["op"].to_numpy() >= 0)
        & np.isfinite(nbytes) & (np.nan_to_num(nbytes) > 0)
        & ~name_matches(acts["name"].astype(str), COMPILED, anchored=True)
    )


def _close(rows: list[int], cols: dict, ops: pd.DataFrame, runs: list[Run], min_kernels: int,
           loop_ns: Mapping[str, float] | None = None, chained_ns: Mapping[str, float] | None = None) -> None:
    if len(rows) < min_kernels:
        return
    # Bytes per op (an op's kernels share its traffic), in time order of the op's first kernel.
    per_op: dict[int, float] = {}
    op_us: dict[int, float] = {}
    op_name: dict[int, str] = {}
    for r in rows:
        op = int(cols["op"][r])
        per_op[op] = per_op.get(op, 0.0) + float(cols["bytes"][r])
        op_us[op] = op_us.get(op, 0.0) + float(cols["dur"][r])
        op_name.setdefault(op, str(cols["op_name"][r]))
    if len(per_op) < min_kernels or len({cols["op_name"][r] for r in rows}) < 2:
        return  # one op repeated over many tensors is side-by-side work, not a dataflow chain
    outs = [output_bytes(ops, op, b) for op, b in per_op.items()]
    if any(o is None for o in outs) or max(outs[:-1]) < MIN_INTERMEDIATE_BYTES:
        return
    total = sum(per_op.values())
    first_in = next(iter(per_op.values())) - outs[0]
    # Each intermediate is written once and read back at least once; a fused kernel still reads
    # the first op's inputs and writes the last op's output.
    saved = min(2.0 * sum(outs[:-1]), total - first_in - outs[-1])
    time_us = float(sum(cols["dur"][r] for r in rows))
    if saved > 0 and time_us > 0:
        members = [(op_name[o], per_op[o], op_us[o]) for o in per_op]
        serial = loop_ns is not None and all(cols["kind"][r] == "cpu_op" for r in rows)
        chained = False
        if serial:
            elements = [max((n for n, _ in tensor_sizes(ops, o)), default=0) for o in per_op]
            best, arithmetic, names, chained = loop_arithmetic(members, elements, loop_ns, chained_ns)
        else:
            best, arithmetic, names = arithmetic_floor(members)
        runs.append(Run(np.asarray(rows), total, saved, time_us, arithmetic, best, names, serial, chained))


def arithmetic_floor(ops: list[tuple[str, float, float]]) -> tuple[float, float, tuple]:
    """(best bandwidth B/s, arithmetic µs, the ops counted) of a run's ops given as (op name, bytes,
    µs): B = the highest bytes ÷ time of any op; arithmetic = Σ over transcendental ops of
    max(0, µs − ``ARITHMETIC_MARGIN`` × bytes ÷ B)."""
    rates = [b / (us / 1e6) for _, b, us in ops if us > 0 and b > 0]
    if not rates:
        return 0.0, 0.0, ()
    best = max(rates)
    extra = {}
    for name, b, us in ops:
        if TRANSCENDENTAL.match(name):
            over = us - ARITHMETIC_MARGIN * b / best * 1e6
            if over > 0:
                extra[name] = extra.get(name, 0.0) + over
    return best, float(sum(extra.values())), tuple(extra)


def loop_arithmetic(ops: list[tuple[str, float, float]], elements: list[int], loop_ns: Mapping[str, float],
                    chained_ns: Mapping[str, float] | None = None) -> tuple[float, float, tuple, bool]:
    """:func:`arithmetic_floor` for a compiled CPU loop, and whether its ops were priced as a chain: an
    op ``loop_ns`` prices (by :func:`.compiled_loops.op_key`) costs its elements × that many ns, whatever
    its eager kernel took — where two or more such ops share the loop, ``chained_ns``' figure (ops that
    feed one another) where it has one; any other transcendental op, what :func:`arithmetic_floor`
    gives it."""
    best, _, _ = arithmetic_floor(ops)
    priced = [op_key(name) for (name, _, _), n in zip(ops, elements) if n > 0 and op_key(name) in loop_ns]
    chained = len(priced) >= 2 and any(k in (chained_ns or {}) for k in priced)
    prices = {**loop_ns, **(chained_ns or {})} if chained else loop_ns
    extra: dict[str, float] = {}
    for (name, b, us), n in zip(ops, elements):
        ns = prices.get(op_key(name)) if op_key(name) in loop_ns else None
        if ns is not None and n > 0:
            extra[name] = extra.get(name, 0.0) + n * ns / 1e3
        elif best > 0 and TRANSCENDENTAL.match(name) and (over := us - ARITHMETIC_MARGIN * b / best * 1e6) > 0:
            extra[name] = extra.get(name, 0.0) + over
    return best, float(sum(extra.values())), tuple(extra), chained


def _arrays(acts: pd.DataFrame) -> dict[str, np.ndarray]:
    return {"op": acts["op"].to_numpy(), "bytes": acts["bytes"].to_numpy(float),
            "dur": acts["dur"].to_numpy(float), "op_name": acts["op_name"].to_numpy(),
            "kind": acts["kind"].to_numpy()}
