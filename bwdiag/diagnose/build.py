"""Turn loaded rank traces into a Diagnosis: costs → roofline → timeline → findings."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from bwdiag.diagnose import uncovered
from bwdiag.diagnose.activities import _op_costs, cpu_activities, gpu_activities
from bwdiag.diagnose.communication import annotate_messages, collective_rows, fit_latency_bandwidth, with_regimes
from bwdiag.diagnose.compiled import compiled_facts
from bwdiag.diagnose.device import device_info
from bwdiag.diagnose.idle import idle_breakdown
from bwdiag.diagnose.launch import launch_stats
from bwdiag.diagnose.ranks import straggler
from bwdiag.diagnose import kernels as kernel_groups
from bwdiag.diagnose.kernels import flag_above_roof, group_activities, kernel_rows, place_groups
from bwdiag.diagnose.model import (
    TIME_KEYS,
    CompiledFacts,
    Coverage,
    DeviceInfo,
    Diagnosis,
    IdleBreakdown,
    LaunchStats,
    RankSummary,
    Source,
    TimeBreakdown,
)
from bwdiag.diagnose.records import mean_record
from bwdiag.diagnose.steps import last_complete_step, step_spans, trace_end_us
from bwdiag.diagnose.timeline import rank_time
from bwdiag.hardware import DeviceSpec, resolve_device
from bwdiag.hardware.spec import SpecSource
from bwdiag.hardware.host import trace_host
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
    """Diagnose one or more ranks of the same job against the device's ceilings."""
    warnings = list(load_warnings)
    trace_kind = "gpu" if any(t.is_gpu for t in traces) else "cpu"
    first = next((t for t in traces if t.is_gpu), traces[0])
    spec, spec_warnings = resolve_device(first.device_properties if trace_kind == "gpu" else None,
                                         override=device_spec, trace_kind=trace_kind,
                                         trace_metadata=[t.metadata for t in traces],
                                         accelerator=_accelerator(traces))
    warnings.extend(spec_warnings)
    if trace_kind == "cpu" and spec.spec_source is not SpecSource.ASSUMED:  # assumed: said just above
        warnings.append(f"CPU-only trace: CPU ops are placed against CPU ceilings ({spec.name}, "
                        f"spec_source '{spec.spec_source.value}')")
    analyses = [analyze_rank(t, spec) for t in traces]
    warnings.extend(_above_roof_warnings(analyses, spec))
    warnings.extend(_compiled_warnings(analyses))

    kernels, collectives, ranks = [], [], []
    for a in analyses:
        kernels.extend(kernel_rows(a.groups, a.trace.rank))
        collectives.extend(collective_rows(a.activities, a.trace.rank, spec, _world_size(a.trace)))
        rt = a.time
        compute_us = rt.busy_us - rt.by_bound["communication"]
        ranks.append(RankSummary(a.trace.rank, rt.window_us, rt.busy_us, compute_us, rt.communication_us,
                                 rt.exposed_communication_us, rt.by_bound["idle"], len(a.activities)))

    fits = fit_latency_bandwidth(collectives)
    collectives = with_regimes(collectives, fits)
    compiled = [a.compiled for a in analyses if a.compiled]
    rank_spans = _step_spans(analyses)
    spans = [s for s in rank_spans if s is not None]
    ranks = [r if s is None else dataclasses.replace(r, step_ids=s.step_ids, step_durations_us=s.durations_us)
             for r, s in zip(ranks, rank_spans)]

    coverage = _coverage(analyses)
    diagnosis = Diagnosis(
        source=Source(tuple(str(t.path) for t in traces), tuple(t.rank for t in traces), trace_kind,
                      _torch_version(traces)),
        device=_device_info(spec, traces),
        time=_time(analyses, spans),
        kernels=tuple(sorted(kernels, key=lambda r: -r.total_us)),
        collectives=tuple(collectives),
        findings=(),
        coverage=coverage,
        warnings=tuple(warnings + uncovered.warnings_for(coverage.uncovered)),
        ranks=tuple(ranks),
        idle_by_rank=tuple(a.idle for a in analyses if a.idle is not None),
        launch_by_rank=tuple(a.launch for a in analyses if a.launch is not None),
        comm_fits=tuple(fits.values()),
        straggler=_straggler(analyses),
        compiled=mean_record(compiled) if compiled else None,
    )
    return diagnosis, analyses


_ABOVE_ROOF_WHY = {
    kernel_groups.CACHE_CEILING: "memory-bound group(s) beat the memory roof: their data came from cache",
    kernel_groups.DISPATCH_CEILING: "CPU op group(s) finish ten times faster than this CPU could do their "
    "work: they dispatch it elsewhere (a GPU the trace did not record?); counted as dispatch overhead",
    kernel_groups.UNKNOWN_ESTIMATE_CEILING: "kernel group(s) beat their compute roof: the cost estimate or the "
    "device ceilings do not describe what ran (check the device, or pass --device-spec); bound unknown",
}


def _low_roof_why(spec: DeviceSpec) -> str:
    """Why CPU ops beat the compute roof, for where the roof came from (no advice to re-run a
    calibration just made: say what it measured instead)."""
    if spec.spec_source is SpecSource.ASSUMED:
        return ("the compute roof of the assumed CPU: the host is faster than the generic assumption "
                "(`bwdiag calibrate --device cpu` on the host that recorded the trace gives real ceilings)")
    cal = spec.calibration
    if spec.spec_source is SpecSource.CALIBRATED and cal is not None:
        when = f" at {cal.measured_at}" if getattr(cal, "measured_at", None) else ""
        quick = " with --quick" if getattr(cal, "quick", None) else ""
        return (f"the compute roof `bwdiag calibrate` measured{when}{quick}: the calibration caught less "
                "than this CPU reaches here (a busy machine, or a short run)")
    return "the compute roof given: the ceilings are below what this CPU reaches"


def _above_roof_warnings(analyses: list[RankAnalysis], spec: DeviceSpec) -> list[str]:
    counts: dict[str, int] = {}
    for a in analyses:
        for label, n in (a.above_roof or {}).items():
            counts[label] = counts.get(label, 0) + n
    out = []
    for label, n in counts.items():
        if label == kernel_groups.LOW_ROOF_CEILING:
            out.append(f"{n} CPU op group(s) beat {_low_roof_why(spec)}; their percentages are left out")
        elif label in _ABOVE_ROOF_WHY:
            out.append(f"{n} {_ABOVE_ROOF_WHY[label]}")
    return out


def _compiled_warnings(analyses: list[RankAnalysis]) -> list[str]:
    facts = [a.compiled for a in analyses if a.compiled]
    if not facts:
        return []
    n = len(analyses)
    out = []
    resid = sum(f.residual_us for f in facts) / n
    if resid > 0:
        est = sum(f.residual_estimated_us for f in facts) / n
        out.append(
            f"torch.compile: {_ms(resid)} of compiled-region time ran no recorded op (Inductor's fused C++ "
            f"loops, Dynamo/AOT wrappers) and is counted as busy CPU time; "
            + (f"{_ms(est)} of it is priced by the graph inputs' bytes, read once (a floor: outputs and saved "
               f"tensors are not recorded), the rest has no estimate" if est > 0 else
               "it has no cost estimate (no shapes recorded for it: without autograd no CompiledFunction op carries "
               "the graph inputs; torch._inductor.config.cpp.enable_kernel_profile = True names its kernels)"))
    comp = sum(f.compile_us for f in facts) / n
    if comp > 0:
        out.append(
            f"torch.compile compiled during the trace: {_ms(comp)} of Dynamo/Inductor compilation is not counted "
            f"as work (its aten ops run on fake tensors), and the first compiled calls after it run slower than "
            f"the steady state: profile after a warm-up (`bwdiag run --wait N`)")
    return out


def _ms(us: float) -> str:
    return f"{us / 1e3:.1f} ms" if us < 1e6 else f"{us / 1e6:.2f} s"


def _straggler(analyses: list[RankAnalysis]):
    """Who the other ranks wait for at matched collectives (``ranks.straggler``), or None."""
    comm = {a.trace.rank: a.activities.loc[a.activities["category"] == "communication", ["name", "ts", "dur"]]
            for a in analyses}
    return straggler(comm)


def _step_spans(analyses: list[RankAnalysis]) -> list:
    """Each rank's complete ProfilerStep spans (steps.StepSpans), None for a rank without steps."""
    return [step_spans(a.trace.tables.annotations, trace_end_us(a.trace.tables),
                       last_complete_step(a.trace.metadata)) for a in analyses]


def _time(analyses: list[RankAnalysis], spans: list) -> TimeBreakdown:
    n = len(analyses)
    total = sum(a.time.window_us for a in analyses) / n
    by_bound = {k: sum(a.time.by_bound[k] for a in analyses) / n for k in TIME_KEYS}
    exposed = sum(a.time.exposed_communication_us for a in analyses) / n
    comm = sum(a.time.communication_us for a in analyses)
    overlap = None
    if comm > 0:
        overlap = 100.0 * (comm - sum(a.time.exposed_communication_us for a in analyses)) / comm
    if not spans:
        return TimeBreakdown(total, by_bound, exposed, overlap)
    first = spans[0]
    return TimeBreakdown(total, by_bound, exposed, overlap, len(first.step_ids),
                         float(np.median([s.median_us for s in spans])),
                         min(s.min_us for s in spans), max(s.max_us for s in spans),
                         first.step_ids, tuple(sorted({i for s in spans for i in s.abnormal})),
                         first.side, first.excluded, tuple(first.durations_us))


def _coverage(analyses: list[RankAnalysis]) -> Coverage:
    """Coverage of compute kernels, copies and collectives, each on its own (see ``Coverage``)."""
    sums = {k: 0.0 for k in ("compute", "linked", "estimated", "copy", "copy_est", "coll", "coll_est")}
    for a in analyses:
        acts = a.activities
        if acts.empty:
            continue
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

    def share(part: str, whole: str) -> float | None:
        return float(100.0 * sums[part] / sums[whole]) if sums[whole] > 0 else None

    return Coverage(share("linked", "compute") or 0.0, share("estimated", "compute") or 0.0,
                    float(sums["compute"]), float(sums["copy"]), share("copy_est", "copy"),
                    float(sums["coll"]), share("coll_est", "coll"), uncovered.reasons(analyses, _op_costs))


def _device_info(spec: DeviceSpec, traces: Sequence[RankTrace]) -> DeviceInfo:
    """The ``device`` block, with the host the (first) trace names and any accelerator kind."""
    host = trace_host(traces[0].metadata)
    return dataclasses.replace(device_info(spec), trace_host=host.to_dict() if host.known else None,
                               accelerator=_accelerator(traces))


def _accelerator(traces: Sequence[RankTrace]) -> str | None:
    """The non-CUDA/HIP accelerator(s) the traces' device work ran on ("mtia", "xpu"), if any."""
    found = sorted({a for t in traces for a in t.tables.accelerators})
    return ", ".join(found) or None


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
