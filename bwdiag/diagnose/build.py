"""Turn loaded rank traces into a Diagnosis: costs → roofline → timeline → findings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from bwdiag.diagnose.activities import cpu_activities, gpu_activities
from bwdiag.diagnose.assemble import accelerator_of, assemble, job_device
from bwdiag.diagnose.communication import annotate_messages
from bwdiag.diagnose.compiled import compiled_facts
from bwdiag.diagnose.digest import digest_of
from bwdiag.diagnose.idle import idle_breakdown
from bwdiag.diagnose.kernels import flag_above_roof, group_activities, place_groups
from bwdiag.diagnose.launch import launch_stats
from bwdiag.diagnose.model import CompiledFacts, Diagnosis, IdleBreakdown, LaunchStats
from bwdiag.diagnose.timeline import rank_time
from bwdiag.hardware import DeviceSpec
from bwdiag.trace import RankTrace


@dataclass
class RankAnalysis:
    """Everything computed for one rank; the findings rules read these (DataFrames stay in diagnose/)."""

    trace: RankTrace
    activities: pd.DataFrame  # one row per kernel / memcpy / memset (or leaf CPU op), with group + bound
    groups: pd.DataFrame  # one row per kernel group, placed on the roofline
    time: object  # timeline.RankTime
    idle: IdleBreakdown | None = None  # GPU ranks
    above_roof: dict | None = None  # ceiling label → groups measured above their roof (kernels.flag_above_roof)
    launch: LaunchStats | None = None  # GPU ranks
    compiled: CompiledFacts | None = None  # CPU ranks with torch.compile regions


def analyze_rank(trace: RankTrace, spec: DeviceSpec) -> RankAnalysis:
    acts = gpu_activities(trace) if trace.is_gpu else cpu_activities(trace)
    annotate_messages(acts, trace.ops)
    groups = place_groups(group_activities(acts), spec) if len(acts) else pd.DataFrame(
        columns=["bound", "total_us", "flops", "bytes"]
    )
    above = flag_above_roof(groups, spec)
    bounds = groups["bound"].reindex(acts["group"]).to_numpy(dtype=object) if len(acts) else np.array([], dtype=object)
    acts["bound"] = bounds
    analysis = RankAnalysis(trace, acts, groups, rank_time(acts, bounds), above_roof=above)
    if not trace.is_gpu:
        analysis.compiled = compiled_facts(trace.ops, acts)
    if trace.is_gpu:
        analysis.idle = idle_breakdown(trace, acts)
        analysis.launch = launch_stats(acts, analysis.time.window_us, analysis.idle.host_wait_us, trace.rank)
    return analysis


def diagnose(traces: Sequence[RankTrace], *, device_spec: Path | None = None,
             load_warnings: Sequence[str] = ()) -> tuple[Diagnosis, list[RankAnalysis]]:
    """Diagnose one or more ranks of the same job against the device's ceilings (every rank in
    this process; :mod:`bwdiag.diagnose.reduce` does the same from rank summaries)."""
    diagnosis, analyses, _ = diagnose_with_digests(traces, device_spec=device_spec, load_warnings=load_warnings)
    return diagnosis, analyses


def diagnose_with_digests(traces: Sequence[RankTrace], *, device_spec: Path | None = None,
                          load_warnings: Sequence[str] = ()) -> tuple[Diagnosis, list[RankAnalysis], list]:
    """:func:`diagnose` and the rank summaries (``digest.RankDigest``) it was assembled from."""
    trace_kind = "gpu" if any(t.is_gpu for t in traces) else "cpu"
    first = next((t for t in traces if t.is_gpu), traces[0])
    spec, spec_warnings = job_device(first.device_properties, trace_kind, [t.metadata for t in traces],
                                     accelerator_of(t.tables.accelerators for t in traces), device_spec)
    analyses = [analyze_rank(t, spec) for t in traces]
    digests = [digest_of(a, spec) for a in analyses]
    return assemble(digests, spec, [*load_warnings, *spec_warnings]), analyses, digests
