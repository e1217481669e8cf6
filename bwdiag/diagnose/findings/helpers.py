"""Helpers the findings rules share: op-table lookups, byte counts, kernel groups, evidence text.

Every helper a second rule needs lives here, so that no rule module imports another. Nothing here
reads the diagnosis' timeline sections: they come through :class:`~bwdiag.diagnose.findings.base.RuleContext`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pandas as pd

from bwdiag.costs.dtypes import dtype_bytes
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


def unexplained_host_wait(ctx) -> float:
    """Host-wait idle (µs) that no sync or data-loader wait accounts for: the GPU waiting for
    Python / the framework to launch the next kernel. (Pageable copies are device time, not idle.)"""
    idle = ctx.idle
    if idle is None:
        return 0.0
    return max(0.0, idle.host_wait_us - (idle.sync_us + idle.data_loader_us))


def looks_launch_bound(ctx) -> bool:
    """Most kernels are tiny (or the timeline says launch-bound): the wait is per-launch overhead.
    The launch-overhead rule reports such a wait, the host-bound rule every other."""
    launch = ctx.launch
    if launch is None or not launch.kernels:
        return False
    return launch.launch_bound or int(launch.short_kernels) >= int(launch.kernels) / 2
