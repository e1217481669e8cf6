"""Device ceilings: the ``DeviceSpec`` type, dtypes, and the table in ``devices.json``.

A ``DeviceSpec`` holds the dense peak FLOP/s of a device's tensor (matrix) units and vector units
per dtype, its memory bandwidth and its interconnect bandwidth (one direction). The roofline code
(``bwdiag.diagnose.roofline``, a layer above) asks it for the ceiling that applies to a kernel through
:meth:`DeviceSpec.ceiling`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import lru_cache
from importlib import resources
from types import MappingProxyType
from typing import Any

GIB = 2**30


class SpecSource(str, Enum):
    """Where a device's ceilings came from (``device.spec_source`` in ``diagnosis.json``)."""

    __str__ = str.__str__  # prints and formats as its value, like the model's enums
    __format__ = str.__format__

    TABLE = "table"
    CALIBRATED = "calibrated"
    USER = "user"
    ASSUMED = "assumed"


class Dtype(str, Enum):
    """The numeric formats bwdiag keeps ceilings for."""

    FP64 = "fp64"
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"

    @classmethod
    def parse(cls, text: str | None) -> Dtype | None:
        """Map a dtype as traces and users spell it (``c10::BFloat16``, ``float16``, ``Half``,
        ``torch.float8_e4m3fn``, ``bf16`` ...) to a ``Dtype``; ``None`` when it is not a format
        with a compute ceiling (bool, int64, complex ...)."""
        if text is None:
            return None
        key = str(text).strip().lower()
        for prefix in ("torch.", "c10::", "at::"):
            if key.startswith(prefix):
                key = key[len(prefix):]
        key = key.replace(" ", "").replace("_", "")
        if key.startswith("float8") or key.startswith("fp8") or key in {"e4m3", "e5m2"}:
            return cls.FP8
        return _DTYPE_ALIASES.get(key)


_DTYPE_ALIASES: dict[str, Dtype] = {
    "fp64": Dtype.FP64, "float64": Dtype.FP64, "double": Dtype.FP64, "f64": Dtype.FP64,
    "fp32": Dtype.FP32, "float32": Dtype.FP32, "float": Dtype.FP32, "f32": Dtype.FP32,
    "tf32": Dtype.TF32, "tensorfloat32": Dtype.TF32, "xf32": Dtype.TF32,
    "bf16": Dtype.BF16, "bfloat16": Dtype.BF16,
    "fp16": Dtype.FP16, "float16": Dtype.FP16, "half": Dtype.FP16, "f16": Dtype.FP16,
    "int8": Dtype.INT8, "i8": Dtype.INT8, "char": Dtype.INT8, "qint8": Dtype.INT8,
    "uint8": Dtype.INT8, "quint8": Dtype.INT8, "byte": Dtype.INT8,
}


def _frozen(mapping: Mapping[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class DeviceSpec:
    """The ceilings of one device, as bwdiag uses them. All FLOP/s are dense peaks."""

    name: str
    kind: str  # "gpu" | "cpu"
    vendor: str
    tensor_flops: Mapping[str, float]  # dtype -> FLOP/s on tensor / matrix cores
    vector_flops: Mapping[str, float]  # dtype -> FLOP/s on vector (CUDA-core / SIMD) units
    memory_bandwidth: float  # bytes/s (HBM / GDDR / DRAM)
    interconnect_bandwidth: float | None  # bytes/s per device, one direction
    sm_count: int | None  # SMs (NVIDIA), CUs (AMD), cores (CPU)
    memory_bytes: int | None
    spec_source: SpecSource
    sources: tuple[str, ...] = ()
    matched_from: str | None = None  # the device name as the trace spelled it
    notes: tuple[str, ...] = ()
    compute_capability: tuple[int, int] | None = None
    interconnect: str | None = None  # what the link is, in words
    #: The calibration these ceilings were measured in (``CalibrationSnapshot``), None otherwise.
    calibration: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tensor_flops", _frozen(self.tensor_flops))
        object.__setattr__(self, "vector_flops", _frozen(self.vector_flops))

    def __hash__(self) -> int:  # the mapping fields are read-only views, hashed by content
        return hash((
            self.name, self.kind, self.spec_source, self.memory_bandwidth,
            self.interconnect_bandwidth, self.matched_from,
            tuple(sorted(self.tensor_flops.items())), tuple(sorted(self.vector_flops.items())),
        ))

    # -- ceilings ---------------------------------------------------------------------------

    def ceiling(self, dtype: str | Dtype | None, tensor: bool) -> tuple[str, float] | None:
        """The compute roof for a kernel of ``dtype``: ``(label, FLOP/s)``.

        ``tensor=True`` asks for the tensor/matrix-core rate and falls back to the vector rate when
        the device has no tensor path for that dtype. ``fp32`` on tensor cores means a native fp32
        matrix rate (AMD MFMA); NVIDIA's tf32 is used only when ``dtype`` is ``tf32``. Formats the
        vector units lack a figure for (fp16/bf16/fp8/int8 on most parts) fall back to the fp32
        vector rate, and the label says so. ``None`` only when nothing applies (e.g. fp64 on a
        device without an fp64 figure). An unknown ``dtype`` is treated as fp32.
        """
        dt = dtype if isinstance(dtype, Dtype) else (Dtype.parse(dtype) or Dtype.FP32)
        if tensor and dt.value in self.tensor_flops:
            return f"{dt.value} tensor", float(self.tensor_flops[dt.value])
        if dt is Dtype.TF32:  # tf32 without tensor cores is plain fp32 arithmetic
            dt = Dtype.FP32
        if dt.value in self.vector_flops:
            return f"{dt.value} vector", float(self.vector_flops[dt.value])
        if dt is not Dtype.FP64 and "fp32" in self.vector_flops:
            return "fp32 vector", float(self.vector_flops["fp32"])
        return None

    def peak_flops(self, dtype: str | Dtype | None, tensor: bool) -> float | None:
        """Dense peak FLOP/s for ``dtype`` (see :meth:`ceiling` for the fallback rules)."""
        found = self.ceiling(dtype, tensor)
        return found[1] if found else None

    def ridge_point(self, dtype: str | Dtype | None, tensor: bool) -> float | None:
        """FLOP/byte where the compute roof meets the memory roof."""
        peak = self.peak_flops(dtype, tensor)
        return peak / self.memory_bandwidth if peak else None

    # -- conversions ------------------------------------------------------------------------

    def best_peak_flops(self) -> dict[str, float]:
        """Per dtype the better of the tensor and vector peak, in ``Dtype`` order."""
        best: dict[str, float] = {}
        for table in (self.vector_flops, self.tensor_flops):
            for dt, value in table.items():
                best[dt] = max(best.get(dt, 0.0), float(value))
        return {d.value: best[d.value] for d in Dtype if d.value in best}

    def ordered_vector_flops(self) -> dict[str, float]:
        """The vector peaks as plain floats, in ``Dtype`` order."""
        return {d.value: float(self.vector_flops[d.value]) for d in Dtype if d.value in self.vector_flops}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form (``bwdiag devices --json``)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "vendor": self.vendor,
            "spec_source": self.spec_source.value,
            "tensor_flops": dict(self.tensor_flops),
            "vector_flops": dict(self.vector_flops),
            "memory_bandwidth": self.memory_bandwidth,
            "interconnect_bandwidth": self.interconnect_bandwidth,
            "interconnect": self.interconnect,
            "sm_count": self.sm_count,
            "memory_bytes": self.memory_bytes,
            "compute_capability": list(self.compute_capability) if self.compute_capability else None,
            "matched_from": self.matched_from,
            "notes": list(self.notes),
            "sources": list(self.sources),
        }

    def scaled(self, compute: float, memory: float, note: str) -> DeviceSpec:
        """A copy with compute ceilings x ``compute`` and memory bandwidth x ``memory``
        (a MIG slice, a die of a multi-die package)."""
        return replace(
            self,
            tensor_flops={k: v * compute for k, v in self.tensor_flops.items()},
            vector_flops={k: v * compute for k, v in self.vector_flops.items()},
            memory_bandwidth=self.memory_bandwidth * memory,
            notes=self.notes + (note,),
        )


# -- the table -------------------------------------------------------------------------------

#: Keys a devices.json entry (or a --device-spec override) may carry.
ENTRY_KEYS = frozenset({
    "name", "vendor", "kind", "match", "compute_capability", "sm_count", "memory_gb",
    "devices_per_package", "tensor_flops", "vector_flops", "memory_bandwidth",
    "interconnect_bandwidth", "interconnect", "notes", "sources", "same_as",
})


@dataclass(frozen=True)
class TableEntry:
    """One row of devices.json, kept with its matching hints."""

    spec: DeviceSpec  # per-device (already divided by devices_per_package)
    family: str | None
    form: str | None
    default: bool
    raw: Mapping[str, Any] = field(repr=False)


def spec_from_entry(entry: Mapping[str, Any], source: SpecSource) -> DeviceSpec:
    """Build the per-device ``DeviceSpec`` of a devices.json-style entry.

    Package figures are divided by ``devices_per_package`` (MI250X: the OS sees each GCD die as
    one device). Raises ``ValueError`` on a malformed entry.
    """
    per = int(entry.get("devices_per_package") or 1)
    if per < 1:
        raise ValueError("devices_per_package must be >= 1")
    memory_gb = entry.get("memory_gb")
    cc = entry.get("compute_capability")
    sm = entry.get("sm_count")
    link = entry.get("interconnect_bandwidth")
    spec = DeviceSpec(
        name=str(entry["name"]),
        kind=str(entry.get("kind", "gpu")),
        vendor=str(entry.get("vendor", "unknown")),
        tensor_flops={k: float(v) / per for k, v in dict(entry.get("tensor_flops") or {}).items()},
        vector_flops={k: float(v) / per for k, v in dict(entry.get("vector_flops") or {}).items()},
        memory_bandwidth=float(entry["memory_bandwidth"]) / per,
        interconnect_bandwidth=float(link) / per if link else None,
        sm_count=int(sm) // per if sm else None,
        memory_bytes=int(round(float(memory_gb) * GIB / per)) if memory_gb else None,
        spec_source=source,
        sources=tuple(entry.get("sources") or ()),
        notes=tuple(entry.get("notes") or ()),
        compute_capability=(int(cc[0]), int(cc[1])) if cc else None,
        interconnect=entry.get("interconnect"),
    )
    return spec


@lru_cache(maxsize=1)
def _load_table() -> tuple[tuple[TableEntry, ...], Mapping[str, Mapping[str, Any]]]:
    text = resources.files("bwdiag.hardware").joinpath("devices.json").read_text("utf-8")
    data = json.loads(text)
    entries = []
    by_name: dict[str, Mapping[str, Any]] = {}
    for raw in data["devices"]:
        match = raw.get("match") or {}
        entries.append(TableEntry(
            spec=spec_from_entry(raw, SpecSource.TABLE),
            family=match.get("family"),
            form=match.get("form"),
            default=bool(match.get("default")),
            raw=raw,
        ))
        by_name[raw["name"]] = raw
    fallbacks = {}
    for kind, raw in data["fallbacks"].items():
        merged = dict(raw)
        if "same_as" in raw:  # the assumed GPU reuses a real device's ceilings
            base = dict(by_name[raw["same_as"]])
            base.pop("match", None)
            base.update({k: v for k, v in raw.items() if k != "same_as"})
            base["notes"] = list(raw.get("notes", [])) + list(by_name[raw["same_as"]]["notes"])
            base["sources"] = list(by_name[raw["same_as"]]["sources"])
            merged = base
        fallbacks[kind] = MappingProxyType(merged)
    return tuple(entries), MappingProxyType(fallbacks)


def table_entries() -> tuple[TableEntry, ...]:
    """Every device of devices.json with its matching hints."""
    return _load_table()[0]


def list_devices() -> list[DeviceSpec]:
    """The per-device ceilings of every device in the table (spec_source "table")."""
    return [entry.spec for entry in table_entries()]


def fallback_entry(kind: str) -> Mapping[str, Any]:
    """The raw ``assumed`` entry for ``kind`` ("gpu" or "cpu")."""
    return _load_table()[1][kind]


def fallback_spec(kind: str) -> DeviceSpec:
    """The documented assumed ceilings for an unknown GPU or an uncalibrated CPU."""
    return spec_from_entry(fallback_entry(kind), SpecSource.ASSUMED)


def is_positive_number(value: Any) -> bool:
    """True for a finite number > 0 (bools excluded)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )
