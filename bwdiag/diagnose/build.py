"""Turn loaded rank traces into a Diagnosis: costs → roofline → timeline → findings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from bwdiag.diagnose.activities import cpu_activities, gpu_activities
from bwdiag.diagnose.communication import collective_rows
from bwdiag.diagnose.kernels import group_activities, kernel_rows, place_groups
from bwdiag.diagnose.model import (
    TIME_KEYS,
    Coverage,
    Diagnosis,
    RankSummary,
    Source,
    TimeBreakdown,
)
from bwdiag.diagnose.timeline import profiler_steps, rank_time
from bwdiag.hardware import DeviceSpec, resolve_device
from bwdiag.trace import RankTrace


@dataclass
class RankAnalysis:
    """Everything computed for one rank; the findings rules read these (DataFrames stay in diagnose/)."""

    trace: RankTrace
    activities: pd.DataFrame  # one row per kernel / memcpy / memset (or leaf CPU op), with group + bound
    groups: pd.DataFrame  # one row per kernel group, placed on the roofline
    time: object  # timeline.RankTime


def analyze_rank(trace: RankTrace, spec: DeviceSpec) -> RankAnalysis:
    acts = gpu_activities(trace) if trace.is_gpu else cpu_activities(trace)
    groups = place_groups(group_activities(acts), spec) if len(acts) else pd.DataFrame(
        columns=["bound", "total_us", "flops", "bytes"]
    )
    bounds = groups["bound"].reindex(acts["group"]).to_numpy(dtype=object) if len(acts) else np.array([], dtype=object)
    acts["bound"] = bounds
    return RankAnalysis(trace, acts, groups, rank_time(acts, bounds))


def diagnose(traces: Sequence[RankTrace], *, device_spec: Path | None = None,
             load_warnings: Sequence[str] = ()) -> tuple[Diagnosis, list[RankAnalysis]]:
    """Diagnose one or more ranks of the same job against the device's ceilings."""
    warnings = list(load_warnings)
    trace_kind = "gpu" if any(t.is_gpu for t in traces) else "cpu"
    first = next((t for t in traces if t.is_gpu), traces[0])
    spec, spec_warnings = resolve_device(first.device_properties if trace_kind == "gpu" else None,
                                         override=device_spec, trace_kind=trace_kind)
    warnings.extend(spec_warnings)
    if trace_kind == "cpu":
        warnings.append("CPU-only trace: leaf CPU ops are placed against the host CPU's ceilings")
    analyses = [analyze_rank(t, spec) for t in traces]

    kernels, collectives, ranks = [], [], []
    for a in analyses:
        kernels.extend(kernel_rows(a.groups, a.trace.rank))
        collectives.extend(collective_rows(a.activities, a.trace.rank, spec, _world_size(a.trace)))
        rt = a.time
        compute_us = rt.busy_us - rt.by_bound["communication"]
        ranks.append(RankSummary(a.trace.rank, rt.window_us, rt.busy_us, compute_us, rt.communication_us,
                                 rt.exposed_communication_us, rt.by_bound["idle"], len(a.activities)))

    diagnosis = Diagnosis(
        source=Source(tuple(str(t.path) for t in traces), tuple(t.rank for t in traces), trace_kind,
                      _torch_version(traces)),
        device=spec.to_device_info(),
        time=_time(analyses),
        kernels=tuple(sorted(kernels, key=lambda r: -r.total_us)),
        collectives=tuple(collectives),
        findings=(),
        coverage=_coverage(analyses),
        warnings=tuple(warnings),
        ranks=tuple(ranks),
    )
    return diagnosis, analyses


def _time(analyses: list[RankAnalysis]) -> TimeBreakdown:
    n = len(analyses)
    total = sum(a.time.window_us for a in analyses) / n
    by_bound = {k: sum(a.time.by_bound[k] for a in analyses) / n for k in TIME_KEYS}
    exposed = sum(a.time.exposed_communication_us for a in analyses) / n
    comm = sum(a.time.communication_us for a in analyses)
    overlap = None
    if comm > 0:
        overlap = 100.0 * (comm - sum(a.time.exposed_communication_us for a in analyses)) / comm
    steps = profiler_steps(analyses[0].trace.tables.annotations)
    return TimeBreakdown(total, by_bound, exposed, overlap, steps, total / steps if steps else None)


def _coverage(analyses: list[RankAnalysis]) -> Coverage:
    total = linked = estimated = 0.0
    for a in analyses:
        acts = a.activities
        if acts.empty:
            continue
        dur = acts["dur"].to_numpy(float)
        total += dur.sum()
        linked += dur[acts["op"].to_numpy() >= 0].sum()
        known = acts["flops"].notna().to_numpy() | acts["bytes"].notna().to_numpy()
        estimated += dur[known].sum()
    if total <= 0:
        return Coverage(0.0, 0.0)
    return Coverage(100.0 * linked / total, 100.0 * estimated / total)


def _world_size(trace: RankTrace) -> int | None:
    info = trace.metadata.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("world_size"), int):
        return info["world_size"]
    return None


def _torch_version(traces: Sequence[RankTrace]) -> str | None:
    for t in traces:
        meta = t.metadata.get("bwdiag")
        if isinstance(meta, dict) and isinstance(meta.get("torch_version"), str):
            return meta["torch_version"]
    return None
