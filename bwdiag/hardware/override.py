"""``--device-spec FILE``: user ceilings on top of the matched device (spec_source "user").

The file is one JSON object. Two ways to write it:

* **A copy of a** ``bwdiag devices --json`` **entry**, edited: every key that command prints is
  accepted. ``spec_source`` and ``matched_from`` are informational and ignored (the result is
  always spec_source "user"; ``spec_source`` must still be one of table, calibrated, user,
  assumed); ``memory_bytes`` sets the memory size (it must agree with ``memory_gb`` if both are
  given); ``null`` for ``sm_count``, ``memory_bytes``, ``compute_capability``, ``interconnect`` or
  ``interconnect_bandwidth`` means "none known". A JSON list holding exactly one such object is
  accepted too.
* **Only the fields to change**, e.g.::

      {"base": "H100 SXM5 80GB", "memory_bandwidth": 3.0e12, "tensor_flops": {"bf16": 800e12}}

Fields (all optional): ``tensor_flops`` / ``vector_flops`` (dtype -> dense FLOP/s, merged dtype by
dtype into the device's; dtypes fp64 fp32 tf32 bf16 fp16 fp8 int8), ``memory_bandwidth`` (B/s),
``interconnect_bandwidth`` (B/s, one direction, or null), ``name``, ``vendor``, ``kind`` ("gpu" or
"cpu"), ``sm_count``, ``memory_gb``, ``memory_bytes``, ``compute_capability`` ([major, minor]),
``interconnect`` (the link in words), ``notes`` and ``sources`` (lists of strings, appended),
``devices_per_package`` (the figures are for a package of that many devices: each is divided by
it). ``"base": "<name from bwdiag devices>"`` starts from that table device instead of the one
matched from the trace. Figures are per device as the trace sees it. Any other key is refused, with
the file and the key named.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from bwdiag.errors import DeviceSpecError
from bwdiag.hardware.lookup import find_device
from bwdiag.hardware.spec import ENTRY_KEYS, GIB, DeviceSpec, Dtype, SpecSource, is_positive_number

#: Keys ``bwdiag devices --json`` prints that are not ceilings: accepted, checked, ignored.
INFORMATIONAL_KEYS = frozenset({"spec_source", "matched_from"})
_ALLOWED = (ENTRY_KEYS - {"match", "same_as"}) | {"base", "memory_bytes"} | INFORMATIONAL_KEYS
_SOURCES = frozenset(s.value for s in SpecSource)
#: How far ``memory_gb`` and ``memory_bytes`` may disagree (the table rounds GB to one decimal).
_MEMORY_AGREEMENT = 0.01
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
    if isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict):
        data = data[0]  # one entry of `bwdiag devices --json`, list brackets kept
    elif isinstance(data, list):
        raise DeviceSpecError(
            f"{path}: a device spec is one JSON object, got a list of {len(data)} items; copy one "
            "device's object out of `bwdiag devices --json`"
        )
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
        changes["sm_count"] = int(data["sm_count"]) // per if data["sm_count"] is not None else None
    for key, scale in (("memory_gb", GIB), ("memory_bytes", 1)):
        if key in data:
            size = data[key]
            changes["memory_bytes"] = int(round(float(size) * scale / per)) if size is not None else None
    if "compute_capability" in data:
        cc = data["compute_capability"]
        changes["compute_capability"] = tuple(int(x) for x in cc) if cc is not None else None
    for key in ("name", "vendor", "kind", "interconnect"):
        if key in data:
            changes[key] = data[key]
    fields = sorted(k for k in data if k not in {"notes", "sources"} | INFORMATIONAL_KEYS)
    changes["notes"] = _appended(spec.notes, data.get("notes", ())) + (
        f"ceilings overridden by {path} ({', '.join(fields) or 'no fields'})",
    )
    changes["sources"] = _appended(spec.sources, data.get("sources", ())) + (f"user file: {path}",)
    changes["spec_source"] = SpecSource.USER
    return replace(spec, **changes)


def _appended(have: tuple[str, ...], more: Any) -> tuple[str, ...]:
    """``have`` and then the strings of ``more`` it does not hold yet (a copied devices --json entry
    repeats the table's notes and sources)."""
    return have + tuple(dict.fromkeys(x for x in more if x not in have))


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
    if "memory_bandwidth" in data and not is_positive_number(data["memory_bandwidth"]):
        raise fail("memory_bandwidth", f"must be a positive number of bytes/s, got {data['memory_bandwidth']!r}")
    for key in ("memory_gb", "memory_bytes"):
        if data.get(key) is not None and not is_positive_number(data[key]):
            raise fail(key, f"must be a positive number or null, got {data[key]!r}")
    if data.get("memory_gb") is not None and data.get("memory_bytes") is not None:
        from_gb = float(data["memory_gb"]) * GIB
        if abs(from_gb - float(data["memory_bytes"])) > _MEMORY_AGREEMENT * from_gb:
            raise DeviceSpecError(
                f"{path}: 'memory_gb' ({data['memory_gb']!r} GiB) and 'memory_bytes' "
                f"({data['memory_bytes']!r}) disagree; give one of them"
            )
    if "spec_source" in data and data["spec_source"] not in _SOURCES:
        raise fail("spec_source", f"must be one of {', '.join(sorted(_SOURCES))} (it is informational: "
                                  f"the result is 'user'), got {data['spec_source']!r}")
    if data.get("matched_from") is not None and not isinstance(data["matched_from"], str):
        raise fail("matched_from", f"must be a string or null, got {data['matched_from']!r}")
    if "interconnect_bandwidth" in data and data["interconnect_bandwidth"] is not None:
        if not is_positive_number(data["interconnect_bandwidth"]):
            value = data["interconnect_bandwidth"]
            raise fail("interconnect_bandwidth", f"must be a positive number of bytes/s or null, got {value!r}")
    for key in ("sm_count", "devices_per_package"):
        if key in data and not (key == "sm_count" and data[key] is None):
            value = data[key]
            if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                raise fail(key, f"must be a positive integer, got {value!r}")
    if "kind" in data and data["kind"] not in ("gpu", "cpu"):
        raise fail("kind", f"must be 'gpu' or 'cpu', got {data['kind']!r}")
    for key in ("name", "vendor", "interconnect", "base"):
        if key in data and not (isinstance(data[key], str) or (key == "interconnect" and data[key] is None)):
            raise fail(key, f"must be a string, got {data[key]!r}")
    for key in ("notes", "sources"):
        if key in data and not (
            isinstance(data[key], list) and all(isinstance(x, str) for x in data[key])
        ):
            raise fail(key, "must be a list of strings")
    if data.get("compute_capability") is not None:
        cc = data["compute_capability"]
        if not (isinstance(cc, list) and len(cc) == 2 and all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in cc)):
            raise fail("compute_capability", f"must be [major, minor], got {cc!r}")
