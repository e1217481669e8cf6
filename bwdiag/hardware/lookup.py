"""Find a device in the table from what a trace says of it: name matching, arch fallback, MIG.

``gpu_spec`` takes one entry of a trace's ``deviceProperties`` (``name``, ``computeMajor``,
``computeMinor``, ``numSms``, ``totalGlobalMem`` ...) and returns the table's ``DeviceSpec`` (or the
assumed fallback) and appends the warnings a user should see; ``find_device`` looks a name up.
Calibrations, the CPU and ``--device-spec`` overrides are :mod:`bwdiag.hardware.match`'s. Names in the wild: ``NVIDIA A100-SXM4-80GB``, ``NVIDIA A100-PG509-200`` (board
code), ``NVIDIA H100 80GB HBM3`` (the SXM5 part), ``Tesla V100-SXM2-32GB``, names without the
``NVIDIA`` prefix, MIG slices (``... MIG 1g.5gb``), ``AMD Instinct MI300X VF`` (SR-IOV), per-die
MI250X devices, blank names and ``AMD Radeon Graphics``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from bwdiag.hardware.spec import GIB, DeviceSpec, TableEntry, fallback_spec, table_entries

#: NVIDIA board codes some drivers report instead of the product name.
BOARD_CODES = {
    "pg509-200": "a100 sxm4 40gb",
    "pg509-210": "a100 sxm4 80gb",
}

#: Names that say nothing about the part: identify it from compute capability, SMs and memory.
_GENERIC_NAME = re.compile(r"^(amd\s+)?(radeon\s+graphics|graphics\s+device|device|gpu|gfx\w*)?$")

#: ``MIG 1g.5gb`` / ``MIG 1c.2g.10gb``: compute slices (of 7) and the slice's memory.
_MIG = re.compile(r"\bmig[\s-]+(?:(\d+)c\.)?(\d+)g\.(\d+(?:\.\d+)?)gb\b")

#: Arch fallback: how far the trace's memory may sit from the table's (usable memory is a little
#: below the nominal size: an A100 80GB reports 79.2 GiB; an MI300X reports exactly 192 GiB).
ARCH_MEMORY_TOLERANCE = 0.10

#: MIG partitions the GPU's compute into 7 slices.
MIG_COMPUTE_SLICES = 7

_OVERRIDE_HINT = (
    "pass --device-spec FILE (JSON with the fields of a bwdiag/hardware/devices.json entry, "
    "e.g. {\"base\": \"H100 SXM5 80GB\"} or {\"memory_bandwidth\": 3.35e12, "
    "\"tensor_flops\": {\"bf16\": 989e12}}) or run `bwdiag calibrate` on that machine"
)


@dataclass(frozen=True)
class NameParts:
    """What a device name tells: product families, form factor, memory, MIG slice, SR-IOV."""

    text: str  # normalised (lower case, board codes expanded, MIG suffix removed)
    families: tuple[str, ...]
    form: str | None
    memory_gb: float | None
    mig: tuple[int, float] | None  # (compute slices, memory GB)
    virtual_function: bool


def parse_name(name: str, known_families: frozenset[str]) -> NameParts:
    """Split a driver device name into the parts matching needs."""
    text = name.strip().lower()
    for code, product in BOARD_CODES.items():
        text = text.replace(code, product)
    mig = None
    found = _MIG.search(text)
    if found:
        compute = int(found.group(1) or found.group(2))
        mig = (compute, float(found.group(3)))
        text = (text[: found.start()] + text[found.end():]).strip()
    tokens = [t for t in re.split(r"[\s\-_/,()]+", text) if t]
    families = tuple(dict.fromkeys(t for t in tokens if t in known_families))
    form = None
    for token in tokens:
        if token.startswith("sxm"):
            form = "sxm"
        elif token.startswith("pcie"):
            form = "pcie"
        elif token == "nvl":
            form = "nvl"
    if form is None and "h100" in families and "hbm3" in tokens:
        form = "sxm"  # the driver calls the H100 SXM5 module "NVIDIA H100 80GB HBM3"
    memory_gb = None
    for token in tokens:
        size = re.fullmatch(r"(\d+)gb", token)
        if size:
            memory_gb = float(size.group(1))
    return NameParts(
        text=text,
        families=families,
        form=form,
        memory_gb=memory_gb,
        mig=mig,
        virtual_function="vf" in tokens,
    )


def find_device(name: str) -> DeviceSpec | None:
    """A table device by its table name or a driver-style name (``H100``, ``A100-SXM4-40GB``,
    ``mi300x``); ``None`` when nothing matches."""
    wanted = name.strip().lower()
    for entry in table_entries():
        if entry.spec.name.lower() == wanted:
            return entry.spec
    if not wanted:
        return None
    warnings: list[str] = []
    entry = _match_by_name(parse_name(name, _families()), {}, warnings)
    return entry.spec if entry else None


def name_variants(name: str) -> list[DeviceSpec]:
    """The table devices ``name`` cannot tell apart: ``H100`` -> the SXM5, PCIe and NVL parts,
    ``A100 80GB`` -> the SXM4 and PCIe 80 GB parts, ``H100 SXM5 80GB`` -> just that one. The same
    filters as the name match (family, then form factor, then memory size); ``find_device`` picks
    one of these (the table's default among them, or the closest in memory)."""
    wanted = name.strip().lower()
    exact = [e.spec for e in table_entries() if e.spec.name.lower() == wanted]
    if exact or not wanted:
        return exact
    parts = parse_name(name, _families())
    candidates = [e for e in table_entries() if e.family in parts.families]
    same_form = [e for e in candidates if parts.form and e.form == parts.form]
    candidates = same_form or candidates
    if parts.memory_gb and len(candidates) > 1:
        best = min(_memory_distance(e, parts.memory_gb) for e in candidates)
        candidates = [e for e in candidates if math.isclose(_memory_distance(e, parts.memory_gb), best,
                                                            abs_tol=1e-9)]
    return [e.spec for e in candidates]


# -- GPU -------------------------------------------------------------------------------------


def _families() -> frozenset[str]:
    return frozenset(e.family for e in table_entries() if e.family)


def gpu_spec(props: dict[str, Any], warnings: list[str], accelerator: str | None = None) -> DeviceSpec:
    """The table's ceilings for the GPU ``props`` describes (the assumed fallback when none fits);
    how it was matched, and what may not fit, is appended to ``warnings``."""
    raw_name = str(props.get("name") or "").strip()
    parts = parse_name(raw_name, _families())
    entry = _match_by_name(parts, props, warnings) if parts.families else None
    how = "name"
    if entry is None and _GENERIC_NAME.match(parts.text):
        entry = _match_by_arch(props, warnings)
        how = "arch"
    if entry is None:
        fallback = fallback_spec("gpu")
        described = f"GPU {raw_name!r}" if raw_name else "a GPU with no name in deviceProperties"
        if accelerator:
            described = (f"the {accelerator.upper()} device" + (f" {raw_name!r}" if raw_name else "")
                         + f" (its work counts as device time; the table holds no {accelerator.upper()} parts)")
        warnings.append(
            f"device ceilings: {described} is not in bwdiag's device table; using "
            f"{fallback.name} (spec_source 'assumed'). Percent-of-ceiling figures are only "
            f"indicative: {_OVERRIDE_HINT}."
        )
        sms = _int(props.get("numSms"))
        return replace(fallback, matched_from=raw_name or None, sm_count=sms or fallback.sm_count)
    spec = replace(entry.spec, matched_from=raw_name or None)
    sms = _int(props.get("numSms"))
    if parts.mig:
        spec = _mig_slice(spec, parts.mig, sms, warnings, raw_name)
    elif sms and spec.sm_count and sms != spec.sm_count and how == "name":
        warnings.append(
            f"device ceilings: the trace reports {sms} SMs for {raw_name!r} but {spec.name} has "
            f"{spec.sm_count}; the ceilings may not fit this part: {_OVERRIDE_HINT}."
        )
    if parts.virtual_function:
        spec = replace(spec, notes=spec.notes + (
            f"{raw_name!r} is an SR-IOV virtual function of the {spec.name}; the full device's "
            "ceilings are used (a VF normally maps one whole GPU).",
        ))
    return spec


def _match_by_name(
    parts: NameParts, props: dict[str, Any], warnings: list[str]
) -> TableEntry | None:
    candidates = [e for e in table_entries() if e.family in parts.families]
    if not candidates:
        return None
    if parts.form:
        same_form = [e for e in candidates if e.form == parts.form]
        if same_form:
            candidates = same_form
        else:
            chosen = _default(candidates)
            warnings.append(
                f"device ceilings: no {parts.form.upper()} variant of {chosen.spec.name} in the "
                f"table; using {chosen.spec.name}: {_OVERRIDE_HINT}."
            )
            return chosen
    sms = _int(props.get("numSms"))
    if len(candidates) > 1 and sms:
        same_sms = [e for e in candidates if e.spec.sm_count == sms]
        if same_sms:
            candidates = same_sms
    memory_gib = parts.memory_gb or _gib(props.get("totalGlobalMem"))
    if len(candidates) > 1 and memory_gib:
        return min(candidates, key=lambda e: _memory_distance(e, memory_gib))
    if len(candidates) > 1:
        chosen = _default(candidates)
        warnings.append(
            f"device ceilings: the name {parts.text!r} does not say which variant it is; using "
            f"{chosen.spec.name}."
        )
        return chosen
    return candidates[0]


def _match_by_arch(props: dict[str, Any], warnings: list[str]) -> TableEntry | None:
    """Identify an unnamed device from compute capability, SM/CU count and memory size."""
    major, minor = _int(props.get("computeMajor")), _int(props.get("computeMinor"))
    sms = _int(props.get("numSms"))
    memory_gib = _gib(props.get("totalGlobalMem"))
    if major is None or minor is None or not sms:
        return None
    candidates = [
        e for e in table_entries()
        if e.spec.compute_capability == (major, minor) and e.spec.sm_count == sms
        and (memory_gib is None or _memory_distance(e, memory_gib) <= ARCH_MEMORY_TOLERANCE)
    ]
    if not candidates:
        return None
    first = candidates[0].spec
    if any(not _same_ceilings(first, e.spec) for e in candidates[1:]):
        names = ", ".join(e.spec.name for e in candidates)
        warnings.append(
            f"device ceilings: the device has no usable name and its compute capability "
            f"{major}.{minor}, {sms} SMs/CUs and memory fit several parts with different "
            f"ceilings ({names})."
        )
        return None
    memory = f", {memory_gib:.0f} GiB" if memory_gib else ""
    others = f" (same ceilings as {', '.join(e.spec.name for e in candidates[1:])})" if len(
        candidates) > 1 else ""
    warnings.append(
        f"device ceilings: the device has no usable name; identified as {first.name}{others} from "
        f"compute capability {major}.{minor}, {sms} SMs/CUs{memory}. If that is wrong, "
        f"{_OVERRIDE_HINT}."
    )
    return candidates[0]


def _mig_slice(
    spec: DeviceSpec, mig: tuple[int, float], sms: int | None, warnings: list[str], name: str
) -> DeviceSpec:
    compute_slices, memory_gb = mig
    compute = min(1.0, compute_slices / MIG_COMPUTE_SLICES)
    total_gb = (spec.memory_bytes or 0) / GIB
    # Bandwidth follows the slice's share of the memory controllers, i.e. of the memory.
    memory = min(1.0, memory_gb / total_gb) if total_gb else compute
    note = (
        f"MIG slice {compute_slices}g.{memory_gb:g}gb: compute ceilings x {compute:.3f} "
        f"({compute_slices}/{MIG_COMPUTE_SLICES} of the GPU), memory bandwidth x {memory:.3f} "
        f"({memory_gb:g} of {total_gb:.0f} GB); MIG instances have no NVLink peer access."
    )
    warnings.append(
        f"device ceilings: {name!r} is a MIG slice, which has a fraction of the "
        f"{spec.name}'s ceilings; scaled them ({note})"
    )
    scaled = spec.scaled(compute, memory, note)
    return replace(
        scaled,
        sm_count=sms or max(1, round((spec.sm_count or 0) * compute)) or None,
        memory_bytes=int(memory_gb * GIB),
        interconnect_bandwidth=None,
    )


# -- helpers ---------------------------------------------------------------------------------


def _default(candidates: list[TableEntry]) -> TableEntry:
    return next((e for e in candidates if e.default), candidates[0])


def _memory_distance(entry: TableEntry, memory_gib: float) -> float:
    if not entry.spec.memory_bytes or memory_gib <= 0:
        return math.inf
    return abs(math.log(memory_gib * GIB / entry.spec.memory_bytes))


def _same_ceilings(a: DeviceSpec, b: DeviceSpec) -> bool:
    def close(x: float, y: float) -> bool:
        return math.isclose(x, y, rel_tol=0.01)

    return (
        a.tensor_flops.keys() == b.tensor_flops.keys()
        and a.vector_flops.keys() == b.vector_flops.keys()
        and all(close(a.tensor_flops[k], b.tensor_flops[k]) for k in a.tensor_flops)
        and all(close(a.vector_flops[k], b.vector_flops[k]) for k in a.vector_flops)
        and close(a.memory_bandwidth, b.memory_bandwidth)
    )


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and value != "" else None
    except (TypeError, ValueError):
        return None


def _gib(value: Any) -> float | None:
    number = _int(value)
    return number / GIB if number and number > 0 else None


__all__ = ["NameParts", "find_device", "gpu_spec", "name_variants", "parse_name"]
