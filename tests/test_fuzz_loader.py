"""Property: any mutation of a real trace gives a diagnosis or a BwdiagError, never another exception.

The seed is ``tests/data/bad/reference_good.json.gz`` (the BERT H100 trace reduced by the corpus
script: 1,014 events, 61 GPU activities). Mutations: cut at a random offset, bytes overwritten or
inserted, fields deleted from events or from the metadata, field values replaced by arbitrary JSON
(NaN and ±Infinity included), all optionally gzipped and the gzip cut short. A diagnosis must also
render as strict JSON (no NaN, no 65-bit integers). Each example has a deadline, so a salvage loop
that runs away fails the test instead of hanging it.
"""

from __future__ import annotations

import gzip
import json
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bwdiag import pipeline
from bwdiag.diagnose.model import Diagnosis
from bwdiag.errors import BwdiagError
from bwdiag.report.json_out import render_json

SEED = Path(__file__).resolve().parent / "data" / "bad" / "reference_good.json.gz"
TEXT = gzip.decompress(SEED.read_bytes())
DOC = json.loads(TEXT)
N_EVENTS = len(DOC["traceEvents"])
FIELDS = ["ts", "dur", "args", "cat", "name", "ph", "pid", "tid", "id"]
ARG_FIELDS = ["correlation", "External id", "device", "stream", "grid", "Input Dims", "Input type",
              "Concrete Inputs", "Collective name", "Group size"]
META_KEYS = ["deviceProperties", "traceEvents", "schemaVersion", "baseTimeNanoseconds", "distributedInfo"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=6,
)


@st.composite
def mutated_trace(draw) -> bytes:
    kind = draw(st.sampled_from(["cut", "overwrite", "insert", "delete", "replace"]))
    if kind == "cut":
        data = TEXT[: draw(st.integers(0, len(TEXT)))]
    elif kind in ("overwrite", "insert"):
        buf = bytearray(TEXT)
        edits = draw(st.lists(st.tuples(st.integers(0, len(TEXT) - 1), st.binary(min_size=1, max_size=3)),
                              min_size=1, max_size=12))
        for pos, new in edits:
            if kind == "overwrite":
                buf[pos:pos + len(new)] = new
            else:
                buf[pos:pos] = new
        data = bytes(buf)
    else:
        doc = json.loads(TEXT)
        events = doc["traceEvents"]
        edits = draw(st.lists(st.tuples(st.integers(0, N_EVENTS - 1), st.sampled_from(FIELDS + ARG_FIELDS)),
                              min_size=1, max_size=40))
        for i, name in edits:
            ev = events[i]
            target = ev.get("args") if name in ARG_FIELDS else ev
            if not isinstance(target, dict):
                continue
            if kind == "delete":
                target.pop(name, None)
            else:
                target[name] = draw(json_values)
        for key in draw(st.lists(st.sampled_from(META_KEYS), max_size=2)):
            if kind == "delete":
                doc.pop(key, None)
            else:
                doc[key] = draw(json_values)
        data = json.dumps(doc, allow_nan=True).encode()  # NaN / Infinity tokens, as Python writes them
    if draw(st.booleans()):
        data = gzip.compress(data, compresslevel=1, mtime=0)
        if draw(st.booleans()):
            data = data[: draw(st.integers(0, len(data)))]
    return data


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    pipeline.analyze([SEED])  # imports (torch's flop registry …) before the first timed example
    return tmp_path_factory.mktemp("fuzz")


def test_reference_trace_loads_cleanly():
    d = pipeline.analyze([SEED])
    assert d.warnings == ()
    assert sum(k.count for k in d.kernels) == 61


# No shrinking: a failure is reported at once with its example (shrinking a 290 kB trace takes minutes).
@settings(max_examples=80, deadline=timedelta(seconds=8), database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=mutated_trace())
def test_mutated_trace_gives_diagnosis_or_bwdiag_error(scratch, data):
    path = scratch / "mutated.json"
    path.write_bytes(data)
    try:
        diagnosis = pipeline.analyze([path])
    except BwdiagError as err:
        message = str(err)
        assert message and "\n" not in message  # one line for the terminal
        return
    assert isinstance(diagnosis, Diagnosis)
    orjson.loads(render_json(diagnosis))  # strict JSON: NaN/inf would not parse


def test_cpu_ops_with_missing_or_text_thread_ids(scratch):
    """Found by this fuzz: a CPU-only trace whose tids mix None and text broke the findings' stream sort."""
    doc = json.loads(TEXT)
    gpu_side = ("kernel", "gpu_memcpy", "ac2g", "cuda_runtime", "cuda_driver")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in gpu_side]
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    ops[5]["tid"], ops[7]["tid"] = "x", None
    path = scratch / "cpu_odd_tids.json"
    path.write_text(json.dumps(doc))
    diagnosis = pipeline.analyze([path])
    assert diagnosis.source.trace_kind == "cpu"
    assert sum(k.count for k in diagnosis.kernels) > 0


def test_runtime_calls_with_a_missing_thread_id(scratch):
    """Found by this fuzz: a launch whose tid is missing (null, or no key) broke the what-if graph's host
    lanes (NaN + "@0")."""
    doc = json.loads(TEXT)
    launches = [e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"]
    assert len(launches) >= 2
    launches[0]["tid"] = None
    launches[1].pop("tid")
    path = scratch / "runtime_no_tid.json"
    path.write_text(json.dumps(doc))
    diagnosis = pipeline.analyze([path])
    assert diagnosis.source.trace_kind == "gpu"
    orjson.loads(render_json(diagnosis))
