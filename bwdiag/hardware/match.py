"""Find the ceilings for a trace's device: the table (:mod:`bwdiag.hardware.lookup`), this machine's
or the trace's calibration for a CPU trace, and ``--device-spec`` overrides on top.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from bwdiag.hardware import calibrate
from bwdiag.hardware.host import HostFacts, host_mismatch, this_host, trace_host
from bwdiag.hardware.lookup import NameParts, find_device, gpu_spec, parse_name
from bwdiag.hardware.override import apply_override
from bwdiag.hardware.spec import DeviceSpec, fallback_spec
from bwdiag.hardware.threads import at_threads, trace_threads


def resolve_device(
    props: dict[str, Any] | None,
    *,
    override: Path | None = None,
    trace_kind: str = "gpu",
    trace_metadata: Sequence[Mapping[str, Any]] | None = None,
    accelerator: str | None = None,
) -> tuple[DeviceSpec, list[str]]:
    """The ceilings for one trace device, and warnings about how they were found.

    ``props`` is one entry of the trace's ``deviceProperties`` (or ``None`` when the trace has
    none). ``trace_kind="cpu"`` places a CPU trace: against this machine's calibration only when
    the trace's host facts match the calibration's host (``trace_metadata``: the top-level
    metadata of each rank file; see :mod:`bwdiag.hardware.host`), else against the calibration a
    bwdiag capture embedded in the trace, else an assumed CPU. ``trace_metadata=None`` (a caller
    with no trace) means "recorded on this machine". The calibration file is read once here; the
    returned spec carries that snapshot (``spec.calibration``).
    ``accelerator`` names a non-CUDA/HIP device kind the trace ran on ("mtia", "xpu"): the device
    table has none of those, and the warning says so.
    ``override`` is a ``--device-spec`` JSON file applied on top (spec_source "user"); a bad file
    raises ``DeviceSpecError``.
    """
    warnings: list[str] = []
    if trace_kind == "cpu":
        spec = _cpu_spec(warnings, trace_metadata)
    else:
        spec = gpu_spec(props or {}, warnings, accelerator)
    if override is not None:
        spec = apply_override(spec, Path(override))
    return spec, warnings


# -- CPU -------------------------------------------------------------------------------------


def _cpu_spec(warnings: list[str], metadata: Sequence[Mapping[str, Any]] | None) -> DeviceSpec:
    """The calibrated (or assumed) ceilings, at the torch threads the capture recorded
    (:func:`~bwdiag.hardware.threads.at_threads`)."""
    spec = _calibrated_cpu_spec(warnings, metadata)
    if spec.calibration is not None:
        spec = at_threads(spec, spec.calibration.entry, trace_threads(metadata))
    return spec


def _calibrated_cpu_spec(warnings: list[str], metadata: Sequence[Mapping[str, Any]] | None) -> DeviceSpec:
    if metadata is None:
        hosts = [this_host()]
        embedded = None
    else:
        hosts = [trace_host(m) for m in metadata] or [HostFacts()]
        embedded = next((e for e in (calibrate.embedded_calibration(m.get("bwdiag") or {}) for m in metadata
                                     if isinstance(m.get("bwdiag"), dict)) if e is not None), None)
    local = calibrate.run_calibration("cpu")  # the one read of this run: the result depends on this snapshot
    why_not = None
    if local is not None:
        why_not = next((w for w in (host_mismatch(h, local.host) for h in hosts) if w), None)
        if why_not is None:
            if embedded is not None and not embedded.same_measurement(local):
                warnings.append(
                    f"device ceilings: {local.path} (measured {local.measured_at}) is not the "
                    f"calibration the capture recorded ({embedded.measured_at}): it was rewritten "
                    "since the trace was captured; using the file's current ceilings (pass "
                    "--device-spec to choose others)"
                )
            spec = local.device_spec()
            return replace(spec, notes=spec.notes + (
                f"CPU ceilings measured by `bwdiag calibrate` on {local.host.describe()}, the host "
                f"the trace names ({hosts[0].describe()}, from {hosts[0].source}).",
            ))
    if embedded is not None:
        spec = embedded.device_spec()
        if why_not is not None:
            warnings.append(
                f"device ceilings: this machine's calibration ({local.path}) does not apply: "
                f"{why_not}; using the calibration the capture recorded on that host "
                f"(measured {embedded.measured_at})"
            )
        return replace(spec, notes=spec.notes + (
            f"CPU ceilings measured by `bwdiag calibrate` on the recording host "
            f"({embedded.host.describe() if embedded.host.known else hosts[0].describe()}), "
            "embedded in the trace by the bwdiag capture.",
        ))
    spec = fallback_spec("cpu")
    override = ("pass --device-spec FILE with that host's ceilings (JSON, e.g. "
                "{\"memory_bandwidth\": 2.0e11, \"vector_flops\": {\"fp32\": 3.0e12}}; "
                "`bwdiag calibrate --device cpu` run on that host measures them)")
    if local is not None:
        warnings.append(
            f"device ceilings: CPU trace, and this machine's calibration ({local.path}, "
            f"{local.host.describe()}) is not used: {why_not}. Using {spec.name} (spec_source "
            f"'assumed'); {override}."
        )
        return spec
    trace = hosts[0]
    if metadata is not None and host_mismatch(trace, this_host()) is not None:
        warnings.append(
            f"device ceilings: CPU trace recorded on another or unknown host "
            f"({host_mismatch(trace, this_host())}) and no calibration of it is known; using "
            f"{spec.name} (spec_source 'assumed'); {override}."
        )
        return spec
    warnings.append(
        "device ceilings: CPU trace and no calibration of this host is cached; using "
        f"{spec.name} (spec_source 'assumed'). Run `bwdiag calibrate --device cpu` to measure "
        "this machine's memory bandwidth and GEMM FLOP/s."
    )
    return spec


__all__ = ["NameParts", "find_device", "parse_name", "resolve_device"]
