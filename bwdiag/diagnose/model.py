"""The diagnosis: plain, typed data handed from ``diagnose`` to ``report`` (never a DataFrame).

Field names follow the ``bwdiag/diagnosis@1`` contract in DESIGN.md; fields may be added, never
renamed. ``None`` means unknown (no estimate), never zero.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from bwdiag.hardware.spec import SpecSource  # noqa: F401  (defined with the ceilings; used here by name)

SCHEMA = "bwdiag/diagnosis@1"


class Bound(str, Enum):
    """The ceiling class that limits a kernel (or a slice of the timeline)."""

    COMPUTE = "compute"
    MEMORY = "memory"
    LATENCY = "latency"
    COMMUNICATION = "communication"
    UNKNOWN = "unknown"


#: Keys of ``time.by_bound``: the kernel bounds plus GPU idle time.
TIME_KEYS = ("compute", "memory", "latency", "communication", "idle", "unknown")


class FindingKind(str, Enum):
    FUSION = "fusion"
    QUANTIZATION = "quantization"
    PRECISION = "precision"
    OVERLAP = "overlap"
    LAUNCH_OVERHEAD = "launch_overhead"
    BATCHING = "batching"
    LAYOUT = "layout"
    CAST = "cast"
    HOST_BOUND = "host_bound"
    DATA_LOADER = "data_loader"
    SYNC = "sync"
    MEMCPY = "memcpy"
    OTHER = "other"


# ------------------------------------------------------------------------ the boundary: no NaN inside

_TEXT = ("str", "str | None")
_NUMBER = ("float", "float | None", "int | None")
_PLAN: dict[type, tuple[tuple[str, str], ...]] = {}


def _plan(cls: type) -> tuple[tuple[str, str], ...]:
    plan = _PLAN.get(cls)
    if plan is None:
        plan = _PLAN[cls] = tuple(
            (f.name, f.type) for f in dataclasses.fields(cls)
            if f.type in _TEXT or f.type in _NUMBER or f.type == "tuple[str, ...]")
    return plan


def _clean_text(value: Any, optional: bool) -> str | None:
    if type(value) is str:
        return value
    if value is None or (isinstance(value, float) and value != value):  # pandas' NaN for "no module"
        return None if optional else ""
    return value.value if isinstance(value, Enum) else str(value)


def _clean_number(value: Any, optional: bool) -> Any:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return None if optional else value
    return value


class _Clean:
    """Turns what pandas hands over (NaN for a missing text, inf or NaN numbers) into ``None`` once,
    when a record is built: no text field of a Diagnosis holds anything but ``str`` or ``None``,
    no optional number anything but a finite number or ``None``."""

    def __post_init__(self) -> None:
        for name, kind in _plan(type(self)):
            value = getattr(self, name)
            if kind in _TEXT:
                new = _clean_text(value, kind.endswith("None"))
            elif kind == "tuple[str, ...]":
                new = tuple(t for t in (_clean_text(v, True) for v in value) if t is not None) \
                    if value is not None else ()
            else:
                new = _clean_number(value, kind.endswith("None"))
            if new is not value:
                object.__setattr__(self, name, new)


@dataclass(frozen=True)
class Source(_Clean):
    paths: tuple[str, ...]
    ranks: tuple[int, ...]
    trace_kind: str  # "gpu" | "cpu"
    torch_version: str | None = None


@dataclass(frozen=True)
class DeviceInfo(_Clean):
    name: str
    kind: str  # "gpu" | "cpu"
    spec_source: str  # SpecSource value
    peak_flops: dict[str, float]  # dtype -> dense FLOP/s on the fastest unit for that dtype
    memory_bandwidth: float  # B/s
    interconnect_bandwidth: float | None  # B/s per GPU, one direction
    matched_from: str | None = None  # the name as the trace spelled it
    vector_flops: dict[str, float] = field(default_factory=dict)  # non-tensor-core peaks
    sources: tuple[str, ...] = ()
    #: The calibration used (spec_source "calibrated", or "user" on top of one): ``{path, origin
    #: ("local" | "trace"), measured_at, file_mtime, host: {hostname, cpu, cores}, quick,
    #: torch_version, values: {memory_bandwidth, vector_flops, tensor_flops}}``; None when none was.
    calibration: dict[str, Any] | None = None
    #: The host the trace says it was recorded on (``{hostname, cpu, cores}``; None when it says
    #: nothing) and whether the calibration cache of this machine applied to it.
    trace_host: dict[str, Any] | None = None
    #: Accelerator activity categories found besides CUDA/HIP kernels (e.g. ``mtia_ccp_events``).
    accelerator: str | None = None


@dataclass(frozen=True)
class TimeBreakdown(_Clean):
    total_us: float  # mean per rank of the analysed window
    by_bound: dict[str, float]  # TIME_KEYS -> µs, summing to total_us
    exposed_communication_us: float
    communication_overlap_pct: float | None  # None when there is no communication
    steps: int | None = None  # complete ProfilerStep spans measured (first rank with steps)
    step_us: float | None = None  # MEDIAN complete step (median over ranks' medians); None without steps
    step_min_us: float | None = None
    step_max_us: float | None = None
    step_ids: tuple[int, ...] = ()  # the complete steps measured (ProfilerStep#N numbers)
    abnormal_steps: tuple[int, ...] = ()  # step ids longer than 1.5x the median (kept, flagged)
    step_source: str | None = None  # "gpu" | "cpu": which ProfilerStep spans were measured
    steps_excluded: tuple[int, ...] = ()  # step ids left out: cut by the trace end or without duration


@dataclass(frozen=True)
class KernelRow(_Clean):
    """One kernel group: same rank, kernel name, launching op and input shapes."""

    name: str
    rank: int
    category: str
    count: int
    total_us: float
    flops: float | None
    bytes: float | None
    intensity: float | None
    achieved_flops_per_s: float | None
    achieved_bytes_per_s: float | None
    bound: str  # Bound value
    ceiling: str  # which roof applies, e.g. "bf16 tensor", "memory", "launch latency"
    pct_of_ceiling: float | None
    op: str | None = None
    shapes: str | None = None
    dtype: str | None = None
    module: str | None = None
    attainable_flops_per_s: float | None = None  # the roof's height at this intensity
    mean_us: float = 0.0


@dataclass(frozen=True)
class CollectiveRow(_Clean):
    name: str
    rank: int
    collective: str
    count: int
    total_us: float
    exposed_us: float
    bytes: float | None  # message size per call
    algbw: float | None  # B/s
    busbw: float | None  # B/s
    pct_of_link: float | None
    group_size: int | None = None
    dtype: str | None = None
    regime: str | None = None  # "latency" (per-call cost dominates) | "bandwidth" | None (unknown)


@dataclass(frozen=True)
class Finding(_Clean):
    kind: str  # FindingKind value
    title: str
    est_saving_us: float  # over the analysed window (mean per rank)
    est_saving_pct: float  # of the window, so also of one step
    evidence: tuple[str, ...]
    fix: str
    #: the saving in one median profiler step (window saving × step ÷ window); None without steps
    est_saving_per_step_us: float | None = None


@dataclass(frozen=True)
class UncoveredShare(_Clean):
    """One reason compute-kernel time has no FLOP/byte estimate (see ``diagnose.uncovered``)."""

    reason: str
    us: float  # summed over ranks
    pct: float  # of all compute-kernel time


@dataclass(frozen=True)
class Coverage(_Clean):
    """What share of each kind of device time the diagnosis can price.

    *Compute kernels* are every kernel (or, on a CPU trace, leaf op) that is neither a copy
    (memcpy/memset) nor a collective: ``linked_pct`` and ``estimated_pct`` count those alone, so a
    trace whose copies carry byte counts but whose GEMMs have no shapes reads low, as it should.
    Copies are priced from their byte counts, collectives from their message sizes: each has its own
    figure (``None`` when the trace has none of that kind).
    """

    linked_pct: float  # share of compute-kernel time linked to a launching op
    estimated_pct: float  # share of compute-kernel time with a FLOP or byte estimate
    compute_us: float = 0.0  # compute-kernel time the two shares are of (summed over ranks)
    copy_us: float = 0.0  # memcpy + memset time
    copy_estimated_pct: float | None = None  # share of copy time with a byte count
    collective_us: float = 0.0
    collective_estimated_pct: float | None = None  # share of collective time with a message size
    uncovered: tuple[UncoveredShare, ...] = ()  # why the rest of the compute-kernel time is not priced


@dataclass(frozen=True)
class RankSummary(_Clean):
    rank: int
    total_us: float
    busy_us: float
    compute_us: float
    communication_us: float
    exposed_communication_us: float
    idle_us: float
    kernels: int


@dataclass(frozen=True)
class Diagnosis:
    source: Source
    device: DeviceInfo
    time: TimeBreakdown
    kernels: tuple[KernelRow, ...]
    collectives: tuple[CollectiveRow, ...]
    findings: tuple[Finding, ...]
    coverage: Coverage
    warnings: tuple[str, ...]
    ranks: tuple[RankSummary, ...] = ()
    extras: dict[str, Any] = field(default_factory=dict)  # per-issue additions (timeline, idle…)
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        """The ``diagnosis.json`` object: enums as their values, tuples as lists."""
        return _plain(self)


def _plain(value: Any) -> Any:
    """Dataclasses to dicts, enums to values, tuples to lists, NaN to None: one walk, no copies
    of leaves (``dataclasses.asdict`` deep-copies first, which cost 0.3 s on an 8-rank diagnosis)."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is float:
        return None if value != value else value  # NaN is not JSON
    if t is dict:
        return {str(k): _plain(v) for k, v in value.items()}
    if t is list or t is tuple:
        return [_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value
