"""Device ceilings: the datasheet table, name matching, calibration and user overrides.

Public API::

    from bwdiag.hardware import resolve_device, list_devices, DeviceSpec, Dtype
    spec, warnings = resolve_device(trace_device_properties[0])
    spec.peak_flops("bf16", tensor=True), spec.memory_bandwidth

``calibrate`` / ``load_calibration`` live in :mod:`bwdiag.hardware.calibrate` (they import torch).
"""

from bwdiag.hardware.match import find_device, resolve_device
from bwdiag.hardware.spec import DeviceSpec, Dtype, SpecSource, fallback_spec, list_devices

__all__ = [
    "DeviceSpec", "Dtype", "SpecSource", "fallback_spec", "find_device", "list_devices", "resolve_device",
]
