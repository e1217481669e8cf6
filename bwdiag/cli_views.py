"""Text for the ``devices``, ``roofline`` and ``calibrate`` commands (kept out of cli.py).

A CLI module: it sits above diagnose, whose roofline placement ``bwdiag roofline`` shows.
"""

from __future__ import annotations

import json

from bwdiag.diagnose.roofline import place
from bwdiag.errors import BwdiagError
from bwdiag.hardware.calibrate import cache_path, calibrate, device_identity, read_calibration
from bwdiag.hardware.lookup import name_variants
from bwdiag.hardware.match import find_device
from bwdiag.hardware.spec import DeviceSpec, Dtype, SpecSource, list_devices
from bwdiag.units import fmt_seconds as duration
from bwdiag.units import fmt_si as si
from bwdiag.units import parse_duration, parse_quantity

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


#: ``bwdiag roofline --time``: achieved work above the roof by more than this factor is refused as
#: impossible (a unit slip: 3.1ns for 3.1ms). The margin allows for boost clocks above the clock
#: datasheet peaks are specified at, and for rounded datasheet figures.
IMPOSSIBLE_ABOVE_ROOF = 1.05
#: ...and above measured (calibrated) ceilings: a calibration taken on a busy machine, or by a GEMM
#: slower than the user's code, can sit well under what the machine does, so only a factor that is
#: a unit slip is refused there; anything above 100% gets a note.
IMPOSSIBLE_ABOVE_MEASURED_ROOF = 10.0


def resolve_named(device: str) -> tuple[DeviceSpec, list[str]]:
    """The device ``bwdiag roofline --device`` names, and notes on how it was chosen.

    A table name or driver-style name (``H100``, ``A100-SXM4-40GB``): a name that fits several
    table devices gets the default one and a note naming the others. ``cpu``: this machine's
    cached ``bwdiag calibrate`` measurement. ``BwdiagError`` naming the choices when nothing fits.
    """
    if device.strip().lower() == "cpu":
        return _calibrated_cpu()
    spec = find_device(device)
    if spec is None:
        choices = ", ".join(s.name for s in list_devices())
        raise BwdiagError(f"unknown device {device!r}; choose one of: {choices} (or cpu: this machine, "
                          "once `bwdiag calibrate --device cpu` has measured it)")
    variants = [v.name for v in name_variants(device)]
    notes = []
    if len(variants) > 1:
        others = [v for v in variants if v != spec.name]
        notes.append(
            f"--device {device!r} fits {len(variants)} devices of the table ({', '.join(variants)}); "
            f"using {spec.name}. For another, name it: --device {others[0]!r}"
        )
    return spec, notes


def _calibrated_cpu() -> tuple[DeviceSpec, list[str]]:
    snapshot = read_calibration("cpu")
    if snapshot is None:
        raise BwdiagError(
            f"--device cpu: this machine's CPU is not calibrated (no {cache_path(device_identity('cpu'))}); "
            "run `bwdiag calibrate --device cpu` (add --quick for a ~2 s measurement) first"
        )
    return snapshot.device_spec(), [
        f"CPU ceilings measured by `bwdiag calibrate` on {snapshot.measured_at or 'an unknown date'} "
        f"({snapshot.path})"
    ]


def _roof_notes(spec: DeviceSpec, dtype: str, tensor: bool, label: str | None) -> list[str]:
    """What the compute roof is when it is not the one asked for (``label`` from ``place``)."""
    wanted = Dtype.parse(dtype)
    unit = "tensor" if tensor else "vector"
    asked = f"{wanted.value} {unit}"
    if label == asked:
        return []
    if label is None:
        return [f"{spec.name} has no {wanted.value} compute roof; the work is placed on memory "
                "bandwidth alone"]
    matrix = "tensor-core" if spec.kind == "gpu" else "matrix-unit"
    lacks = f"{spec.name} has no {wanted.value} {matrix if tensor else 'vector'} rate"
    if wanted is Dtype.TF32 and not tensor:
        lacks = "tf32 is a tensor-core format (on vector units it is fp32)"
    note = f"{lacks}; using its {label} roof ({si(spec.peak_flops(dtype, tensor), 'FLOP/s')}), as `bwdiag analyze` does"
    rates = [d for d in spec.tensor_flops if d != wanted.value]
    if tensor and rates:
        note += f". Its tensor-core rates: {', '.join(rates)} (--dtype)"
    return [note]


def roofline_report(flops: str, bytes_: str, time_: str | None, device: str, dtype: str,
                    *, tensor: bool) -> str:
    """The ``bwdiag roofline`` text. Impossible input (a unit of the wrong kind, a zero time, a
    time faster than the roof allows) raises ``BwdiagError``."""
    work = _parsed("--flops", lambda: parse_quantity(flops, "FLOP"))
    moved = _parsed("--bytes", lambda: parse_quantity(bytes_, "B"))
    seconds = _parsed("--time", lambda: parse_duration(time_)) if time_ is not None else None
    if work == 0 and moved == 0:
        raise BwdiagError("--flops and --bytes are both 0: there is no work to place")
    if seconds is not None and seconds <= 0:
        raise BwdiagError(f"--time {time_}: the measured time must be more than 0")
    if Dtype.parse(dtype) is None:
        raise BwdiagError(f"unknown dtype {dtype!r}; choose one of: {', '.join(d.value for d in Dtype)}")
    spec, notes = resolve_named(device)
    p = place(work, moved, seconds, spec, dtype, tensor=tensor)
    notes += _roof_notes(spec, dtype, tensor, p.compute_ceiling)
    roofs = (f"{p.compute_ceiling}: {si(p.peak_flops_per_s, 'FLOP/s')}; " if p.compute_ceiling else "")
    measured = spec.spec_source is SpecSource.CALIBRATED
    limit = IMPOSSIBLE_ABOVE_MEASURED_ROOF if measured else IMPOSSIBLE_ABOVE_ROOF
    if seconds is not None and p.best_time_s and p.best_time_s > limit * seconds:
        roof = (si(p.peak_flops_per_s, "FLOP/s") if p.ceiling == p.compute_ceiling
                else si(spec.memory_bandwidth, "B/s"))
        raise BwdiagError(
            f"--time {time_} is impossible on {spec.name}: {si(work, 'FLOP')} and {si(moved, 'B')} take at "
            f"least {duration(p.best_time_s)} under its {p.ceiling} roof ({roof}), so {duration(seconds)} "
            f"would be {p.pct_of_ceiling:,.0f}% of it (over {limit:.0%} is refused); "
            "check the units"
        )
    source = "" if spec.spec_source.value in spec.name else f" ({spec.spec_source.value})"
    lines = [
        f"device        {spec.name}{source}",
        f"work          {si(work, 'FLOP')}, {si(moved, 'B')}",
        f"intensity     {p.intensity:.4g} FLOP/B" if p.intensity is not None else "intensity     -",
        f"roofs         {roofs}memory: {si(spec.memory_bandwidth, 'B/s')}; ridge point "
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
    if measured and p.pct_of_ceiling is not None and p.pct_of_ceiling > 100:
        notes.append(f"above the measured {p.ceiling} roof: the calibration may be low (taken on a busy "
                     "machine?); `bwdiag calibrate --device cpu` measures it again")
    lines += [f"note          {n}" for n in notes]
    return "\n".join(lines)


def _parsed(option: str, parse):
    try:
        return parse()
    except ValueError as err:
        raise BwdiagError(f"{option}: {err}") from err


def calibrate_report(device: str, *, quick: bool) -> str:
    """Run a calibration and describe what was measured and where it was cached."""
    from bwdiag.capture.quiet import profiler_output_filtered

    spec = calibrate(device, quick=quick, quiet=profiler_output_filtered)  # Kineto's own lines off stderr
    path = cache_path(device_identity(device))
    lines = [f"calibrated    {spec.name}", f"memory BW     {si(spec.memory_bandwidth, 'B/s')}"]
    for dtype, value in spec.vector_flops.items():
        lines.append(f"{dtype + ' vector':<14}{si(value, 'FLOP/s')}")
    for dtype, value in spec.tensor_flops.items():
        lines.append(f"{dtype + ' tensor':<14}{si(value, 'FLOP/s')}")
    lines += _host_costs(path)
    lines += [f"note          {n}" for n in spec.notes]
    lines.append(f"cached in     {path}")
    return "\n".join(lines)


def _host_costs(path) -> list[str]:
    """The calibration's host-side measurements (CPU): the profiler's cost per recorded op and what a
    compiled call keeps — the figures the host-overhead finding works with — and what a transcendental
    op costs in a compiled loop (the CPU fusion finding's)."""
    try:
        measured = json.loads(path.read_text()).get("measurements") or {}
    except (OSError, ValueError):
        return []
    lines = []
    if isinstance(one := measured.get("one_thread"), dict):  # the ceilings above are at the default threads
        lines.append(f"one thread    memory BW {si(max(one['copy_bytes_per_s'], one['triad_bytes_per_s']), 'B/s')}, "
                     + ", ".join(f"{dtype} {si(v, 'FLOP/s')}" for dtype, v in one["gemm_flops_per_s"].items())
                     + f" (the default: {measured.get('threads')} threads)")
    if isinstance(op_us := measured.get("profiler_op_us"), (int, float)):
        lines.append(f"profiler      {op_us:.2f} µs per recorded op")
    if compiled := measured.get("compiled_call"):
        lines.append("compiled call " + "; ".join(
            f"{mode} {c['call_us']:.1f} µs + {c['extern_us']:.2f} µs per extern call (GEMM, attention)" for mode, c in compiled.items()))
    if isinstance(pointwise := measured.get("compiled_pointwise"), dict):
        for key, how in (("ns_per_element", ""), ("chained_ns_per_element", ", each op feeding the next")):
            for threads, per_op in (pointwise.get(key) or {}).items():
                lines.append(f"compiled loop {', '.join(f'{op} {ns:.2f}' for op, ns in per_op.items())} ns per "
                             f"element (Inductor, {threads} thread{'s' * (threads != '1')}{how})")
    return lines
