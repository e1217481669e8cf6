"""Runs of consecutive memory-bound elementwise kernels on one stream (or one CPU thread).

A *run* is what a fusing compiler would turn into one kernel: back-to-back pointwise / norm /
cast / reduction / softmax / dropout kernels (or leaf CPU ops) on the same stream, each with a
byte estimate, each reading a tensor the size of what the one before wrote (traces record shapes,
not tensor identities: this is the dataflow test they allow). Anything else on that stream — a GEMM, a copy,
a collective, a memcpy, a kernel without shapes — ends the run. View and allocation ops
(``aten::view``, ``aten::empty`` …) move no data and do not end it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bwdiag.costs import Category
from bwdiag.diagnose.findings.base import output_bytes, tensor_sizes

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

#: Kernels a compiler already produced (fusing them again is not advice).
COMPILED = re.compile(r"^triton_|fused_|_fused|cutlass|__nv_", re.I)


@dataclass(frozen=True)
class Run:
    """One run of fusable kernels: row positions in the rank's activities, in time order."""

    rows: np.ndarray
    bytes: float  # what the unfused kernels move
    saved_bytes: float  # intermediates a fused kernel keeps on chip (written and read back once)
    time_us: float  # the kernels' summed time

    @property
    def achieved_bytes_per_s(self) -> float:
        return self.bytes / (self.time_us / 1e6)

    @property
    def saving_us(self) -> float:
        """Saved bytes at the run's own achieved bandwidth."""
        return self.saved_bytes / self.achieved_bytes_per_s * 1e6


def fusable_runs(acts: pd.DataFrame, ops: pd.DataFrame, min_kernels: int = 2) -> list[Run]:
    """Every run of at least ``min_kernels`` fusable kernels, per stream, in time order."""
    if acts.empty:
        return []
    order = acts.sort_values(["stream", "ts"], kind="stable").index
    runs: list[Run] = []
    current: list[int] = []
    prev_out = None  # bytes the last member wrote
    stream = None
    pos_of = {label: i for i, label in enumerate(acts.index)}
    for label in order:
        row = acts.loc[label]
        if row["stream"] != stream:
            _close(current, acts, ops, runs, min_kernels)
            current, prev_out, stream = [], None, row["stream"]
        if row["kind"] == "memset" or (row["kind"] == "cpu_op" and NO_DATA_OPS.match(str(row["name"]))):
            continue
        op = int(row["op"])
        out = output_bytes(ops, op, float(row["bytes"])) if _fusable(row) else None
        if out is None or (prev_out is not None and not _reads(ops, op, prev_out)):
            _close(current, acts, ops, runs, min_kernels)
            current, prev_out = [], None
            if out is None:
                continue
        current.append(pos_of[label])
        prev_out = out
    _close(current, acts, ops, runs, min_kernels)
    return runs


def _reads(ops: pd.DataFrame, op: int, written: float) -> bool:
    """Whether op ``op`` could read a tensor of ``written`` bytes: one of its tensor arguments (in
    its recorded dtype) is that size. Traces record shapes, not tensor identities; this is the
    dataflow test they allow."""
    return any(written == n * e for n, e in tensor_sizes(ops, op))


def _fusable(row) -> bool:
    return (
        row["category"] in FUSABLE
        and row["bound"] in FUSABLE_BOUNDS
        and row["kind"] in ("kernel", "cpu_op")
        and not row["graph"]
        and int(row["op"]) >= 0
        and np.isfinite(row["bytes"])
        and row["bytes"] > 0
        and not COMPILED.match(str(row["name"]))
    )


def _close(rows: list[int], acts: pd.DataFrame, ops: pd.DataFrame, runs: list[Run], min_kernels: int) -> None:
    if len(rows) < min_kernels:
        return
    sub = acts.iloc[rows]
    # Bytes per op (an op's kernels share its traffic), in time order of the op's first kernel.
    per_op = sub.groupby("op", sort=False)["bytes"].sum()
    if len(per_op) < min_kernels or sub["op_name"].nunique() < 2:
        return  # one op repeated over many tensors is side-by-side work, not a dataflow chain
    outs = [output_bytes(ops, int(op), float(b)) for op, b in per_op.items()]
    if any(o is None for o in outs):
        return
    total = float(per_op.sum())
    first_in = float(per_op.iloc[0]) - outs[0]
    # Each intermediate is written once and read back at least once; a fused kernel still reads
    # the first op's inputs and writes the last op's output.
    saved = min(2.0 * sum(outs[:-1]), total - first_in - outs[-1])
    time_us = float(sub["dur"].sum())
    if saved > 0 and time_us > 0:
        runs.append(Run(np.asarray(rows), total, saved, time_us))
