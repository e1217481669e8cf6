"""The roofline chart's data: ceilings (roofs and ridge points), one point per kernel group with
a FLOP and a byte estimate, the bandwidth strip beside it (groups that move bytes but do no FLOPs:
copies, casts, fills, placed by achieved B/s against the memory roof), the groups that cannot be
placed at all (and why), and the axes' extent."""

from __future__ import annotations

import math

from bwdiag.diagnose.model import Bound, Diagnosis, KernelRow
from bwdiag.report.values import bound_of, num, positive

#: A group above this % of its ceiling is flagged as implausible (timing noise allows a little).
ABOVE_ROOF_PCT = 110.0


def roofs(d: Diagnosis) -> list[dict]:
    """Compute ceilings, one per distinct height: dtypes sharing a peak share a line.

    Each roof: ``label`` (e.g. ``"bf16, fp16"`` or ``"fp32 vector"``), ``flops`` (FLOP/s),
    ``ridge`` (the intensity in FLOP/B where the memory slope meets it; ``None`` without a
    memory bandwidth) and ``vector`` (only non-tensor-core units at this height). Highest first.
    """
    by_height: dict[float, list[tuple[str, bool]]] = {}
    for dtype, flops in d.device.peak_flops.items():
        if positive(flops):
            by_height.setdefault(float(flops), []).append((dtype, False))
    for dtype, flops in d.device.vector_flops.items():
        if positive(flops) and d.device.peak_flops.get(dtype) != flops:
            by_height.setdefault(float(flops), []).append((f"{dtype} vector", True))
    bw = d.device.memory_bandwidth if positive(d.device.memory_bandwidth) else None
    return [
        {"label": _roof_label(labels), "flops": flops,
         "ridge": flops / bw if bw else None, "vector": all(v for _, v in labels)}
        for flops, labels in sorted(by_height.items(), reverse=True)
    ]


def _roof_label(labels: list[tuple[str, bool]]) -> str:
    """``"bf16, fp16"``, ``"bf16, fp16 vector"`` or ``"fp64 · fp32 vector"`` for a shared height."""
    peak = [name for name, vector in labels if not vector]
    vec = [name.removesuffix(" vector") for name, vector in labels if vector]
    parts = ([", ".join(peak)] if peak else []) + ([", ".join(vec) + " vector"] if vec else [])
    return " · ".join(parts)


def plottable(k: KernelRow) -> bool:
    """A kernel group has a roofline point when it has a FLOP and a byte estimate."""
    return (
        positive(k.flops) and positive(k.bytes)
        and positive(k.intensity) and positive(k.achieved_flops_per_s)
    )


def byte_only(k: KernelRow) -> bool:
    """A group for the bandwidth strip: bytes and an achieved B/s known, no FLOPs (None or 0), and
    not a collective (those are measured against the link, in the Communication section)."""
    return (
        positive(k.bytes) and not positive(k.flops) and positive(k.achieved_bytes_per_s)
        and bound_of(k) != Bound.COMMUNICATION.value
    )


def _unplotted_reason(k: KernelRow) -> str:
    if bound_of(k) == Bound.COMMUNICATION.value:
        return "communication (see Communication)"
    if k.flops is None and k.bytes is None:
        return "no FLOP or byte estimate"
    if positive(k.bytes) and not positive(k.flops):
        return "moves bytes only (no FLOPs)"
    if positive(k.flops) and not positive(k.bytes):
        return "no byte estimate"
    return "no usable estimate"


def build_roofline(d: Diagnosis, kernels: list[KernelRow]) -> dict:
    roof_list = roofs(d)
    bw = d.device.memory_bandwidth if positive(d.device.memory_bandwidth) else None
    points, strip, unplotted = [], [], []
    for i, k in enumerate(kernels):
        if plottable(k):
            points.append({"k": i, "x": k.intensity, "y": k.achieved_flops_per_s,
                           "t": k.total_us, "b": bound_of(k)})
        elif byte_only(k):
            strip.append({"k": i, "x": k.achieved_bytes_per_s, "t": k.total_us, "b": bound_of(k),
                          "pct": 100.0 * k.achieved_bytes_per_s / bw if bw else None})
        else:
            unplotted.append({"k": i, "reason": _unplotted_reason(k)})
    ridges = [r["ridge"] for r in roof_list if r["ridge"]]
    xs = [p["x"] for p in points] + ridges
    ys = [p["y"] for p in points] + [r["flops"] for r in roof_list]
    extent = None
    if xs and ys:
        # Roofs run on to the right of their ridge far enough to carry their labels.
        right = max([p["x"] * 2 for p in points] + [r * 8 for r in ridges])
        extent = {
            "xmin": 10.0 ** math.floor(math.log10(min(xs) / 2)),
            "xmax": 10.0 ** math.ceil(math.log10(right)),
            "ymin": 10.0 ** math.floor(math.log10(min(ys) / 2)),
            "ymax": 10.0 ** math.ceil(math.log10(max(ys) * 1.5)),
        }
    above = [k.pct_of_ceiling for k in kernels if num(k.pct_of_ceiling) > ABOVE_ROOF_PCT]
    return {
        "memory_bandwidth": bw,
        # Groups reported faster than their ceiling allows: a sign of wrong ceilings or of ops
        # whose duration is not their cost (asynchronous launches); the page says so.
        "above_roof": {"count": len(above), "max_pct": max(above, default=None)},
        "roofs": roof_list,
        "points": points,
        "unplotted": unplotted,
        "unplotted_us": sum(num(kernels[u["k"]].total_us) for u in unplotted),
        "extent": extent,
        "bandwidth": _bandwidth_strip(strip, bw, sum(num(k.total_us) for k in kernels)),
    }


def _bandwidth_strip(marks: list[dict], bw: float | None, kernel_us: float) -> dict:
    """The strip of byte-only groups: one mark per group at its achieved B/s, the memory roof as
    the line they are measured against, and the axis extent (decades around both)."""
    us = sum(num(m["t"]) for m in marks)
    xs = [m["x"] for m in marks] + ([bw] if bw else [])
    extent = None
    if marks:
        extent = {"xmin": 10.0 ** math.floor(math.log10(min(xs) / 1.5)),
                  "xmax": 10.0 ** math.ceil(math.log10(max(xs) * 1.5))}
    return {
        "marks": marks,
        "us": us,
        "pct_of_kernel_time": 100.0 * us / kernel_us if kernel_us > 0 else None,
        "memory_bandwidth": bw,
        "extent": extent,
    }
