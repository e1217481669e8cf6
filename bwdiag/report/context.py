"""The report context: every number the HTML page shows, as plain JSON-able data.

``build_context`` is the only place where the report decides *what* to show (verdict, roofline
geometry, tables); the template and its JavaScript only decide *how*. Times are µs, rates per
second, percentages ×100, and anything unknown is ``None`` (never zero, never NaN).
"""

from __future__ import annotations

import math
import numbers
from enum import Enum
from pathlib import PurePath
from typing import Any

from bwdiag import __version__
from bwdiag.diagnose.model import TIME_KEYS, Bound, Diagnosis, FindingKind, KernelRow, SpecSource
from bwdiag.report.extras_view import display_tree, humanize

#: Legend labels for ``time.by_bound`` keys (communication there is the *exposed* part).
TIME_LABELS = {
    "compute": "Compute",
    "memory": "Memory",
    "latency": "Latency",
    "communication": "Exposed communication",
    "idle": "Idle",
    "unknown": "Unknown",
}

_HEADLINES = {
    "compute": "Compute-bound: most time is in kernels limited by the FLOP/s ceiling",
    "memory": "Memory-bound: most time is in kernels limited by memory bandwidth",
    "latency": "Latency-bound: most time is in kernels too small to fill the device",
    "communication": "Communication-bound: most time is communication not hidden behind compute",
    "idle": "Device idle: most of the time the device waits for the host, input or a sync",
    "unknown": "Mostly unclassified: most time is in kernels bwdiag has no cost estimate for",
}

SPEC_SOURCE_NOTES = {
    SpecSource.TABLE.value: "datasheet table shipped with bwdiag (dense peaks)",
    SpecSource.CALIBRATED.value: "measured on this machine with `bwdiag calibrate`",
    SpecSource.USER.value: "given by you (device spec override)",
    SpecSource.ASSUMED.value: "ASSUMED: device not recognised, generic fallback ceilings; "
    "pass a device spec to get real percentages",
}

#: The slices of the step each kind of finding can shorten; a projection never saves more time
#: from a slice than the slice holds. Kinds not listed are capped only by the total.
FINDING_ACTS_ON: dict[str, tuple[str, ...]] = {
    FindingKind.FUSION.value: ("memory", "latency"),
    FindingKind.QUANTIZATION.value: ("compute", "memory"),
    FindingKind.PRECISION.value: ("compute", "memory"),
    FindingKind.LAYOUT.value: ("compute", "memory"),
    FindingKind.CAST.value: ("memory", "latency"),
    FindingKind.OVERLAP.value: ("communication",),
    FindingKind.LAUNCH_OVERHEAD.value: ("latency", "idle"),
    FindingKind.BATCHING.value: ("latency", "idle"),
    FindingKind.HOST_BOUND.value: ("idle",),
    FindingKind.DATA_LOADER.value: ("idle",),
    FindingKind.SYNC.value: ("idle",),
}

TOP_FINDINGS = 3


def build_context(diagnosis: Diagnosis) -> dict:
    """Everything the page needs, as plain JSON-able data (see the module docstring).

    Kernel rows are ordered by total time, longest first; ``roofline.points[*].k``,
    ``roofline.unplotted[*].k`` and finding evidence refer to kernels by that index.
    """
    kernels = sorted(diagnosis.kernels, key=lambda k: (-_num(k.total_us), k.rank, k.name))
    kernel_rows = _kernel_rows(kernels)
    ranks = sorted({k.rank for k in kernels} | set(diagnosis.source.ranks))
    ctx = {
        "schema": diagnosis.schema,
        "bwdiag_version": __version__,
        "title": _title(diagnosis),
        "source": {
            "paths": list(diagnosis.source.paths),
            "ranks": list(diagnosis.source.ranks),
            "trace_kind": diagnosis.source.trace_kind,
            "torch_version": diagnosis.source.torch_version,
        },
        "multi_rank": len(ranks) > 1,
        # What a row of the kernel table is: GPU kernels, or leaf CPU ops in a CPU-only trace.
        "item_label": "CPU op" if diagnosis.source.trace_kind == "cpu" else "Kernel",
        "verdict": _verdict(diagnosis),
        "device": _device(diagnosis),
        "roofline": _roofline(diagnosis, kernels),
        "kernels": _columns(kernel_rows),
        "kernel_summary": {
            "groups": len(kernels),
            "launches": sum(k.count for k in kernels),
            "total_us": sum(_num(k.total_us) for k in kernels),
            "categories": sorted({k.category for k in kernels}),
            "bounds": [b.value for b in Bound if any(_bound(k) == b.value for k in kernels)],
        },
        "findings": _findings(diagnosis, kernels),
        "communication": _communication(diagnosis),
        "ranks": _ranks(diagnosis),
        "idle": _idle(diagnosis),
        "extras": [
            {"key": key, "title": humanize(key), "tree": display_tree(key, value)}
            for key, value in diagnosis.extras.items()
            if key not in ("projected_us", "idle_breakdown")
        ],
        "coverage": {
            "linked_pct": _clean(diagnosis.coverage.linked_pct),
            "estimated_pct": _clean(diagnosis.coverage.estimated_pct),
        },
        "warnings": list(diagnosis.warnings),
    }
    return _clean(ctx)


def _title(d: Diagnosis) -> str:
    names = [PurePath(p).name for p in d.source.paths]
    if not names:
        return "bwdiag report"
    shown = names[0] if len(names) == 1 else f"{names[0]} (+{len(names) - 1} more)"
    return f"bwdiag report: {shown}"


# ---------------------------------------------------------------------------------------- verdict


def _verdict(d: Diagnosis) -> dict:
    total = _num(d.time.total_us)
    bars = []
    for key in TIME_KEYS:
        us = _num(d.time.by_bound.get(key, 0.0))
        bars.append(
            {"key": key, "label": TIME_LABELS[key], "us": us,
             "pct": 100.0 * us / total if total > 0 else 0.0}
        )
    dominant = max(bars, key=lambda b: b["us"]) if total > 0 else None
    findings = sorted(d.findings, key=lambda f: -_num(f.est_saving_us))
    projected = projected_time(d)
    step_us = _clean(d.time.step_us)
    verdict: dict[str, Any] = {
        "total_us": total,
        "steps": d.time.steps,
        "step_us": step_us,
        "bars": bars,
        "dominant": dominant["key"] if dominant else None,
        "dominant_pct": dominant["pct"] if dominant else None,
        "headline": _HEADLINES[dominant["key"]] if dominant else "No time in the analysed window",
        "top_findings": [
            {"kind": f.kind, "title": f.title, "saving_us": f.est_saving_us,
             "saving_pct": f.est_saving_pct}
            for f in findings[:TOP_FINDINGS]
        ],
        "more_findings": max(0, len(findings) - TOP_FINDINGS),
        "projected_us": projected,
        "projected_step_us": None,
        "saving_pct": None,
        "speedup": None,
    }
    if projected is not None and total > 0:
        verdict["saving_pct"] = 100.0 * (total - projected) / total
        verdict["speedup"] = total / projected if projected > 0 else None
        if step_us:
            verdict["projected_step_us"] = step_us * projected / total
    return verdict


def projected_time(d: Diagnosis) -> float | None:
    """The window's time if every finding were fixed; ``None`` when there are no findings.

    ``extras["projected_us"]`` (computed by the findings work, which knows how findings overlap)
    wins when present. Otherwise: total minus the findings' savings, where each finding draws
    only on the slices of time it acts on (``FINDING_ACTS_ON``), largest saving first, so that
    three fusion findings cannot together save more memory-bound time than the step has.
    """
    if not d.findings:
        return None
    given = d.extras.get("projected_us")
    if isinstance(given, (int, float)) and not isinstance(given, bool) and math.isfinite(given):
        return float(given)
    total = _num(d.time.total_us)
    left = {key: _num(d.time.by_bound.get(key, 0.0)) for key in TIME_KEYS}
    saved = 0.0
    for f in sorted(d.findings, key=lambda f: -_num(f.est_saving_us)):
        want = max(0.0, _num(f.est_saving_us))
        slices = FINDING_ACTS_ON.get(f.kind)
        if slices is None:
            take = want
        else:
            take = 0.0
            for key in slices:
                part = min(want - take, left[key])
                left[key] -= part
                take += part
        saved += take
    return max(0.0, total - min(saved, total))


# ----------------------------------------------------------------------------------------- device


def _device(d: Diagnosis) -> dict:
    dev = d.device
    peaks = [{"dtype": k, "unit": "peak", "flops": v} for k, v in dev.peak_flops.items()]
    peaks += [{"dtype": k, "unit": "vector", "flops": v} for k, v in dev.vector_flops.items()]
    return {
        "name": dev.name,
        "matched_from": dev.matched_from,
        "kind": dev.kind,
        "spec_source": dev.spec_source,
        "spec_source_note": SPEC_SOURCE_NOTES.get(dev.spec_source, dev.spec_source),
        "assumed": dev.spec_source == SpecSource.ASSUMED.value,
        "peaks": peaks,
        "memory_bandwidth": dev.memory_bandwidth,
        "interconnect_bandwidth": dev.interconnect_bandwidth,
        "sources": list(dev.sources),
    }


# --------------------------------------------------------------------------------------- roofline


def roofs(d: Diagnosis) -> list[dict]:
    """Compute ceilings, one per distinct height: dtypes sharing a peak share a line.

    Each roof: ``label`` (e.g. ``"bf16, fp16"`` or ``"fp32 vector"``), ``flops`` (FLOP/s) and
    ``ridge`` (the intensity in FLOP/B where the memory slope meets it; ``None`` without a
    memory bandwidth). Highest first.
    """
    by_height: dict[float, list[str]] = {}
    for dtype, flops in d.device.peak_flops.items():
        if _positive(flops):
            by_height.setdefault(float(flops), []).append(dtype)
    for dtype, flops in d.device.vector_flops.items():
        if _positive(flops) and d.device.peak_flops.get(dtype) != flops:
            by_height.setdefault(float(flops), []).append(f"{dtype} vector")
    bw = d.device.memory_bandwidth if _positive(d.device.memory_bandwidth) else None
    return [
        {"label": ", ".join(labels), "flops": flops, "ridge": flops / bw if bw else None}
        for flops, labels in sorted(by_height.items(), reverse=True)
    ]


def plottable(k: KernelRow) -> bool:
    """A kernel group has a roofline point when it has a FLOP and a byte estimate."""
    return (
        _positive(k.flops) and _positive(k.bytes)
        and _positive(k.intensity) and _positive(k.achieved_flops_per_s)
    )


def _unplotted_reason(k: KernelRow) -> str:
    if _bound(k) == Bound.COMMUNICATION.value:
        return "communication (see Communication)"
    if k.flops is None and k.bytes is None:
        return "no FLOP or byte estimate"
    if _positive(k.bytes) and not _positive(k.flops):
        return "moves bytes only (no FLOPs)"
    if _positive(k.flops) and not _positive(k.bytes):
        return "no byte estimate"
    return "no usable estimate"


def _roofline(d: Diagnosis, kernels: list[KernelRow]) -> dict:
    roof_list = roofs(d)
    points, unplotted = [], []
    for i, k in enumerate(kernels):
        if plottable(k):
            points.append({"k": i, "x": k.intensity, "y": k.achieved_flops_per_s,
                           "t": k.total_us, "b": _bound(k)})
        else:
            unplotted.append({"k": i, "reason": _unplotted_reason(k)})
    bw = d.device.memory_bandwidth if _positive(d.device.memory_bandwidth) else None
    xs = [p["x"] for p in points] + [r["ridge"] for r in roof_list if r["ridge"]]
    ys = [p["y"] for p in points] + [r["flops"] for r in roof_list]
    extent = None
    if xs and ys:
        extent = {
            "xmin": 10.0 ** math.floor(math.log10(min(xs) / 2)),
            "xmax": 10.0 ** math.ceil(math.log10(max(xs) * 2)),
            "ymin": 10.0 ** math.floor(math.log10(min(ys) / 2)),
            "ymax": 10.0 ** math.ceil(math.log10(max(ys) * 1.5)),
        }
    return {
        "memory_bandwidth": bw,
        "roofs": roof_list,
        "points": points,
        "unplotted": unplotted,
        "unplotted_us": sum(_num(kernels[u["k"]].total_us) for u in unplotted),
        "extent": extent,
    }


# ---------------------------------------------------------------------------------------- kernels


#: Columns of ``ctx["kernels"]``; rows are lists in this order (names are not repeated per row,
#: which keeps pages of traces with thousands of kernel groups small).
KERNEL_COLUMNS = (
    "name", "rank", "category", "op", "module", "shapes", "dtype", "count", "total_us",
    "mean_us", "share_pct", "flops", "bytes", "intensity", "achieved_flops_per_s",
    "achieved_bytes_per_s", "attainable_flops_per_s", "bound", "ceiling", "pct_of_ceiling",
    "plotted",
)


def kernel_records(ctx: dict) -> list[dict]:
    """The kernel table of a context as one dict per group (what the page's JS rebuilds)."""
    columns = ctx["kernels"]["columns"]
    return [dict(zip(columns, row)) for row in ctx["kernels"]["rows"]]


def _columns(rows: list[dict]) -> dict:
    return {"columns": list(KERNEL_COLUMNS), "rows": [[r[c] for c in KERNEL_COLUMNS] for r in rows]}


def _kernel_rows(kernels: list[KernelRow]) -> list[dict]:
    total = sum(_num(k.total_us) for k in kernels)
    rows = []
    for k in kernels:
        mean = k.mean_us if k.mean_us else (_num(k.total_us) / k.count if k.count else None)
        rows.append({
            "name": k.name, "rank": k.rank, "category": k.category, "op": k.op,
            "module": k.module, "shapes": k.shapes, "dtype": k.dtype, "count": k.count,
            "total_us": k.total_us, "mean_us": mean,
            "share_pct": 100.0 * _num(k.total_us) / total if total > 0 else None,
            "flops": k.flops, "bytes": k.bytes, "intensity": k.intensity,
            "achieved_flops_per_s": k.achieved_flops_per_s,
            "achieved_bytes_per_s": k.achieved_bytes_per_s,
            "attainable_flops_per_s": k.attainable_flops_per_s,
            "bound": _bound(k), "ceiling": k.ceiling, "pct_of_ceiling": k.pct_of_ceiling,
            "plotted": plottable(k),
        })
    return rows


# --------------------------------------------------------------------------------------- findings


def _findings(d: Diagnosis, kernels: list[KernelRow]) -> list[dict]:
    first_index: dict[str, int] = {}
    for i, k in enumerate(kernels):
        first_index.setdefault(k.name, i)
        if k.module:
            first_index.setdefault(k.module, i)
        if k.op:
            first_index.setdefault(k.op, i)
    out = []
    for f in sorted(d.findings, key=lambda f: -_num(f.est_saving_us)):
        out.append({
            "kind": f.kind,
            "kind_label": humanize(f.kind),
            "title": f.title,
            "saving_us": f.est_saving_us,
            "saving_pct": f.est_saving_pct,
            "evidence": [{"text": e, "find": e if e in first_index else None} for e in f.evidence],
            "fix": f.fix,
        })
    return out


# ---------------------------------------------------------------------------------- communication


def _communication(d: Diagnosis) -> dict:
    rows = sorted(d.collectives, key=lambda c: (-_num(c.total_us), c.rank, c.name))
    return {
        "rows": [
            {"name": c.name, "rank": c.rank, "collective": c.collective, "count": c.count,
             "total_us": c.total_us, "exposed_us": c.exposed_us, "bytes": c.bytes,
             "algbw": c.algbw, "busbw": c.busbw, "pct_of_link": c.pct_of_link,
             "group_size": c.group_size, "dtype": c.dtype}
            for c in rows
        ],
        "total_us": sum(_num(c.total_us) for c in rows),
        "exposed_us": d.time.exposed_communication_us,
        "overlap_pct": d.time.communication_overlap_pct,
        "link_bandwidth": d.device.interconnect_bandwidth,
    }


def _ranks(d: Diagnosis) -> list[dict]:
    if len(d.ranks) < 2:
        return []
    longest = max(_num(r.total_us) for r in d.ranks) or 1.0
    shortest = min(_num(r.total_us) for r in d.ranks)
    most_idle = max(d.ranks, key=lambda r: _num(r.idle_us)).rank
    out = []
    for r in sorted(d.ranks, key=lambda r: r.rank):
        total = _num(r.total_us)
        overlapped = max(0.0, _num(r.communication_us) - _num(r.exposed_communication_us))
        other_busy = max(0.0, _num(r.busy_us) - _num(r.exposed_communication_us))
        out.append({
            "rank": r.rank, "total_us": r.total_us, "busy_us": r.busy_us,
            "compute_us": r.compute_us, "communication_us": r.communication_us,
            "exposed_communication_us": r.exposed_communication_us, "idle_us": r.idle_us,
            "kernels": r.kernels,
            "idle_pct": 100.0 * _num(r.idle_us) / total if total > 0 else None,
            "overlapped_us": overlapped,
            # Widths (% of the longest rank) of the stacked bar: busy, exposed comm, idle.
            "bar": {
                "busy": 100.0 * other_busy / longest,
                "communication": 100.0 * _num(r.exposed_communication_us) / longest,
                "idle": 100.0 * _num(r.idle_us) / longest,
            },
            "most_idle": r.rank == most_idle and _num(r.idle_us) > 0,
            "longest": total == longest and longest > shortest,
        })
    return out


def _idle(d: Diagnosis) -> dict | None:
    value = d.extras.get("idle_breakdown")
    if value is None:
        return None
    return display_tree("idle_breakdown", value)


# ---------------------------------------------------------------------------------------- helpers


def _bound(k: KernelRow) -> str:
    b = k.bound
    return b.value if isinstance(b, Bound) else str(b)


def _num(value: Any) -> float:
    """A finite float, 0.0 for unknown: only for sums and sorting, never for display."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 0.0


def _positive(value: Any) -> bool:
    return _num(value) > 0


def _clean(value: Any) -> Any:
    """JSON-safe all the way down: enums to values, tuples/sets to lists, NaN/inf to None,
    numpy-style scalars to Python numbers, anything else unknown to its ``str``."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, Enum):
        return _clean(value.value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_clean(v) for v in value]
    return str(value)
