"""The rank summary: what the reduce needs of one rank, without its events.

A :class:`RankDigest` is the map's output (:mod:`bwdiag.diagnose.reduce`): one rank's kernel groups
(already placed on the roofline), collective rows, time by bound, idle and its causes, launch facts,
complete steps, coverage sums, uncovered reasons, every collective call (for the cross-rank
straggler analysis), and the rank's findings with their what-if shares. It is plain data: it
pickles, so Ray and process pools move it, and its size grows with kernel groups and collective
calls, never with the number of events.

:func:`digest_of` builds one from a :class:`~bwdiag.diagnose.build.RankAnalysis`;
:func:`~bwdiag.diagnose.assemble.assemble` turns digests into a ``Diagnosis``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bwdiag.diagnose import uncovered
from bwdiag.diagnose.communication import collective_rows
from bwdiag.diagnose.kernels import kernel_rows
from bwdiag.diagnose.model import (
    CollectiveRow,
    CompiledFacts,
    Finding,
    IdleBreakdown,
    KernelRow,
    LaunchStats,
    RankSummary,
    WhatIf,
)
from bwdiag.diagnose.steps import StepSpans, last_complete_step, step_spans, trace_end_us
from bwdiag.hardware import DeviceSpec
from bwdiag.trace.windows import process_key, start_ns

#: Coverage sums (µs) a rank contributes: compute kernels, linked / estimated compute, copies and
#: estimated copies, collectives and estimated collectives.
COVERAGE_KEYS = ("compute", "linked", "estimated", "copy", "copy_est", "coll", "coll_est")

#: Columns of :attr:`RankDigest.calls`, one row per collective call.
CALL_COLUMNS = ("name", "seq", "ts", "end", "dur", "bytes")


@dataclass(frozen=True)
class RankFinding:
    """One finding of one rank (its rules ran on that rank alone) and what the rank's what-if
    applied of it (``applied_us``; None when the finding was not among the projected ones), by the
    subtraction and by the dependency graph (``graph_applied_us``; None also without a graph)."""

    finding: Finding
    idle_us: float = 0.0
    applied_us: float | None = None
    graph_applied_us: float | None = None


@dataclass
class RankDigest:
    """One rank, summarised (see the module docstring). ``rank`` is -1 until the reduce assigns one
    when neither ``distributedInfo`` nor the file name said it (``named_rank`` keeps what the trace said)."""

    path: Path
    rank: int
    named_rank: int
    process: tuple | None  # (host, pid, rank-in-trace): windows of one process are one rank
    start_ns: float
    is_gpu: bool
    metadata: dict[str, Any]
    device_properties: dict[str, Any] | None
    accelerators: tuple[str, ...]
    spec_name: str  # the device whose ceilings its groups were placed against ...
    spec_key: tuple  # ... and those ceilings (:func:`spec_key`), to tell a rank placed on other ones
    load_warnings: tuple[str, ...]
    kernels: tuple[KernelRow, ...]
    collectives: tuple[CollectiveRow, ...]  # before the job's α/β fit names their regimes
    summary: RankSummary
    time: Any  # timeline.RankTime
    steps: StepSpans | None
    idle: IdleBreakdown | None
    launch: LaunchStats | None
    compiled: CompiledFacts | None
    above_roof: dict[str, int]
    coverage: dict[str, float]
    uncovered: tuple[float, dict[str, float]]  # uncovered.rank_reasons
    calls: pd.DataFrame  # CALL_COLUMNS: every collective call
    findings: tuple[RankFinding, ...] = ()
    whatif: WhatIf | None = None

    def with_rank(self, rank: int) -> RankDigest:
        """The digest renumbered as ``rank`` (every per-rank record says it)."""
        def re(rec):
            return dataclasses.replace(rec, rank=rank) if rec is not None else None

        return dataclasses.replace(
            self, rank=rank, kernels=tuple(re(k) for k in self.kernels),
            collectives=tuple(re(c) for c in self.collectives), summary=re(self.summary),
            idle=re(self.idle), launch=re(self.launch))


def digest_of(analysis, spec: DeviceSpec, named_rank: int | None = None) -> RankDigest:
    """The summary of one ``build.RankAnalysis`` placed against ``spec`` (its findings are added by
    the map, :func:`bwdiag.diagnose.reduce.summarize_rank`)."""
    from bwdiag.diagnose.activities import _op_costs

    t = analysis.trace
    acts = analysis.activities
    rt = analysis.time
    compute_us = rt.busy_us - rt.by_bound["communication"]
    steps = step_spans(t.tables.annotations, trace_end_us(t.tables), last_complete_step(t.metadata))
    summary = RankSummary(t.rank, rt.window_us, rt.busy_us, compute_us, rt.communication_us,
                          rt.exposed_communication_us, rt.by_bound["idle"], len(acts))
    if steps is not None:  # the report's rank x step heat strip
        summary = dataclasses.replace(summary, step_ids=steps.step_ids, step_durations_us=steps.durations_us)
    return RankDigest(
        path=t.path, rank=t.rank, named_rank=t.rank if named_rank is None else named_rank,
        process=process_key(t), start_ns=start_ns(t), is_gpu=t.is_gpu, metadata=t.metadata,
        device_properties=t.device_properties, accelerators=tuple(sorted(t.tables.accelerators)),
        spec_name=spec.name, spec_key=spec_key(spec), load_warnings=tuple(t.warnings),
        kernels=tuple(kernel_rows(analysis.groups, t.rank)),
        collectives=tuple(collective_rows(acts, t.rank, spec, world_size(t.metadata))),
        summary=summary, time=rt,
        steps=steps,
        idle=analysis.idle, launch=analysis.launch, compiled=analysis.compiled,
        above_roof=dict(analysis.above_roof or {}), coverage=coverage_sums(acts),
        uncovered=uncovered.rank_reasons(analysis, _op_costs), calls=collective_calls(acts),
    )


def spec_key(spec: DeviceSpec) -> tuple:
    """What tells two devices' ceilings apart, as plain data (``DeviceSpec`` holds read-only
    mappings that do not pickle)."""
    return (spec.name, spec.kind, str(spec.spec_source), spec.memory_bandwidth, spec.interconnect_bandwidth,
            tuple(sorted(spec.tensor_flops.items())), tuple(sorted(spec.vector_flops.items())))


def world_size(metadata: dict) -> int | None:
    """``distributedInfo.world_size`` of a trace's metadata, None without one."""
    info = metadata.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("world_size"), int):
        return info["world_size"]
    return None


def coverage_sums(acts: pd.DataFrame) -> dict[str, float]:
    """One rank's :data:`COVERAGE_KEYS` sums (µs)."""
    sums = {k: 0.0 for k in COVERAGE_KEYS}
    if acts.empty:
        return sums
    dur = acts["dur"].to_numpy(float)
    kind = acts["kind"].to_numpy(dtype=object)
    is_copy = (kind == "memcpy") | (kind == "memset")
    is_coll = ~is_copy & (acts["category"].to_numpy(dtype=object) == "communication")
    is_compute = ~is_copy & ~is_coll
    known = acts["flops"].notna().to_numpy() | acts["bytes"].notna().to_numpy()
    sums["compute"] += dur[is_compute].sum()
    sums["linked"] += dur[is_compute & (acts["op"].to_numpy() >= 0)].sum()
    sums["estimated"] += dur[is_compute & known].sum()
    sums["copy"] += dur[is_copy].sum()
    sums["copy_est"] += dur[is_copy & known].sum()
    sums["coll"] += dur[is_coll].sum()
    sums["coll_est"] += dur[is_coll & known].sum()
    return sums


def collective_calls(acts: pd.DataFrame) -> pd.DataFrame:
    """Every collective call of a rank: kernel name, its sequence number among calls of that name
    (the k-th call matches the k-th on every other rank), start, end, duration (µs) and message
    bytes (NaN when unknown)."""
    comm = acts.loc[acts["category"] == "communication"] if len(acts) else acts
    if comm.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "name" else float) for c in CALL_COLUMNS})
    # Rows stay in the activities' order (the straggler analysis sorts them itself); ``seq`` counts
    # calls of each name in time order.
    seq = comm.sort_values("ts", kind="stable").groupby("name", sort=False).cumcount().reindex(comm.index)
    msg = comm["msg_bytes"] if "msg_bytes" in comm else pd.Series(np.nan, index=comm.index)
    out = pd.DataFrame({
        "name": comm["name"].astype(str).astype("category"),
        "seq": seq.to_numpy(np.int64),
        "ts": comm["ts"].to_numpy(float),
        "end": (comm["ts"] + comm["dur"]).to_numpy(float),
        "dur": comm["dur"].to_numpy(float),
        "bytes": pd.to_numeric(msg, errors="coerce").to_numpy(float),
    })
    return out.reset_index(drop=True)
