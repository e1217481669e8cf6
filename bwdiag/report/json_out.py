"""``diagnosis.json``: the machine interface (CI, notebooks, diffing), written and read back."""

from __future__ import annotations

from pathlib import Path

import orjson

from bwdiag.diagnose.model import Diagnosis, RecordError
from bwdiag.errors import BwdiagError


def render_json(diagnosis: Diagnosis) -> bytes:
    """``diagnosis.to_dict()`` as indented UTF-8 JSON with a final newline.

    The model holds no NaN or infinity (records turn them into ``None`` when they are built), so
    every JSON parser reads the file.
    """
    option = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    return orjson.dumps(diagnosis.to_dict(), option=option) + b"\n"


def read_diagnosis(path: str | Path) -> Diagnosis:
    """The :class:`Diagnosis` a ``diagnosis.json`` written by bwdiag describes (schema ``@2`` or
    ``@1``); fields a newer bwdiag added are ignored.

    Raises :class:`BwdiagError` (one line naming the file) for a file that cannot be read, is not
    JSON, or is not a bwdiag diagnosis.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise BwdiagError(f"{path}: cannot be read ({err.strerror or err})") from None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise BwdiagError(f"{path}: not valid JSON ({err}); is it a diagnosis.json written by bwdiag?") from None
    try:
        return Diagnosis.from_dict(doc)
    except (RecordError, ValueError, TypeError) as err:  # RecordError says where; the others are damage too
        raise BwdiagError(f"{path}: not a bwdiag diagnosis: {err}") from None
