"""The boundary of the diagnosis model: what a record may hold, and its walk to and from plain data.

Every record of :mod:`bwdiag.diagnose.model` is a frozen dataclass deriving from :class:`Record`.
When one is built (by the analysis or by :meth:`Record.from_dict`), its fields are brought to their
declared types once, here, and nowhere else:

* text fields hold ``str`` or ``None`` (pandas' NaN for "no module" becomes ``None``);
* optional numbers hold a finite number or ``None`` (NaN and ±inf become ``None``); numpy scalars
  become Python numbers;
* enum fields hold a member of their enum (a string value is looked up; a value this version does not
  know becomes the enum's fallback member, e.g. ``Bound.UNKNOWN``, else ``None`` in an optional field
  and an error in a required one);
* sequences are tuples.

So a :class:`Record` is JSON-ready as it stands: :meth:`Record.to_dict` only turns enums into their
values and tuples into lists. :meth:`Record.from_dict` is its inverse (``R.from_dict(r.to_dict()) ==
r``); keys it does not know are ignored (a newer file may add fields), a missing required key or a
value of the wrong type raises :class:`RecordError` naming where in the document it is.
"""

from __future__ import annotations

import dataclasses
import math
from enum import Enum
from typing import Any

#: Record classes and enums by the name their fields' annotations use.
_RECORDS: dict[str, type] = {}
_ENUMS: dict[str, tuple[type[Enum], Enum]] = {}


class RecordError(ValueError):
    """A plain-data document that does not describe a record: ``str(err)`` says where and why."""


def register_enum(enum: type[Enum], fallback: Enum | None) -> type[Enum]:
    """Let record fields annotated with ``enum``'s name hold its members. A value ``enum`` lacks
    becomes ``fallback``; without one it becomes ``None`` in an optional field and an error in a
    required one."""
    _ENUMS[enum.__name__] = (enum, fallback)
    return enum


class Record:
    """Base of the diagnosis records (see the module docstring)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _RECORDS[cls.__name__] = cls

    def __post_init__(self) -> None:
        for name, kind in _plan(type(self)):
            value = getattr(self, name)
            new = _clean(kind, value)
            if new is not value:
                object.__setattr__(self, name, new)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: nested records as dicts, enums as their values, tuples as lists."""
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: Any, where: str = ""):
        """The record ``data`` describes (the inverse of :meth:`to_dict`); unknown keys are ignored."""
        where = where or cls.__name__
        if not isinstance(data, dict):
            raise RecordError(f"{where}: expected an object, got {_kind_of(data)}")
        values = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise RecordError(f"{where}: '{f.name}' is missing")
                continue
            values[f.name] = _read(_kind(f.type), data[f.name], f"{where}.{f.name}")
        return cls(**values)


def plain(value: Any) -> Any:
    """Records to dicts, enums to values, tuples to lists (one walk, no copies of leaves)."""
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None:
        return value
    if isinstance(value, Record):
        return value.to_dict()
    if t is dict:
        return {(k.value if isinstance(k, Enum) else k): plain(v) for k, v in value.items()}
    if t is list or t is tuple:
        return [plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def mean_record(records):
    """The field-wise mean of same-kind records (one per rank): numbers averaged over all records
    (a missing one counts as 0), nested records averaged alike; flags, text, lists and a number the
    first record lacks taken from the first; ``rank`` unset. One record is returned as it is."""
    if len(records) == 1:
        return records[0]
    first, n = records[0], len(records)
    values = {}
    for f in dataclasses.fields(first):
        v = getattr(first, f.name)
        if f.name == "rank":
            values[f.name] = None
        elif isinstance(v, Record):
            values[f.name] = mean_record([getattr(r, f.name) for r in records])
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            values[f.name] = v  # as the first rank has it (None included)
        else:
            values[f.name] = sum(x for x in (getattr(r, f.name) for r in records) if x is not None) / n
    return type(first)(**values)


# ----------------------------------------------------------------------------- field kinds


@dataclasses.dataclass(frozen=True)
class _Kind:
    base: str  # "str" | "number" | "int" | "bool" | "any" | "enum" | "record" | "map" | "tuple"
    optional: bool
    of: Any = None  # enum / record class name, or the element _Kind of a tuple


_KINDS: dict[str, _Kind] = {}
_PLANS: dict[type, tuple[tuple[str, _Kind], ...]] = {}


def _kind(annotation: str) -> _Kind:
    kind = _KINDS.get(annotation)
    if kind is None:
        kind = _KINDS[annotation] = _parse(annotation)
    return kind


def _parse(text: str) -> _Kind:
    text = text.strip()
    optional = text.endswith("| None")
    core = text.removesuffix("| None").strip()
    if core.startswith("tuple[") and core.endswith(", ...]"):
        return _Kind("tuple", optional, _parse(core[6:-6]))
    if core.startswith("dict[str, float"):
        return _Kind("map", optional)
    if core.startswith("dict[") or core in ("Any", "dict"):
        return _Kind("any", optional)
    if core == "str":
        return _Kind("str", optional)
    if core == "float":
        return _Kind("number", optional)
    if core == "int":
        return _Kind("int", optional)
    if core == "bool":
        return _Kind("bool", optional)
    if core in _ENUMS:
        return _Kind("enum", optional, core)
    if core in _RECORDS:
        return _Kind("record", optional, core)
    raise TypeError(f"record field type {text!r} is not supported")


def _plan(cls: type) -> tuple[tuple[str, _Kind], ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = tuple(
            (f.name, k) for f in dataclasses.fields(cls)
            if (k := _kind(f.type)).base not in ("any", "bool", "record"))
    return plan


# ------------------------------------------------------------------ construction: the one cleaning


def _clean(kind: _Kind, value: Any) -> Any:
    base = kind.base
    if base == "number" or base == "int":
        return _clean_number(value, kind.optional)
    if base == "str":
        return _clean_text(value, kind.optional)
    if base == "enum":
        return _clean_enum(kind.of, value, kind.optional)
    if base == "tuple":
        if value is None:
            return None if kind.optional else ()
        inner = kind.of
        if inner.base == "str":
            return tuple(t for t in (_clean_text(v, True) for v in value) if t is not None)
        if inner.base in ("number", "int"):
            return tuple(_clean_number(v, True) for v in value)
        if inner.base == "enum":
            return tuple(_clean_enum(inner.of, v, False) for v in value)
        return value if type(value) is tuple else tuple(value)
    if base == "map":
        if value is None:
            return None if kind.optional else {}
        if all(type(v) is float and math.isfinite(v) for v in value.values()) and type(value) is dict:
            return value
        return {str(k): _clean_number(v, True) for k, v in value.items()}
    return value


def _clean_text(value: Any, optional: bool) -> str | None:
    if type(value) is str:
        return value
    if value is None or (isinstance(value, float) and value != value):  # pandas' NaN for "no module"
        return None if optional else ""
    return value.value if isinstance(value, Enum) else str(value)


def _clean_number(value: Any, optional: bool) -> Any:
    t = type(value)
    if t is int or value is None:
        return value
    if t is float:
        return value if math.isfinite(value) or not optional else None
    if isinstance(value, bool) or not hasattr(value, "__float__"):
        return value
    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if optional else value
    return value


def _clean_enum(name: str, value: Any, optional: bool) -> Any:
    enum, fallback = _ENUMS[name]
    if type(value) is enum or (value is None and optional):
        return value
    member = enum._value2member_map_.get(getattr(value, "value", value))
    if member is not None:
        return member
    if fallback is None and not optional:
        known = ", ".join(str(m.value) for m in enum)
        raise RecordError(f"{value!r} is not a {enum.__name__} ({known})")
    return fallback


# ------------------------------------------------------------------------------ from plain data


def _kind_of(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _read(kind: _Kind, value: Any, where: str) -> Any:
    if value is None:
        if kind.optional or kind.base in ("number", "any"):
            return None  # a non-optional number written as null was NaN
        raise RecordError(f"{where}: expected {_expected(kind)}, got null")
    base = kind.base
    ok = True
    if base == "str" or base == "enum":
        ok = isinstance(value, str)
    elif base == "number" or base == "int":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif base == "bool":
        ok = isinstance(value, bool)
    elif base == "record":
        return _RECORDS[kind.of].from_dict(value, where)
    elif base == "map":
        ok = isinstance(value, dict) and all(
            v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in value.values())
    elif base == "tuple":
        if not isinstance(value, list):
            raise RecordError(f"{where}: expected a list, got {_kind_of(value)}")
        return tuple(_read(kind.of, v, f"{where}[{i}]") for i, v in enumerate(value))
    if not ok:
        raise RecordError(f"{where}: expected {_expected(kind)}, got {_kind_of(value)}")
    return value


def _expected(kind: _Kind) -> str:
    return {"str": "a string", "enum": "a string", "number": "a number", "int": "a number",
            "bool": "a boolean", "map": "an object of numbers", "record": "an object",
            "tuple": "a list"}.get(kind.base, "a value")
