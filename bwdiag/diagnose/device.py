"""The ``device`` block of a diagnosis, from the ceilings ``bwdiag.hardware`` resolved."""

from __future__ import annotations

from bwdiag.diagnose.model import DeviceInfo
from bwdiag.hardware.spec import DeviceSpec


def device_info(spec: DeviceSpec) -> DeviceInfo:
    """``spec`` as ``diagnosis.json`` shows it: per dtype the better of tensor and vector peak."""
    return DeviceInfo(
        name=spec.name,
        kind=spec.kind,
        spec_source=spec.spec_source.value,
        peak_flops=spec.best_peak_flops(),
        memory_bandwidth=float(spec.memory_bandwidth),
        interconnect_bandwidth=float(spec.interconnect_bandwidth) if spec.interconnect_bandwidth else None,
        matched_from=spec.matched_from,
        vector_flops=spec.ordered_vector_flops(),
        sources=tuple(spec.sources),
        calibration=spec.calibration.to_record() if spec.calibration is not None else None,
    )
