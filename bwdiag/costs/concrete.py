"""Parse ``Concrete Inputs`` strings (``"1"``, ``"[1, 1]"``, ``"False"``, ``"0.125"``, ``""``)."""

from __future__ import annotations

_MISSING = object()


def parse_concrete(text: object) -> object:
    """The Python value of one ``Concrete Inputs`` entry; ``None`` for ``""`` or unparseable text.

    Ints stay ints, ``"0."`` and ``"1e-05"`` become floats, ``"True"``/``"False"`` bools,
    ``"[3, 3]"`` a list (nested lists too); any other text is returned as the stripped string.
    """
    if isinstance(text, (int, float, bool)) or text is None:
        return text
    if not isinstance(text, str):
        return None
    s = text.strip()
    if not s:
        return None
    value, rest = _parse(s, 0)
    if value is _MISSING or rest != len(s):
        return s
    return value


def _parse(s: str, i: int) -> tuple[object, int]:
    if s[i] == "[":
        items: list[object] = []
        i += 1
        while i < len(s) and s[i] == " ":
            i += 1
        if i < len(s) and s[i] == "]":
            return items, i + 1
        while i < len(s):
            v, i = _parse(s, i)
            if v is _MISSING:
                return _MISSING, i
            items.append(v)
            while i < len(s) and s[i] == " ":
                i += 1
            if i < len(s) and s[i] == ",":
                i += 1
                while i < len(s) and s[i] == " ":
                    i += 1
                continue
            if i < len(s) and s[i] == "]":
                return items, i + 1
            return _MISSING, i
        return _MISSING, i
    j = i
    while j < len(s) and s[j] not in ",]":
        j += 1
    return _atom(s[i:j].strip()), j


def _atom(tok: str) -> object:
    if tok == "True":
        return True
    if tok == "False":
        return False
    if tok in ("None", ""):
        return None
    try:
        return int(tok)
    except ValueError:
        pass
    try:
        return float(tok)
    except ValueError:
        return tok
