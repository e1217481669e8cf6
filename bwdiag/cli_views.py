"""Text for the ``devices``, ``roofline`` and ``calibrate`` commands (kept out of cli.py).

A CLI module: it sits above diagnose, whose roofline placement ``bwdiag roofline`` shows.
"""

from __future__ import annotations

import json

from bwdiag.diagnose.roofline import place
from bwdiag.errors import BwdiagError
from bwdiag.hardware.calibrate import cache_path, calibrate, device_identity
from bwdiag.hardware.match import find_device
from bwdiag.hardware.spec import DeviceSpec, Dtype, list_devices
from bwdiag.hardware.units import duration, parse_duration, parse_quantity, si

_TABLE_DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8")


def devices_table(specs: list[DeviceSpec] | None = None) -> str:
    """One line per device: memory bandwidth, dense peaks (best of tensor/vector) and link."""
    specs = list_devices() if specs is None else specs
    header = ["device", "mem BW", *(f"{d} peak" for d in _TABLE_DTYPES), "link (1 dir)", "memory"]
    rows = []
    for spec in specs:
        peaks = spec.best_peak_flops()
        rows.append([
            spec.name,
            si(spec.memory_bandwidth, "B/s"),
            *(si(peaks.get(d), "FLOP/s") for d in _TABLE_DTYPES),
            si(spec.interconnect_bandwidth, "B/s"),
            f"{spec.memory_bytes / 2**30:.0f} GiB" if spec.memory_bytes else "-",
        ])
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("Dense peaks (datasheet sparse figures halved); '-' = no figure for that dtype. "
                 "`bwdiag devices --json` lists tensor and vector peaks separately, with sources.")
    return "\n".join(lines)


def devices_json() -> str:
    """The table as a JSON list, one object per device."""
    return json.dumps([spec.to_dict() for spec in list_devices()], indent=2)


def resolve_named(device: str) -> DeviceSpec:
    """A table device by name; ``BwdiagError`` naming the choices when there is none."""
    spec = find_device(device)
    if spec is None:
        choices = ", ".join(s.name for s in list_devices())
        raise BwdiagError(f"unknown device {device!r}; choose one of: {choices}")
    return spec


def roofline_report(flops: str, bytes_: str, time_: str | None, device: str, dtype: str,
                    *, tensor: bool) -> str:
    """The ``bwdiag roofline`` text."""
    try:
        work = parse_quantity(flops)
        moved = parse_quantity(bytes_)
        seconds = parse_duration(time_) if time_ is not None else None
    except ValueError as err:
        raise BwdiagError(str(err)) from err
    if Dtype.parse(dtype) is None:
        raise BwdiagError(f"unknown dtype {dtype!r}; choose one of: {', '.join(d.value for d in Dtype)}")
    spec = resolve_named(device)
    p = place(work, moved, seconds, spec, dtype, tensor=tensor)
    lines = [
        f"device        {spec.name} ({spec.spec_source.value})",
        f"work          {si(work, 'FLOP')}, {si(moved, 'B')}",
        f"intensity     {p.intensity:.4g} FLOP/B" if p.intensity is not None else "intensity     -",
        f"roofs         {p.compute_ceiling}: {si(p.peak_flops_per_s, 'FLOP/s')}; "
        f"memory: {si(spec.memory_bandwidth, 'B/s')}; ridge point "
        + (f"{p.ridge_point:.4g} FLOP/B" if p.ridge_point else "-"),
        f"ceiling       {p.ceiling} (attainable {si(p.attainable_flops_per_s, 'FLOP/s')})",
        f"bound         {p.bound.value}",
        f"best time     {duration(p.best_time_s)}",
    ]
    if seconds is not None:
        lines += [
            f"measured      {duration(seconds)}: {si(p.achieved_flops_per_s, 'FLOP/s')}, "
            f"{si(p.achieved_bytes_per_s, 'B/s')}",
            "of ceiling    " + (f"{p.pct_of_ceiling:.1f}%" if p.pct_of_ceiling is not None else "-"),
        ]
    return "\n".join(lines)


def calibrate_report(device: str, *, quick: bool) -> str:
    """Run a calibration and describe what was measured and where it was cached."""
    spec = calibrate(device, quick=quick)
    path = cache_path(device_identity(device))
    lines = [f"calibrated    {spec.name}", f"memory BW     {si(spec.memory_bandwidth, 'B/s')}"]
    for dtype, value in spec.vector_flops.items():
        lines.append(f"{dtype + ' vector':<14}{si(value, 'FLOP/s')}")
    for dtype, value in spec.tensor_flops.items():
        lines.append(f"{dtype + ' tensor':<14}{si(value, 'FLOP/s')}")
    lines += [f"note          {n}" for n in spec.notes]
    lines.append(f"cached in     {path}")
    return "\n".join(lines)
