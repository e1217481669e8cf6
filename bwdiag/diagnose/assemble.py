"""The reduce's core: rank summaries (``digest.RankDigest``) → one ``Diagnosis`` (findings apart).

``build.diagnose`` (every rank in one process) and ``reduce.reduce`` (summaries from the map, on
any engine) both end here, so the two give the same numbers: kernel rows of every rank, the job's
α/β fits over all collective rows, time by bound and exposed communication as means per rank,
steps, coverage, uncovered reasons, idle and launch per rank, the straggler across collectives and
the warnings the facts earn.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from bwdiag.diagnose import kernels as kernel_groups
from bwdiag.diagnose import uncovered
from bwdiag.diagnose.communication import fit_latency_bandwidth, with_regimes
from bwdiag.diagnose.device import device_info
from bwdiag.diagnose.digest import COVERAGE_KEYS, RankDigest
from bwdiag.diagnose.model import TIME_KEYS, Coverage, DeviceInfo, Diagnosis, Source, TimeBreakdown
from bwdiag.diagnose.ranks import straggler
from bwdiag.diagnose.steps import slowed_window, unprofiled_step
from bwdiag.diagnose.records import mean_record
from bwdiag.hardware import DeviceSpec, resolve_device
from bwdiag.hardware.host import oversubscribed, trace_host
from bwdiag.hardware.spec import SpecSource


def job_device(device_properties: Mapping[str, Any] | None, trace_kind: str,
               metadata: Sequence[Mapping[str, Any]], accelerator: str | None,
               device_spec=None) -> tuple[DeviceSpec, list[str]]:
    """The job's ceilings and the warnings they come with: the first GPU rank's device (its
    ``device_properties``), a CPU for CPU-only jobs, or the ``device_spec`` override."""
    spec, warnings = resolve_device(device_properties if trace_kind == "gpu" else None,
                                    override=device_spec, trace_kind=trace_kind,
                                    trace_metadata=list(metadata), accelerator=accelerator)
    if trace_kind == "cpu" and spec.spec_source is not SpecSource.ASSUMED:  # assumed: said just above
        warnings.append(f"CPU-only trace: CPU ops are placed against CPU ceilings ({spec.name}, "
                        f"spec_source '{spec.spec_source.value}')")
    return spec, warnings


def accelerator_of(accelerators) -> str | None:
    """The non-CUDA/HIP accelerator(s) the ranks' device work ran on ("mtia", "xpu"), if any;
    ``accelerators``: one collection of kinds per rank."""
    found = sorted({a for kinds in accelerators for a in kinds})
    return ", ".join(found) or None


def assemble(digests: Sequence[RankDigest], spec: DeviceSpec, warnings: Sequence[str]) -> Diagnosis:
    """The job's diagnosis (no findings yet) from its ranks' summaries, in rank order; ``warnings``
    (loading, device) come first."""
    warnings = list(warnings)
    trace_kind = "gpu" if any(d.is_gpu for d in digests) else "cpu"
    warnings.extend(_above_roof_warnings(digests, spec))
    warnings.extend(_compiled_warnings(digests))
    warnings.extend(sorted({d.steps.note for d in digests if d.steps is not None and d.steps.note}))
    warnings.extend(_busy_host_warnings(digests))
    kernels = [k for d in digests for k in d.kernels]
    collectives = [c for d in digests for c in d.collectives]
    fits = fit_latency_bandwidth(collectives)
    collectives = with_regimes(collectives, fits)
    compiled = [d.compiled for d in digests if d.compiled]
    spans = [d.steps for d in digests if d.steps is not None]
    coverage = _coverage(digests)
    time = _time(digests, spans)
    if (slowed := slowed_window(time.step_durations_us, time.unprofiled_step_durations_us)) is not None:
        warnings.append(slowed)
    return Diagnosis(
        source=Source(tuple(str(d.path) for d in digests), tuple(d.rank for d in digests), trace_kind,
                      _torch_version(digests)),
        device=_device_info(spec, digests),
        time=time,
        kernels=tuple(sorted(kernels, key=lambda r: -r.total_us)),
        collectives=tuple(collectives),
        findings=(),
        coverage=coverage,
        warnings=tuple(warnings + uncovered.warnings_for(coverage.uncovered)),
        ranks=tuple(d.summary for d in digests),
        idle_by_rank=tuple(d.idle for d in digests if d.idle is not None),
        launch_by_rank=tuple(d.launch for d in digests if d.launch is not None),
        comm_fits=tuple(fits.values()),
        straggler=straggler({d.rank: d.calls[["name", "ts", "dur"]] for d in digests}),
        compiled=mean_record(compiled) if compiled else None,
    )


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


def _above_roof_warnings(digests: Sequence[RankDigest], spec: DeviceSpec) -> list[str]:
    counts: dict[str, int] = {}
    for d in digests:
        for label, n in d.above_roof.items():
            counts[label] = counts.get(label, 0) + n
    out = []
    for label, n in counts.items():
        if label == kernel_groups.LOW_ROOF_CEILING:
            out.append(f"{n} CPU op group(s) beat {_low_roof_why(spec)}; their percentages are left out")
        elif label in _ABOVE_ROOF_WHY:
            out.append(f"{n} {_ABOVE_ROOF_WHY[label]}")
    return out


def busiest_host_load(digests: Sequence[RankDigest]) -> dict[str, Any] | None:
    """The highest ``host_load`` (``{load1, cores}``) a bwdiag capture recorded among the ranks, or None."""
    worst = None
    for d in digests:
        load = ((d.metadata or {}).get("bwdiag") or {}).get("host_load")
        if isinstance(load, dict) and isinstance(load.get("load1"), (int, float)) and isinstance(load.get("cores"), int):
            if worst is None or load["load1"] > worst["load1"]:
                worst = {"load1": float(load["load1"]), "cores": load["cores"]}
    return worst


def _busy_host_warnings(digests: Sequence[RankDigest]) -> list[str]:
    """One warning when a bwdiag capture recorded on an oversubscribed host (its ``host_load``)."""
    worst = busiest_host_load(digests)
    if not oversubscribed(worst):
        return []
    return [f"the host was oversubscribed while recording (load average {worst['load1']:.1f} on {worst['cores']} "
            "cores): op and step times include waiting for a CPU and vary from run to run; record again on a "
            "quieter host before acting on small differences"]


def _compiled_warnings(digests: Sequence[RankDigest]) -> list[str]:
    facts = [d.compiled for d in digests if d.compiled]
    if not facts:
        return []
    n = len(digests)
    out = []
    resid = sum(f.residual_us for f in facts) / n
    if resid > 0:
        est = sum(f.residual_estimated_us for f in facts) / n
        out.append(
            f"torch.compile: {_ms(resid)} of compiled-region time ran no recorded op (Inductor's fused C++ "
            f"loops, Dynamo/AOT wrappers) and is counted as busy CPU time; "
            + (f"{_ms(est)} of it is priced by the graph inputs' bytes, read once (a floor: outputs and saved "
               f"tensors are not recorded), the rest has no estimate" if est > 0 else
               "it has no cost estimate (the compiled graphs also run recorded ops — GEMMs and attention Inductor "
               "calls out to — so the graph inputs' bytes on CompiledFunction cannot be split between those and "
               "the fused loops; torch._inductor.config.cpp.enable_kernel_profile = True names its kernels)"
               if sum(f.graph_inputs for f in facts) > 0 else
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


def _time(digests: Sequence[RankDigest], spans: list) -> TimeBreakdown:
    analyses = digests  # each has .time (timeline.RankTime)
    n = len(analyses)
    total = sum(a.time.window_us for a in analyses) / n
    by_bound = {k: sum(a.time.by_bound[k] for a in analyses) / n for k in TIME_KEYS}
    exposed = sum(a.time.exposed_communication_us for a in analyses) / n
    comm = sum(a.time.communication_us for a in analyses)
    overlap = None
    if comm > 0:
        overlap = 100.0 * (comm - sum(a.time.exposed_communication_us for a in analyses)) / comm
    plain = [u for u in (unprofiled_step(d.metadata) for d in digests) if u is not None]
    unprofiled = {}
    if plain:
        unprofiled = dict(unprofiled_step_us=float(np.median([u.median_us for u in plain])),
                          unprofiled_step_ids=plain[0].step_ids, unprofiled_clock=plain[0].clock,
                          unprofiled_statistic="mean" if any(u.statistic == "mean" for u in plain) else "median",
                          unprofiled_step_durations_us=plain[0].durations_us)
    if not spans:
        return TimeBreakdown(total, by_bound, exposed, overlap, **unprofiled)
    first = spans[0]
    return TimeBreakdown(total, by_bound, exposed, overlap, len(first.step_ids),
                         float(np.median([s.median_us for s in spans])),
                         min(s.min_us for s in spans), max(s.max_us for s in spans),
                         first.step_ids, tuple(sorted({i for s in spans for i in s.abnormal})),
                         first.side, first.excluded, tuple(first.durations_us), **unprofiled,
                         step_statistic="mean" if any(s.statistic == "mean" for s in spans) else "median")


def _coverage(digests: Sequence[RankDigest]) -> Coverage:
    """Coverage of compute kernels, copies and collectives, each on its own (see ``Coverage``)."""
    sums = {k: 0.0 for k in COVERAGE_KEYS}
    for d in digests:
        for k in COVERAGE_KEYS:
            sums[k] += d.coverage[k]

    def share(part: str, whole: str) -> float | None:
        return float(100.0 * sums[part] / sums[whole]) if sums[whole] > 0 else None

    return Coverage(share("linked", "compute") or 0.0, share("estimated", "compute") or 0.0,
                    float(sums["compute"]), float(sums["copy"]), share("copy_est", "copy"),
                    float(sums["coll"]), share("coll_est", "coll"), uncovered.combine([d.uncovered for d in digests]))


def _device_info(spec: DeviceSpec, digests: Sequence[RankDigest]) -> DeviceInfo:
    """The ``device`` block, with the host the (first) trace names and any accelerator kind."""
    host = trace_host(digests[0].metadata)
    facts = host.to_dict() if host.known else None
    load = busiest_host_load(digests)
    if facts is not None and load is not None:
        facts["load1"] = load["load1"]  # the busiest rank's 1-minute load average as its window opened
    return dataclasses.replace(device_info(spec), trace_host=facts,
                               accelerator=accelerator_of(d.accelerators for d in digests))


def _torch_version(digests: Sequence[RankDigest]) -> str | None:
    for d in digests:
        meta = d.metadata.get("bwdiag")
        if isinstance(meta, dict) and isinstance(meta.get("torch_version"), str):
            return meta["torch_version"]
    return None
