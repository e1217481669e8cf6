"""``--device-spec FILE``: user ceilings on top of the matched device (spec_source "user").

The file is JSON with the fields of a ``devices.json`` entry, all optional. Figures are per device
as the trace sees it (divided by ``devices_per_package`` if given). ``tensor_flops`` and
``vector_flops`` merge dtype by dtype into the matched device's; ``"base": "<table name>"`` starts
from that table device instead of the matched one. Example::

    {"base": "H100 SXM5 80GB", "memory_bandwidth": 3.0e12, "tensor_flops": {"bf16": 800e12}}
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from bwdiag.errors import DeviceSpecError
from bwdiag.hardware.lookup import find_device
from bwdiag.hardware.spec import ENTRY_KEYS, GIB, DeviceSpec, Dtype, SpecSource, is_positive_number

_ALLOWED = (ENTRY_KEYS - {"match", "same_as"}) | {"base"}
_DTYPES = frozenset(d.value for d in Dtype)


def load_override(path: Path) -> dict[str, Any]:
    """Read and validate a device-spec file; ``DeviceSpecError`` names the file and the problem."""
    try:
        text = path.read_text("utf-8")
    except OSError as err:
        raise DeviceSpecError(f"{path}: cannot read the device spec: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise DeviceSpecError(f"{path}: the device spec is not UTF-8 text") from err
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise DeviceSpecError(
            f"{path}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})"
        ) from err
    if not isinstance(data, dict):
        raise DeviceSpecError(f"{path}: a device spec must be a JSON object, got {type(data).__name__}")
    _validate(data, path)
    return data


def apply_override(spec: DeviceSpec, path: Path) -> DeviceSpec:
    """``spec`` with the fields of the JSON file at ``path`` laid on top."""
    data = load_override(path)
    if "base" in data:
        base = find_device(str(data["base"]))
        if base is None:
            raise DeviceSpecError(
                f"{path}: 'base' {data['base']!r} is not a device in the table "
                "(see `bwdiag devices`)"
            )
        spec = replace(base, matched_from=spec.matched_from)
    per = int(data.get("devices_per_package", 1))

    def scaled(mapping: dict[str, float]) -> dict[str, float]:
        return {k: float(v) / per for k, v in mapping.items()}

    changes: dict[str, Any] = {}
    if "tensor_flops" in data:
        changes["tensor_flops"] = {**spec.tensor_flops, **scaled(data["tensor_flops"])}
    if "vector_flops" in data:
        changes["vector_flops"] = {**spec.vector_flops, **scaled(data["vector_flops"])}
    if "memory_bandwidth" in data:
        changes["memory_bandwidth"] = float(data["memory_bandwidth"]) / per
    if "interconnect_bandwidth" in data:
        link = data["interconnect_bandwidth"]
        changes["interconnect_bandwidth"] = float(link) / per if link is not None else None
    if "sm_count" in data:
        changes["sm_count"] = int(data["sm_count"]) // per
    if "memory_gb" in data:
        changes["memory_bytes"] = int(round(float(data["memory_gb"]) * GIB / per))
    if "compute_capability" in data:
        changes["compute_capability"] = tuple(int(x) for x in data["compute_capability"])
    for key in ("name", "vendor", "kind", "interconnect"):
        if key in data:
            changes[key] = data[key]
    fields = sorted(k for k in data if k not in {"notes", "sources"})
    changes["notes"] = spec.notes + tuple(data.get("notes", ())) + (
        f"ceilings overridden by {path} ({', '.join(fields) or 'no fields'})",
    )
    changes["sources"] = spec.sources + tuple(data.get("sources", ())) + (f"user file: {path}",)
    changes["spec_source"] = SpecSource.USER
    return replace(spec, **changes)


def _validate(data: dict[str, Any], path: Path) -> None:
    unknown = sorted(set(data) - _ALLOWED)
    if unknown:
        raise DeviceSpecError(
            f"{path}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_ALLOWED))}"
        )

    def fail(field: str, problem: str) -> DeviceSpecError:
        return DeviceSpecError(f"{path}: field '{field}' {problem}")

    for key in ("tensor_flops", "vector_flops"):
        if key not in data:
            continue
        table = data[key]
        if not isinstance(table, dict):
            raise fail(key, "must be an object of dtype -> FLOP/s")
        for dtype, value in table.items():
            if dtype not in _DTYPES:
                raise fail(key, f"has unknown dtype {dtype!r} (known: {', '.join(sorted(_DTYPES))})")
            if not is_positive_number(value):
                raise fail(f"{key}.{dtype}", f"must be a positive number of FLOP/s, got {value!r}")
    for key in ("memory_bandwidth", "memory_gb"):
        if key in data and not is_positive_number(data[key]):
            raise fail(key, f"must be a positive number, got {data[key]!r}")
    if "interconnect_bandwidth" in data and data["interconnect_bandwidth"] is not None:
        if not is_positive_number(data["interconnect_bandwidth"]):
            value = data["interconnect_bandwidth"]
            raise fail("interconnect_bandwidth", f"must be a positive number of bytes/s or null, got {value!r}")
    for key in ("sm_count", "devices_per_package"):
        if key in data:
            value = data[key]
            if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                raise fail(key, f"must be a positive integer, got {value!r}")
    if "kind" in data and data["kind"] not in ("gpu", "cpu"):
        raise fail("kind", f"must be 'gpu' or 'cpu', got {data['kind']!r}")
    for key in ("name", "vendor", "interconnect", "base"):
        if key in data and not isinstance(data[key], str):
            raise fail(key, f"must be a string, got {data[key]!r}")
    for key in ("notes", "sources"):
        if key in data and not (
            isinstance(data[key], list) and all(isinstance(x, str) for x in data[key])
        ):
            raise fail(key, "must be a list of strings")
    if "compute_capability" in data:
        cc = data["compute_capability"]
        if not (isinstance(cc, list) and len(cc) == 2 and all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in cc)):
            raise fail("compute_capability", f"must be [major, minor], got {cc!r}")
