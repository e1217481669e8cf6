"""Helpers the findings rules share: op-table lookups, byte counts, kernel groups, evidence text.

Every helper a second rule needs lives here, so that no rule module imports another. Nothing here
reads the diagnosis' timeline sections: they come through :class:`~bwdiag.diagnose.findings.base.RuleContext`
(the ``ctx`` argument below; not imported here, since base imports this module).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pandas as pd

from bwdiag.costs.dtypes import dtype_bytes
from bwdiag.diagnose.idle import DATA_LOADER as _DATA_LOADER
from bwdiag.diagnose.idle import device_gaps, sync_ended_in
from bwdiag.diagnose.timeline import covered_within, merged_runs
from bwdiag.units import fmt_bandwidth, fmt_bytes, fmt_flops, fmt_time  # noqa: F401  (re-exported to the rules)


#: Evidence lines listing modules/kernels stop after this many (the rest are counted).
MAX_EVIDENCE_ITEMS = 5

# -- the ops table ---------------------------------------------------------------------------------


_TABLES: dict[int, tuple[pd.DataFrame, dict[str, np.ndarray], dict[int, tuple]]] = {}


def _table_cache(ops: pd.DataFrame) -> tuple[dict[str, np.ndarray], dict[int, tuple]]:
    """Per ops table: its columns as numpy arrays and tensor sizes per argument signature."""
    entry = _TABLES.get(id(ops))
    if entry is None or entry[0] is not ops:
        entry = _TABLES[id(ops)] = (ops, {}, {})
        if len(_TABLES) > 16:
            _TABLES.pop(next(iter(_TABLES)))
    return entry[1], entry[2]


def op_column(ops: pd.DataFrame, column: str) -> np.ndarray:
    """``ops[column]`` as a numpy array, cached per table (``ops.at`` per row is slow on big traces).
    Ops tables have a RangeIndex, so an op index is a position."""
    cols = _table_cache(ops)[0]
    if column not in cols:
        cols[column] = ops[column].to_numpy()
    return cols[column]


def op_chain(ops: pd.DataFrame, idx: int, depth: int = 8) -> list[str]:
    """Names of an op and its enclosing ops, innermost first (``aten::copy_, aten::clone, ...``)."""
    names_col, parent_col = op_column(ops, "name"), op_column(ops, "parent")
    names = []
    while idx >= 0 and len(names) < depth:
        names.append(names_col[idx])
        idx = int(parent_col[idx])
    return names


def tensor_sizes(ops: pd.DataFrame, idx: int) -> tuple[tuple[int, int], ...]:
    """(numel, bytes per element) of each dimensioned tensor argument of op ``idx``.

    Worked out once per argument signature (the ops table's ``sig``: ops with equal ``Input Dims``,
    ``Input type`` … share one), not once per op: a 1M-event trace has ~100k ops but a few thousand
    signatures."""
    if idx < 0:
        return ()
    cols, by_sig = _table_cache(ops)
    sig = cols.get("sig")
    if sig is None:
        sig = cols["sig"] = ops["sig"].to_numpy() if "sig" in ops else np.arange(len(ops))
    key = int(sig[idx])
    sizes = by_sig.get(key)
    if sizes is None:
        sizes = by_sig[key] = _sizes(op_column(ops, "dims")[idx], op_column(ops, "types")[idx])
    return sizes


def _sizes(dims, types) -> tuple[tuple[int, int], ...]:
    if not isinstance(dims, list):
        return ()
    out = []
    for i, d in enumerate(dims):
        if not (isinstance(d, list) and d and all(isinstance(x, int) for x in d)):
            continue
        size = dtype_bytes(types[i]) if isinstance(types, list) and i < len(types) else None
        if size:
            out.append((math.prod(d), size))
    return tuple(out)


def output_bytes(ops: pd.DataFrame, idx: int, total_bytes: float) -> float | None:
    """Bytes an op writes: its traffic minus its tensor inputs; an in-place / ``out=`` op (whose
    destination is one of its arguments, e.g. ``copy_``) writes its first argument."""
    sizes = tensor_sizes(ops, idx)
    if not sizes or not np.isfinite(total_bytes):
        return None
    written = total_bytes - sum(n * s for n, s in sizes)
    return float(written) if written > 0 else float(sizes[0][0] * sizes[0][1])


@dataclass(frozen=True)
class ArgBytes:
    """Per op (one entry per requested op index): bytes of its tensor arguments, vectorised.

    ``inputs``: their sum (NaN without dimensioned tensors); ``first``: the first one's;
    ``sizes[sig[k]]``: the set of each argument's bytes (for "does it read a tensor this big?")."""

    inputs: np.ndarray
    first: np.ndarray
    sig: np.ndarray
    sizes: list[frozenset]

    def written(self, total_bytes: np.ndarray) -> np.ndarray:
        """:func:`output_bytes` per op for their ``total_bytes`` of traffic (NaN where unknown)."""
        total = np.asarray(total_bytes, dtype=float)
        known = np.isfinite(self.inputs) & np.isfinite(total)
        rest = np.where(known, total - np.nan_to_num(self.inputs), np.nan)
        return np.where(known, np.where(rest > 0, rest, self.first), np.nan)


def arg_bytes(ops: pd.DataFrame, idx: np.ndarray) -> ArgBytes:
    """:class:`ArgBytes` of the ops at ``idx`` (-1: no op), worked out once per argument signature."""
    idx = np.asarray(idx, dtype=np.int64)
    cols, _ = _table_cache(ops)
    if "sig" not in cols:
        cols["sig"] = ops["sig"].to_numpy() if "sig" in ops else np.arange(len(ops))
    keys = np.where(idx >= 0, cols["sig"][np.maximum(idx, 0)] if len(ops) else -1, -1)
    uniq, where, inverse = np.unique(keys, return_index=True, return_inverse=True)
    inputs, first, sizes = np.full(len(uniq), np.nan), np.full(len(uniq), np.nan), []
    for j, (key, at) in enumerate(zip(uniq, where)):
        args = tensor_sizes(ops, int(idx[at])) if key >= 0 else ()
        if args:
            inputs[j] = float(sum(n * e for n, e in args))
            first[j] = float(args[0][0] * args[0][1])
        sizes.append(frozenset(n * e for n, e in args))
    return ArgBytes(inputs[inverse], first[inverse], inverse, sizes)


def short_list(items: Iterable[str], limit: int = MAX_EVIDENCE_ITEMS) -> str:
    """``a, b, c`` (+ ``… and N more``), keeping first-seen order and dropping repeats."""
    seen = list(dict.fromkeys(i for i in items if i))
    text = ", ".join(seen[:limit])
    return text + (f", … and {len(seen) - limit} more" if len(seen) > limit else "")


def kernel_label(name: str, width: int = 60) -> str:
    """A kernel name cut to ``width`` characters for evidence text."""
    name = str(name)
    return name if len(name) <= width else name[: width - 1] + "…"


# -- kernel groups (the GEMM-level rules) ----------------------------------------------------------

MATRIX = ("gemm", "conv")

#: Ops whose second matrix argument is a weight (a Linear / mm against a parameter).
WEIGHT_ARG = {"aten::mm": 1, "aten::addmm": 2, "aten::linear": 1, "aten::matmul": 1}


def groups_of(ctx):
    """(rank position, analysis, groups) for every rank with placed groups."""
    for pos, a in enumerate(ctx.analyses):
        if len(a.groups) and "category" in a.groups.columns:
            yield pos, a, a.groups


def rows_of(a, gid) -> np.ndarray:
    """Row positions in ``a.activities`` of kernel group ``gid``."""
    return np.flatnonzero(a.activities["group"].to_numpy() == gid)


def share_of_roof(g) -> float | None:
    """The group's achieved share of its roof (0-1), from the roofline placement."""
    pct = g.pct_of_ceiling
    if pct is None or pd.isna(pct) or pct <= 0:
        return None
    return min(1.0, float(pct) / 100.0)


def weight_bytes(a, g) -> float | None:
    """Bytes of the weight matrix of a Linear-style GEMM group (per call), from the op's shapes."""
    arg = WEIGHT_ARG.get(g.op_name)
    if arg is None:
        return None
    op = int(a.activities.loc[a.activities["group"] == g.Index, "op"].iloc[0])
    dims, types = op_column(a.trace.ops, "dims")[op], op_column(a.trace.ops, "types")[op]
    if not isinstance(dims, list) or len(dims) <= arg or not isinstance(dims[arg], list) or len(dims[arg]) != 2:
        return None
    elem = dtype_bytes(types[arg]) if isinstance(types, list) and len(types) > arg else None
    return float(np.prod(dims[arg]) * elem) if elem else None


# -- host wait (the host-bound and launch-overhead rules) -------------------------------------------


def unexplained_host_wait(ctx, capped: bool = True) -> float:
    """Host-wait idle (µs) that no sync, data-loader wait or slow host op (:func:`slow_host_ops`)
    accounts for: the GPU waiting for Python / the framework to launch the next kernel. (Pageable
    copies are device time, not idle.) ``capped``: no more than the unprofiled run can wait
    (:func:`host_wait_cap`)."""
    idle = ctx.idle
    if idle is None:
        return 0.0
    slow = sum(w.wait_us for a in ctx.analyses for w in slow_host_ops(a)) / ctx.ranks
    wait = max(0.0, idle.host_wait_us - (idle.sync_us - idle.sync_in_data_loader_us + idle.data_loader_us) - slow)
    cap = host_wait_cap(ctx) if capped else None
    return wait if cap is None else min(wait, max(0.0, cap - slow))


def host_wait_cap(ctx) -> float | None:
    """GPU traces whose capture timed the steps before its window (``time.unprofiled_step_us``): the
    most host wait (µs over the window) the unprofiled run can have — its step less the device's
    busy time per step (kernels take as long with the profiler as without). The profiler's own
    per-launch and per-op cost makes the rest: under it the H200's medium transformer idled 15 ms of
    a 39 ms step that takes 23.7 ms, 23 of them busy, without it. None when unknown."""
    t, scale = ctx.diagnosis.time, ctx.step_scale
    if ctx.is_cpu or not t.unprofiled_step_us or not scale:
        return None
    return max(0.0, t.unprofiled_step_us / scale - ctx.busy_us)


def host_wait_cap_line(ctx, measured_us: float, kept_us: float) -> list[str]:
    """The evidence line saying how much of a host wait the profiler made (none when it made none)."""
    t = ctx.diagnosis.time
    if kept_us >= measured_us - 1e-9 or not t.unprofiled_step_us:
        return []
    return [f"without the profiler the step takes {fmt_time(t.unprofiled_step_us)} (steps before the window, "
            f"{t.unprofiled_clock} clock) and the device is busy {fmt_time(ctx.busy_us * (ctx.step_scale or 0))} "
            f"of it: of the {ctx.per_step(measured_us)} waited here, {ctx.per_step(kept_us)} is real, "
            "the rest is the profiler's own cost per launch and per op"]


#: An op whose own host time (children excluded) while the GPU waits reaches this per call is slow
#: host work of its own (a planner, a cache miss, a Python-side loop), not dispatch overhead.
SLOW_HOST_OP_US = 1000.0


@dataclass(frozen=True)
class SlowHostOp:
    """One op name whose own host time keeps a GPU rank waiting (µs over the window)."""

    name: str
    calls: int  # calls of at least SLOW_HOST_OP_US of GPU wait each
    wait_us: float  # GPU host-wait idle inside those calls, their children's excluded
    host_us: float  # those calls' whole host duration
    rows: np.ndarray  # their op rows
    first_calls: int = 0  # of those calls, the first call of that op name on its thread in the trace


def slow_host_ops(a) -> list[SlowHostOp]:
    """GPU rank ``a``'s CPU ops that hold the device idle by their own host work, largest first.

    The device's host-wait gaps (the work ending the gap was launched after the device went idle)
    are taken without those a synchronisation ended in (the sync rule's) and without DataLoader
    spans (the data-loader rule's); each op's share of them is its own interval's share minus its
    children's, and ops with at least ``SLOW_HOST_OP_US`` per call count. Cached per analysis."""
    cached = getattr(a, "_slow_host_ops", None)
    if cached is not None:
        return cached
    out = _slow_host_ops(a)
    try:
        a._slow_host_ops = out
    except AttributeError:  # a frozen analysis: recompute next time
        pass
    return out


def _slow_host_ops(a) -> list[SlowHostOp]:
    acts, ops = a.activities, a.trace.ops
    if ops.empty:
        return []
    gap_s, gap_e, waits = device_gaps(acts)
    gap_s, gap_e = gap_s[waits], gap_e[waits]
    synced = sync_ended_in(gap_s, gap_e, getattr(getattr(a.trace, "tables", None), "runtime", None))
    gap_s, gap_e = gap_s[~synced], gap_e[~synced]
    if not len(gap_s):
        return []
    names = op_column(ops, "name").astype(str)
    ts, end = op_column(ops, "ts").astype(float), op_column(ops, "end").astype(float)
    cat = op_column(ops, "cat") if "cat" in ops else np.full(len(ops), "cpu_op", dtype=object)
    is_op = cat == "cpu_op"
    inside = covered_within(ts, end, (gap_s, gap_e))
    parent = op_column(ops, "parent").astype(np.int64)
    child = is_op & (parent >= 0)
    own = inside.copy()
    np.subtract.at(own, parent[child], inside[child])
    loader = is_op & pd.Series(names).str.contains(_DATA_LOADER).to_numpy()
    if loader.any():
        in_loader = covered_within(ts, end, merged_runs(ts[loader], end[loader])) > 0
        is_op &= ~in_loader
    # Library ops only: a wrapper's own time (a record_function range, an autograd engine node, a
    # Python-level "forward") is the interpreter between kernels, which the host-bound rules report.
    library = pd.Series(names).str.match(_LIBRARY_OP).to_numpy() & ~pd.Series(names).str.match(_WRAPPER_OP).to_numpy()
    slow = is_op & library & (own >= SLOW_HOST_OP_US)
    found = []
    if slow.any():
        tid = op_column(ops, "tid") if "tid" in ops else np.zeros(len(ops))
        order = np.lexsort((ts, names, tid.astype(str)))
        first = np.zeros(len(ops), dtype=bool)
        keys = list(zip(tid.astype(str)[order], names[order]))
        first[order[[0] + [i for i in range(1, len(order)) if keys[i] != keys[i - 1]]]] = True
        for name in pd.unique(names[slow]):
            rows = np.flatnonzero(slow & (names == name))
            found.append(SlowHostOp(name, len(rows), float(own[rows].sum()), float((end - ts)[rows].sum()), rows,
                                    int(first[rows].sum())))
    return sorted(found, key=lambda w: -w.wait_us)


#: Ops of a library namespace (``aten::``, ``torchvision::``, ``vllm::`` …) — work of their own.
_LIBRARY_OP = re.compile(r"^[A-Za-z_][\w.]*::")
#: Namespaced names that are wrappers, not work: autograd's engine nodes, collectives' waits.
_WRAPPER_OP = re.compile(r"^(autograd::|torch::autograd::|c10d::|record_param_comms|profiler::)")


def looks_launch_bound(ctx) -> bool:
    """Most kernels are tiny (or the timeline says launch-bound): the wait is per-launch overhead.
    The launch-overhead rule reports such a wait, the host-bound rule every other."""
    launch = ctx.launch
    if launch is None or not launch.kernels:
        return False
    return launch.launch_bound or int(launch.short_kernels) >= int(launch.kernels) / 2


# -- host time between ops on the main thread (CPU host overhead, the CPU data loader) -------------

#: A gap between two top-level ops longer than this is other host work (data preparation, logging,
#: a sleep) rather than the interpreter and dispatcher stepping from one op to the next.
DISPATCH_GAP_US = 1000.0
#: A top-level op shorter than this is "tiny": dispatch costs (~2–10 µs per op on a CPU) rival its work.
TINY_OP_US = 50.0

_OPT_STEP = re.compile(r"^Optimizer\.step#(\w+)\.step$")
_ZERO_GRAD = re.compile(r"^Optimizer\.zero_grad#")
_PROFILER_STEP = re.compile(r"^ProfilerStep#")


@dataclass(frozen=True)
class HostGaps:
    """Time on a rank's main thread, inside its window, when no op is doing work (µs).

    The work is the rank's activities (leaf CPU ops) on a CPU trace, its top-level ops on a GPU
    trace (the host's side: the ops that launch the kernels); a gap is the time between two consecutive
    runs of them. ``gap_us`` counts the gaps shorter than ``DISPATCH_GAP_US`` outside DataLoader
    spans: Python and dispatch time from one op to the next — ``between_us`` of it between top-level
    ops (the interpreter), the rest inside them (autograd nodes, wrappers such as ``aten::linear``
    dispatching to their kernels). ``where`` splits ``gap_us`` by what holds each gap:
    ``"optimizer step"``, ``"zero_grad"``, ``"backward"``, a module path, or ``"outside any module"``
    (loss functions, user code), or ``"forward (no modules recorded)"`` when the trace has no module
    annotations."""

    tid: object
    ops: int  # top-level ops on the thread in the window
    tiny_ops: int  # of them, shorter than TINY_OP_US
    work_us: float  # the union of the thread's activity (work) time
    gap_us: float
    gaps: int
    between_us: float  # the part of gap_us between top-level ops
    long_gap_us: float  # gaps of DISPATCH_GAP_US or more (outside DataLoader spans)
    long_gaps: int
    loader_us: float  # window time inside DataLoader spans on the thread
    loader_spans: int
    loader_rows: np.ndarray  # activity rows inside those spans
    where: dict  # label -> [gap µs, gaps]
    optimizer: str | None  # the optimizer class of Optimizer.step spans (``SGD``), if any
    optimizer_ops: int  # top-level ops inside them
    optimizer_steps: int  # Optimizer.step spans
    loader_kind: str | None = None  # the DataLoader iterator class (``_MultiProcessingDataLoaderIter``)


def _thread(ops: pd.DataFrame, cpu: np.ndarray, annot: np.ndarray):
    """The main thread: the one holding ProfilerStep spans, else the one with the most top-level op time."""
    names = op_column(ops, "name").astype(str)
    tids = op_column(ops, "tid")
    steps = annot & np.array([bool(_PROFILER_STEP.match(n)) for n in names], dtype=bool) if annot.any() else annot
    if steps.any():
        return tids[np.flatnonzero(steps)[0]]
    top = cpu & (op_column(ops, "parent") == -1)
    if not top.any():
        return None
    dur = op_column(ops, "end").astype(float) - op_column(ops, "ts").astype(float)
    return pd.Series(dur[top]).groupby(tids[top]).sum().idxmax()


def _runs(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merged runs of intervals sorted by start: (index of each run's first interval, run starts, run ends)."""
    reach = np.maximum.accumulate(e)
    first = np.ones(len(s), dtype=bool)
    first[1:] = s[1:] > reach[:-1]
    at = np.flatnonzero(first)
    return at, s[at], np.append(reach[at[1:] - 1], reach[-1])


def host_gaps(a) -> HostGaps | None:
    """:class:`HostGaps` of one rank analysis (``trace.ops`` and ``activities``); None without ops."""
    ops, acts = a.trace.ops, a.activities
    if ops.empty or acts.empty:
        return None
    start, stop = float(acts["ts"].min()), float(acts["end"].max())
    cat = op_column(ops, "cat") if "cat" in ops.columns else np.full(len(ops), "cpu_op", dtype=object)
    cpu, annot = cat == "cpu_op", cat == "user_annotation"
    tid = _thread(ops, cpu, annot)
    if tid is None:
        return None
    names = op_column(ops, "name").astype(str)
    ts, end = op_column(ops, "ts").astype(float), op_column(ops, "end").astype(float)
    tids = op_column(ops, "tid")
    on = tids == tid
    inside = (end > start) & (ts < stop)
    top = np.flatnonzero(cpu & on & inside & (op_column(ops, "parent") == -1))
    top = top[np.argsort(ts[top], kind="stable")]
    act_op = acts["op"].to_numpy()
    host_work = acts["kind"].isin(("cpu_op", "compiled")).to_numpy()
    mine = np.flatnonzero(host_work & (act_op >= 0) & (tids[np.maximum(act_op, 0)] == tid))
    if not len(top):
        return None
    if len(mine):  # a CPU trace: the work is the leaf ops
        mine = mine[np.argsort(acts["ts"].to_numpy(float)[mine], kind="stable")]
        _, ws, we = _runs(acts["ts"].to_numpy(float)[mine], acts["end"].to_numpy(float)[mine])
    else:  # a GPU trace: the host's work is its top-level ops (they launch the kernels)
        _, ws, we = _runs(np.clip(ts[top], start, stop), np.clip(end[top], start, stop))
    gap_s, gap_e = we[:-1], ws[1:]

    loader = np.flatnonzero((cpu | annot) & on & inside & np.array([bool(_DATA_LOADER.search(n)) for n in names]))
    lruns = merged_runs(np.clip(ts[loader], start, stop), np.clip(end[loader], start, stop))
    loader_us = float(np.sum(lruns[1] - lruns[0])) if len(loader) else 0.0
    rest = (gap_e - gap_s) - (covered_within(gap_s, gap_e, lruns) if len(loader) else 0.0)
    short = (rest > 1e-9) & (rest < DISPATCH_GAP_US)
    long_ = rest >= DISPATCH_GAP_US

    at, upto = acts["ts"].to_numpy(float), acts["end"].to_numpy(float)
    rows = np.zeros(len(acts), dtype=bool)
    for ls, le in zip(*lruns):
        rows[mine] |= (at[mine] >= ls) & (upto[mine] <= le)

    # What holds each gap: the top-level op it lies in, else the next top-level op.
    ts_top, end_top = np.clip(ts[top], start, stop), np.clip(end[top], start, stop)
    mid = (gap_s + gap_e) / 2
    k = np.searchsorted(ts_top, mid, side="right") - 1
    held = (k >= 0) & (end_top[np.maximum(k, 0)] >= mid)
    nxt = np.minimum(np.where(held, k, k + 1), len(top) - 1)
    holder = top[nxt]
    steps = np.flatnonzero(annot & on & inside & np.array([bool(_OPT_STEP.match(n)) for n in names]))
    zero = np.flatnonzero(annot & on & inside & np.array([bool(_ZERO_GRAD.match(n)) for n in names]))

    def within(spans: np.ndarray, t: np.ndarray) -> np.ndarray:
        hit = np.zeros(len(t), dtype=bool)
        for j in spans:
            hit |= (t >= ts[j]) & (t <= end[j])
        return hit

    in_step, in_zero = within(steps, mid), within(zero, mid)
    modules = op_column(ops, "module") if "module" in ops.columns else np.full(len(ops), None, dtype=object)
    recorded = any(isinstance(m, str) and m for m in modules)
    where: dict[str, list] = {}
    for g in np.flatnonzero(short):
        if in_step[g]:
            label = "optimizer step"
        elif in_zero[g]:
            label = "zero_grad"
        elif names[holder[g]].startswith("autograd::"):
            label = "backward"
        else:
            m = modules[holder[g]]
            label = (generic_module(m) if isinstance(m, str) and m
                     else "outside any module" if recorded else "forward (no modules recorded)")
        slot = where.setdefault(label, [0.0, 0])
        slot[0] += float(rest[g])
        slot[1] += 1
    dur = end_top - ts_top
    kinds = [m.group(0) for n in names[loader] if (m := re.search(r"_\w*DataLoaderIter", n))]
    return HostGaps(
        tid, int(len(top)), int((dur < TINY_OP_US).sum()), float(np.sum(we - ws)),
        float(rest[short].sum()), int(short.sum()), float(rest[short & ~held].sum()),
        float(rest[long_].sum()), int(long_.sum()), loader_us, int(len(lruns[0])) if len(loader) else 0,
        np.flatnonzero(rows), where,
        _OPT_STEP.match(names[steps[0]]).group(1) if len(steps) else None,
        int(within(steps, ts_top).sum()) if len(steps) else 0, int(len(steps)), kinds[0] if kinds else None)


def generic_module(path: str) -> str:
    """``blocks.*.attn`` for ``blocks.3.attn`` (the gaps of every layer count together)."""
    return re.sub(r"(?<=[._])\d+(?=$|\.)", "*", path)


#: Optimizer kernels or ops that already batch the per-parameter loop (foreach / fused / apex).
OPTIMIZER_BATCHED = re.compile(r"multi_tensor_apply|_foreach_|fused_adam|FusedAdam|_fused_", re.I)


def optimizer_batched(a) -> bool:
    """Whether a rank's ops or kernels show a foreach / fused optimizer implementation."""
    for names in (a.activities["name"], pd.Series(op_column(a.trace.ops, "name"))):
        if names.astype(str).str.contains(OPTIMIZER_BATCHED).any():
            return True
    return False


def host_gap_lines(ctx) -> tuple[list[str], str | None]:
    """GPU rules on host wait: an evidence line naming where the main thread's gaps between
    top-level ops sit, and the optimizer line of the fix when a per-parameter step (no foreach /
    fused ops) holds a tenth of them (None otherwise)."""
    found = [g for a in ctx.analyses if (g := host_gaps(a)) is not None and g.gaps]
    if not found:
        return [], None
    n = ctx.ranks
    where: dict[str, float] = {}
    for g in found:
        for label, (us, _) in g.where.items():
            where[label] = where.get(label, 0.0) + us / n
    total = sum(where.values())
    ops = sum(g.ops for g in found) / n
    line = (f"on the host, {ops:,.0f} top-level ops leave {fmt_time(total)} of short gaps between them on the main "
            "thread: " + ", ".join(f"{k} {fmt_time(v)}" for k, v in sorted(where.items(), key=lambda kv: -kv[1])[:4]))
    optim = next((g.optimizer for g in found if g.optimizer), None)
    per = sum(g.optimizer_ops for g in found) / n
    steps = sum(g.optimizer_steps for g in found) / n
    opt_us = where.get("optimizer step", 0.0)
    advice = None
    if (optim and total > 0 and opt_us >= 0.1 * total and per >= PER_PARAMETER_OPS * steps
            and not any(optimizer_batched(a) for a in ctx.analyses)):
        advice = (f"optimizer = torch.optim.{optim}(params, lr=lr, foreach=True)  # or fused=True: the step "
                  f"dispatches {per:,.0f} per-parameter ops ({fmt_time(opt_us)} of host gaps)")
    return [line], advice


#: An optimizer step dispatching at least this many top-level ops per step runs a loop over its parameters.
PER_PARAMETER_OPS = 16


def in_optimizer_step(a) -> np.ndarray:
    """Per activity of rank analysis ``a``: whether its op runs inside an ``Optimizer.step#…`` range
    on the same thread (ranges are user annotations, not parents of the ops in them)."""
    ops, acts = a.trace.ops, a.activities
    out = np.zeros(len(acts), dtype=bool)
    if ops.empty or acts.empty:
        return out
    names = pd.Series(op_column(ops, "name"), dtype=object).astype(str)
    steps = np.flatnonzero(names.str.match(_OPT_STEP.pattern).to_numpy())
    if not len(steps):
        return out
    ts, end, tid = op_column(ops, "ts"), op_column(ops, "end"), op_column(ops, "tid")
    op_idx = acts["op"].to_numpy()
    valid = op_idx >= 0
    idx = op_idx[valid].astype(int)
    hit = np.zeros(len(idx), dtype=bool)
    for r in steps:
        hit |= (ts[idx] >= ts[r]) & (ts[idx] <= end[r]) & (tid[idx] == tid[r])
    out[valid] = hit
    return out
