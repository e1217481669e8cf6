"""What the profiler's own recording adds to a CPU trace's gaps, and how much of it a fix takes away.

``torch.profiler`` costs the main thread time for every op it records (its name, input shapes, two
timestamps), and it slows what runs around that bookkeeping: on a CPU trace the gaps between ops *and*
the dispatch inside their spans stretch. A fix that stops dispatching ops (``torch.compile``, a foreach
optimizer) removes the gaps, and the plain script never paid their stretch. How much the run was
stretched is measured in the run itself when ``bwdiag run`` timed steps after the profiler stopped:
the time the profiler added falls on the overhead — the gaps and the ops' time beyond their roofline —
in proportion (:class:`Dilation`). The earlier model put all of it between ops, as ``k`` µs per
recorded op the fix removes ((profiled − unprofiled step) ÷ recorded ops per step: :func:`run_op_us`,
still shown): right for 300 tiny leaf ops (9.10 ms predicted against 9.01 ms on 5 Dec 2026), but on the
decode loop of 7 Dec (1.90 ms profiled, 0.55 ms plain, 4.6 µs per op against the probe's 0.45) it
subtracted more than all the gaps, where compiling saved 30 % of the step: a 14 µs ``linear`` spanned
63 µs in the trace.

A compiled graph still calls the GEMM, convolution and attention kernels one by one
(``EXTERN_KERNELS``): those ops stay recorded and are not counted as removed. Tiny ops in long runs
between such calls are fused into a few loops, so their own time goes too (``FUSED_RUN_OPS``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bwdiag.diagnose.findings.helpers import _DATA_LOADER, _OPT_STEP, TINY_OP_US, HostGaps, op_column

#: The profiler's own cost per recorded CPU op (µs) that lands between ops (``record_shapes=True``, torch
#: 2.13, one thread): 2,000 ``tanh`` calls on 8-element tensors took 1.07–1.12 µs each plain and
#: 1.79–1.95 µs under ``torch.profiler`` (0.73–0.98 µs more, three interleaved runs on the 2-core
#: dev VM); the op spans themselves read 0.66–0.69 µs. 0.8 µs is that measurement's middle, used
#: for a trace whose host's calibration did not measure it (:func:`profiler_op_us`).
PROFILER_OP_US = 0.8

#: Kernels Inductor leaves as calls from the compiled graph (oneDNN/ATen GEMMs, convolutions, the
#: SDPA kernels): they, and the ops recorded inside them, stay in a compiled step.
EXTERN_KERNELS = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|_convolution|mkldnn_convolution|convolution_overrideable"
                            r"|_scaled_dot_product_\w+|_flash_attention_\w+)$")
#: Their wrappers: a compiled graph calls the kernel directly, so the wrapper goes — unless the trace
#: recorded nothing inside it (inference mode on CPU records ``aten::linear`` as a leaf), when the
#: wrapper is the kernel call.
EXTERN_WRAPPERS = re.compile(r"^aten::(linear|matmul|scaled_dot_product_attention|conv[123]d|convolution|einsum)$")
#: Consecutive tiny leaf ops between extern calls from which a compiled step fuses them away (their own
#: time saved, not only the gaps): on the benchmark's captures runs of 140–1,128 ops (300 per-parameter
#: losses, Inductor fuses them across parameters) lost their time; the decode loop's runs of 2–13 ops
#: (views, a layer norm, a residual add between GEMMs) kept theirs — the compiled graph took as long as
#: the eager ops it replaced (398 µs per step around 249 µs of extern calls).
FUSED_RUN_OPS = 32


@dataclass(frozen=True)
class Removed:
    """What a compiled step stops dispatching on one rank's main thread, in its window."""

    recorded: int  # recorded ops (nested ones included) it no longer runs
    fused_rows: np.ndarray  # activity rows of tiny leaf ops in runs of FUSED_RUN_OPS or more
    fused_us: float  # their time
    externs: int = 0  # extern kernel calls (outermost) it still makes


def compiled_away(a, g: HostGaps, keep_optimizer: bool) -> Removed:
    """The recorded ops and fused leaf ops a compiled step removes on rank analysis ``a``'s main
    thread (``g``: its :class:`HostGaps`): every recorded CPU op in the window but the extern kernels
    (with what they hold and their leaf wrappers) and the ops inside DataLoader spans, and — with
    ``keep_optimizer`` (a fused step is advised instead) — inside ``Optimizer.step``."""
    ops, acts = a.trace.ops, a.activities
    if ops.empty or acts.empty:
        return Removed(0, np.zeros(0, dtype=int), 0.0)
    start, stop = float(acts["ts"].min()), float(acts["end"].max())
    names = op_column(ops, "name").astype(str)
    ts, end = op_column(ops, "ts").astype(float), op_column(ops, "end").astype(float)
    parent = op_column(ops, "parent").astype(int)
    cat = op_column(ops, "cat") if "cat" in ops.columns else np.full(len(ops), "cpu_op", dtype=object)
    mine = (op_column(ops, "tid") == g.tid) & (end > start) & (ts < stop)
    cpu = mine & (cat == "cpu_op")
    stays, unfused, calls = _extern(names, parent, cpu)
    spans = [i for i in np.flatnonzero(mine & (cat != "cpu_op")) if _skipped(names[i], keep_optimizer)]
    for i in spans:
        within = cpu & (ts >= ts[i]) & (end <= end[i])
        stays |= within
        unfused |= within
        calls &= ~within
    recorded = int((cpu & ~stays).sum())

    act_op = acts["op"].to_numpy()
    rows = np.flatnonzero(acts["kind"].isin(("cpu_op",)).to_numpy() & (act_op >= 0))
    rows = rows[mine[act_op[rows]]]
    rows = rows[np.argsort(acts["ts"].to_numpy(float)[rows], kind="stable")]
    rows = rows[~np.isin(rows, g.loader_rows)]
    dur = acts["dur"].to_numpy(float)[rows]
    fusible = ~unfused[act_op[rows]] & (dur < TINY_OP_US)
    runs = (seg[fusible[seg]] for seg in np.split(np.arange(len(rows)), np.flatnonzero(~fusible)))
    fused = [run for run in runs if len(run) >= FUSED_RUN_OPS]
    picked = rows[np.concatenate(fused)] if fused else np.zeros(0, dtype=int)
    return Removed(recorded, picked, float(acts["dur"].to_numpy(float)[picked].sum()), int(calls.sum()))


def _extern(names: np.ndarray, parent: np.ndarray, cpu: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ops that stay recorded in a compiled step: extern kernels, what they hold, leaf extern wrappers;
    ops a fused loop cannot absorb: those, any wrapper, and any op that holds a kernel; the extern calls
    the compiled code makes: kernels not inside another, and leaf wrappers)."""
    kernel = cpu & np.array([bool(EXTERN_KERNELS.match(n)) for n in names], dtype=bool)
    wrapper = cpu & np.array([bool(EXTERN_WRAPPERS.match(n)) for n in names], dtype=bool)
    has_child = np.zeros(len(names), dtype=bool)
    has_child[parent[parent >= 0]] = True
    inside, holds = np.zeros(len(names), dtype=bool), np.zeros(len(names), dtype=bool)
    for i in np.flatnonzero(cpu & (parent >= 0)):  # walk up (ops are shallow)
        j = parent[i]
        while j >= 0:
            inside[i] |= kernel[j]
            holds[j] |= kernel[i]
            j = parent[j]
    stays = kernel | inside | (wrapper & ~has_child)
    return stays, stays | wrapper | holds, (kernel & ~inside) | (wrapper & ~has_child & ~inside)


def _skipped(name: str, keep_optimizer: bool) -> bool:
    return bool(_DATA_LOADER.search(name)) or (keep_optimizer and bool(_OPT_STEP.match(name)))


def profiler_op_us(ctx) -> tuple[float, str]:
    """(µs the profiler adds per recorded op, where the figure comes from): the calibration's
    ``profiler_op_us`` when the diagnosis used a calibration of the trace's host that measured it,
    else ``PROFILER_OP_US``."""
    values = (ctx.diagnosis.device.calibration or {}).get("values") or {}
    measured = values.get("profiler_op_us")
    if isinstance(measured, (int, float)) and not isinstance(measured, bool) and measured >= 0:
        return float(measured), "measured on this host by bwdiag calibrate"
    return PROFILER_OP_US, "measured on a 2-core dev VM; `bwdiag calibrate` on the trace's host measures it there"


def run_op_us(ctx, recorded_per_step: float) -> float | None:
    """The profiler's cost per recorded op in this run (µs): (profiled − unprofiled step) ÷ recorded
    ops per step; None without an unprofiled step (``bwdiag run`` times the steps after the window)."""
    t = ctx.diagnosis.time
    if not (t.unprofiled_step_us and t.step_us and recorded_per_step > 0):
        return None
    return max(0.0, (t.step_us - t.unprofiled_step_us) / recorded_per_step)


@dataclass(frozen=True)
class Dilation:
    """How the profiler stretched a run's overhead (over the window, mean per rank, µs).

    The profiler's cost is more than its bookkeeping between ops: on the 2-core dev VM a decode step
    took 1.90 ms profiled and 0.43–0.55 ms plain, and a tiny ``linear`` that costs 14 µs a call in a
    plain loop spanned 63 µs in the trace — the recording of every op evicts what the next op and the
    interpreter had in cache, so the dispatch and Python inside the ops' spans slow down as much as
    the gaps between them. What runs at its roofline (a large GEMM, a long memory-bound loop) keeps its
    speed. So the time the profiler added, ``added_us``, is taken to fall on the overhead — the gaps
    and the ops' time beyond their roofline time — in proportion, and the plain script pays
    ``plain_share`` of each."""

    added_us: float  # (profiled − unprofiled step) over the window
    gaps_us: float  # short gaps on the main thread
    overhead_us: float  # the ops' time beyond their roofline time (unknown roofline: none)

    @property
    def plain_share(self) -> float:
        """The share of the overhead the plain script pays: 1 − added ÷ (gaps + ops' overhead), ≥ 0."""
        stretched = self.gaps_us + self.overhead_us
        return max(0.0, 1.0 - self.added_us / stretched) if stretched > 0 else 0.0

    @property
    def factor(self) -> float | None:
        """How many times longer the overhead ran profiled (None: all of it was the profiler's)."""
        share = self.plain_share
        return 1.0 / share if share > 0 else None


def dilation(ctx, found) -> Dilation | None:
    """The run's :class:`Dilation` for the (rank position, HostGaps) pairs ``found``; None without an
    unprofiled step (``bwdiag run`` times the steps after the window) or a complete profiled one."""
    t, scale = ctx.diagnosis.time, ctx.step_scale
    if not (t.unprofiled_step_us and t.step_us and scale):
        return None
    n = ctx.ranks
    # the window less what its steps take without the profiler (as RuleContext.recorded_stretch counts it)
    added = max(0.0, ctx.total_us * (1.0 - 1.0 / ctx.recorded_stretch))
    gaps = sum(g.gap_us for _, g in found) / n
    overhead = sum(ops_overhead_us(ctx.analyses[pos], g) for pos, g in found) / n
    return Dilation(added, gaps, overhead)


def ops_overhead_us(a, g: HostGaps) -> float:
    """The time the CPU ops on ``g``'s thread of rank analysis ``a`` (outside DataLoader spans) spent
    beyond their roofline time (:func:`overhead_by_row`)."""
    acts, ops = a.activities, a.trace.ops
    if acts.empty or ops.empty:
        return 0.0
    act_op = acts["op"].to_numpy()
    tids = op_column(ops, "tid")
    mine = (acts["kind"] == "cpu_op").to_numpy() & (act_op >= 0) & (tids[np.maximum(act_op, 0)] == g.tid)
    mine[np.asarray(g.loader_rows, dtype=int)] = False
    return float(overhead_by_row(a)[mine].sum())


def overhead_by_row(a) -> np.ndarray:
    """Per activity row of rank analysis ``a``: its time beyond its roofline time (its group's
    ``best_time_s`` per op: max(FLOPs ÷ peak, bytes ÷ bandwidth)); 0 where the roofline time is
    unknown (the op counts as all work)."""
    acts, groups = a.activities, a.groups
    if acts.empty or "best_time_s" not in groups.columns or "count" not in groups.columns:
        return np.zeros(len(acts))
    per_op = pd.to_numeric(groups["best_time_s"], errors="coerce") / pd.to_numeric(groups["count"], errors="coerce")
    best = per_op.reindex(acts["group"]).to_numpy(dtype=float) * 1e6
    dur = acts["dur"].to_numpy(dtype=float)
    return np.where(np.isfinite(best), np.maximum(0.0, dur - np.nan_to_num(best)), 0.0)


def recorded_ops(a, tid) -> int:
    """CPU ops (nested ones included) the profiler recorded on thread ``tid`` of rank analysis ``a``
    inside its window (the span of its activities)."""
    ops, acts = a.trace.ops, a.activities
    if ops.empty or acts.empty:
        return 0
    start, stop = float(acts["ts"].min()), float(acts["end"].max())
    cat = op_column(ops, "cat") if "cat" in ops.columns else None
    mask = (op_column(ops, "tid") == tid) & (op_column(ops, "end").astype(float) > start) \
        & (op_column(ops, "ts").astype(float) < stop)
    if cat is not None:
        mask &= cat == "cpu_op"
    return int(mask.sum())
