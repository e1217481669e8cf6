"""Roofline placement: which ceiling limits a kernel, and how close it gets.

Pure math over a ``DeviceSpec``, shared by the trace analysis and ``bwdiag roofline``.

* The compute roof is the device's dense peak for the kernel's dtype on tensor cores (``tensor``)
  or vector units (:meth:`DeviceSpec.ceiling` picks it, with fallbacks). The memory roof is the
  memory bandwidth. Arithmetic intensity I = FLOP / byte; the ridge point is peak / bandwidth.
* I >= ridge: COMPUTE bound; I < ridge: MEMORY bound. Best possible time is
  ``max(flops / peak, bytes / bandwidth)``.
* LATENCY: the kernel is too short or too small to reach either roof (see the thresholds below).
* UNKNOWN: neither FLOPs nor bytes are known.
"""

from __future__ import annotations

from dataclasses import dataclass

from bwdiag.diagnose.model import Bound
from bwdiag.hardware.spec import DeviceSpec

#: GPU kernels whose mean duration is under this are dominated by fixed costs: launch, the ramp
#: of the first wave of blocks and the tail of the last one each take ~1-3 µs on current GPUs, so
#: a 5 µs kernel spends a large share of its time not running at full occupancy.
GPU_LATENCY_MAX_MEAN_S = 5e-6

#: ...and it is LATENCY only if it also reaches less than this share of its roof: a short kernel
#: that still reaches a quarter of peak is doing real work and is better placed on its roof.
LATENCY_MAX_PCT = 25.0

#: A grid with fewer blocks than SMs leaves SMs idle; if such a kernel is also short (under this
#: mean duration) it cannot fill the machine however fast each block runs: latency-bound.
GPU_SMALL_GRID_MAX_MEAN_S = 20e-6

#: CPU ops under this mean duration are dominated by framework dispatch (~5-20 µs per aten op
#: through the Python/C++ dispatcher), and are LATENCY when also far below their roof.
CPU_DISPATCH_MAX_MEAN_S = 20e-6

MEMORY_CEILING = "memory"
GPU_LATENCY_CEILING = "launch latency"
CPU_LATENCY_CEILING = "dispatch overhead"
UNKNOWN_CEILING = "unknown"


@dataclass(frozen=True)
class Placement:
    """Where one kernel (or kernel group) sits on the device's roofline."""

    intensity: float | None  # FLOP/byte; None unless both FLOPs and bytes are known
    ceiling: str  # the roof that applies: "bf16 tensor", "fp32 vector", "memory", "launch latency"
    attainable_flops_per_s: float | None  # the roof's height at this intensity
    best_time_s: float | None  # max(flops/peak, bytes/bandwidth) for the given work
    bound: Bound
    achieved_flops_per_s: float | None
    achieved_bytes_per_s: float | None
    pct_of_ceiling: float | None  # 0-100: achieved vs what the applicable roof allows here
    ridge_point: float | None  # FLOP/byte where the compute roof meets the memory roof
    compute_ceiling: str | None = None  # the compute roof's label, whichever bound applies
    peak_flops_per_s: float | None = None
    memory_bandwidth: float | None = None


def place(
    flops: float | None,
    bytes_: float | None,
    time_s: float | None,
    spec: DeviceSpec,
    dtype: str | None,
    *,
    tensor: bool,
    mean_duration_s: float | None = None,
    grid_blocks: int | None = None,
) -> Placement:
    """Place work of ``flops`` FLOPs moving ``bytes_`` bytes in ``time_s`` seconds on ``spec``.

    ``time_s`` is the total time of the work (None: no achieved figures); ``mean_duration_s`` the
    mean per launch and ``grid_blocks`` the launch's block count, both used for LATENCY.
    ``dtype`` picks the compute roof (None: fp32); ``tensor`` whether tensor cores apply.
    """
    flops = _known(flops)
    bytes_ = _known(bytes_)
    bandwidth = spec.memory_bandwidth
    roof = spec.ceiling(dtype, tensor)
    label, peak = roof if roof else (None, None)
    if flops is None and bytes_ is None:
        return Placement(None, UNKNOWN_CEILING, None, None, Bound.UNKNOWN, None, None, None,
                         peak / bandwidth if peak else None, label, peak, bandwidth)
    if flops == 0 and bytes_ == 0:  # known to do no work (a view): all its time is overhead
        return Placement(None, CPU_LATENCY_CEILING if spec.kind == "cpu" else GPU_LATENCY_CEILING, None, None,
                         Bound.LATENCY, 0.0, 0.0, None, peak / bandwidth if peak else None, label, peak, bandwidth)
    if flops is not None and peak is None:
        flops_for_roof = None  # no compute roof for this dtype: place on memory alone
        if not bytes_:
            return Placement(None, UNKNOWN_CEILING, None, None, Bound.UNKNOWN, None, None, None,
                             None, None, None, bandwidth)
    else:
        flops_for_roof = flops
    ridge = peak / bandwidth if peak else None
    intensity = flops / bytes_ if flops is not None and bytes_ else None

    if flops_for_roof is not None and ridge is not None and intensity is not None:
        bound = Bound.COMPUTE if intensity >= ridge else Bound.MEMORY
        attainable = min(peak, intensity * bandwidth)
    elif flops_for_roof and not bytes_:  # FLOPs but no (or zero) bytes: only the compute roof
        bound, attainable = Bound.COMPUTE, peak
    else:  # bytes only (or a dtype without a compute roof)
        bound, attainable = Bound.MEMORY, (intensity * bandwidth if intensity is not None else None)

    compute_time = flops_for_roof / peak if flops_for_roof is not None and peak else 0.0
    memory_time = bytes_ / bandwidth if bytes_ is not None else 0.0
    best_time = max(compute_time, memory_time)

    achieved_flops = achieved_bytes = pct = None
    if time_s is not None and time_s > 0:
        achieved_flops = flops / time_s if flops is not None else None
        achieved_bytes = bytes_ / time_s if bytes_ is not None else None
        # Share of the roof at this intensity = best possible time / actual time.
        pct = 100.0 * best_time / time_s if best_time > 0 else None

    ceiling = label if bound is Bound.COMPUTE else MEMORY_CEILING
    if _latency_bound(spec, pct, mean_duration_s, grid_blocks):
        bound = Bound.LATENCY
        ceiling = CPU_LATENCY_CEILING if spec.kind == "cpu" else GPU_LATENCY_CEILING
    return Placement(
        intensity=intensity,
        ceiling=ceiling or MEMORY_CEILING,
        attainable_flops_per_s=attainable,
        best_time_s=best_time if best_time > 0 else None,
        bound=bound,
        achieved_flops_per_s=achieved_flops,
        achieved_bytes_per_s=achieved_bytes,
        pct_of_ceiling=pct,
        ridge_point=ridge,
        compute_ceiling=label,
        peak_flops_per_s=peak,
        memory_bandwidth=bandwidth,
    )


def _latency_bound(
    spec: DeviceSpec, pct: float | None, mean_s: float | None, grid_blocks: int | None
) -> bool:
    if mean_s is None or mean_s <= 0:
        return False
    far_below_roof = pct is not None and pct < LATENCY_MAX_PCT
    if spec.kind == "cpu":
        return mean_s < CPU_DISPATCH_MAX_MEAN_S and far_below_roof
    if mean_s < GPU_LATENCY_MAX_MEAN_S and far_below_roof:
        return True
    small_grid = grid_blocks is not None and spec.sm_count is not None and grid_blocks < spec.sm_count
    return small_grid and mean_s < GPU_SMALL_GRID_MAX_MEAN_S and (pct is None or pct < LATENCY_MAX_PCT)


def _known(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if value == value and value >= 0 else None  # NaN / negative: unknown
