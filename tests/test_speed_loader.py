"""The fast loader gives exactly what the plain one gives: chunked parsing, parallel ranks, big traces.

No timings here (benchmarks/analyze_speed.py measures speed); only that the fast paths change
nothing: the chunked reader against a whole-file ``orjson.loads``, worker processes against a serial
loop, and the big-trace generator's copies against the trace they were made from.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import orjson
import pandas as pd
import pytest

from bwdiag.trace.events import Tabulator, tabulate
from bwdiag.trace.load import load_rank, load_traces
from bwdiag.trace.read import read_trace_file
from bwdiag.trace.stream import NotStreamable, stream_events
from tests.conftest import A100_NCCL, A100_TRAIN, H100_QWEN, REPO, shared_trace

TABLES = ("gpu", "ops", "runtime", "annotations", "modules")


def assert_same_tables(a, b) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.flows == b.flows
    assert a.t0_us == b.t0_us
    assert a.skipped == b.skipped
    assert a.unknown_categories == b.unknown_categories


@pytest.fixture
def forking(monkeypatch):
    """Let the loader fork its workers even though torch is loaded in this test process (other test
    modules import it; the workers only parse JSON), and count the pools it starts, so a test of the
    parallel path fails if the load quietly ran serially."""
    import bwdiag.trace.load as load_mod

    monkeypatch.setattr(load_mod, "forkable", lambda: True)
    started: list[int] = []
    real_pool = load_mod._pool

    def pool(jobs):
        started.append(jobs)
        return real_pool(jobs)

    monkeypatch.setattr(load_mod, "_pool", pool)
    return started


def streamed(path: Path, chunk_bytes: int):
    tab = Tabulator()
    meta = stream_events(path, tab.add, chunk_bytes=chunk_bytes)
    return meta, tab.finish()


@pytest.mark.parametrize("rel", [A100_TRAIN, A100_NCCL, H100_QWEN, "hta/call_stack/backward_thread.json",
                                 "tracelens/mi300/resnet_act_checkpoint.json.gz"])
def test_chunked_reader_gives_the_plain_tables(rel):
    """Chunks of 64 KiB (hundreds of cuts) give the tables and metadata of one whole-file parse.

    The tracelens H100 trace puts ``deviceProperties`` after ``traceEvents``: it must still be read.
    """
    path = shared_trace(rel)
    raw = read_trace_file(path)
    plain = tabulate(raw.events)
    meta, chunked = streamed(path, 64 << 10)
    assert_same_tables(plain, chunked)
    assert meta == raw.metadata
    assert list(meta) == list(raw.metadata)  # same key order as the document
    if rel == H100_QWEN:
        assert meta["deviceProperties"][0]["name"] == "NVIDIA H100 80GB HBM3"


def test_cuts_inside_strings_and_nested_objects_are_refused(tmp_path):
    """A ``},`` inside a name or a nested args object is no event boundary; the tables stay exact."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": 'aten::weird"},{"', "pid": 1, "tid": 1, "ts": 10 + i, "dur": 1,
         "args": {"External id": i, "nested": [{"a": 1}, {"b": [{"c": "},"}]}]}}
        for i in range(40)
    ]
    doc = {"schemaVersion": 1, "traceEvents": events, "deviceProperties": [{"id": 0, "name": "X"}]}
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    meta, chunked = streamed(path, 300)  # smaller than three events: cuts everywhere
    assert meta == {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "X"}]}
    assert list(chunked.ops["name"]) == ['aten::weird"},{"'] * 40
    assert list(chunked.ops["ext_id"]) == list(range(40))
    assert_same_tables(tabulate(events), chunked)


def test_bare_event_array_streams(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5 + i, "dur": 2,
               "args": {"correlation": i, "stream": 7, "device": 0}} for i in range(10)]
    path = tmp_path / "bare.json"
    path.write_bytes(json.dumps(events).encode())
    meta, chunked = streamed(path, 100)
    assert meta == {}
    assert list(chunked.gpu["correlation"]) == list(range(10))
    assert list(chunked.gpu["ts"]) == [float(i) for i in range(10)]  # relative to the first (5 µs)


@pytest.mark.parametrize("damage", ["truncated_gzip", "truncated_json", "nan", "not_a_trace"])
def test_damaged_files_fall_back_to_the_salvaging_reader(tmp_path, damage):
    """Anything the chunked reader cannot vouch for goes through read_trace_file: same tables, warnings."""
    src = shared_trace("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")
    data = gzip.decompress(src.read_bytes())
    path = tmp_path / "t.json"
    if damage == "truncated_gzip":
        path = tmp_path / "t.json.gz"
        path.write_bytes(gzip.compress(data)[: len(gzip.compress(data)) * 2 // 3])
    elif damage == "truncated_json":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "nan":
        path.write_bytes(data.replace(b'"dur": 1,', b'"dur": NaN,', 1))
    else:
        path.write_bytes(b'{"hello": "world"}')
    with pytest.raises(NotStreamable):
        stream_events(path, lambda events: None)
    if damage == "not_a_trace":
        from bwdiag.errors import TraceError

        with pytest.raises(TraceError):
            load_rank(path)
        return
    raw = read_trace_file(path)
    rank = load_rank(path)
    expected = tabulate(raw.events)
    assert len(rank.ops) == len(expected.ops) > 0
    assert all(w in rank.warnings for w in raw.warnings) and raw.warnings


def test_parallel_ranks_equal_serial(forking):
    """Worker processes load exactly what a serial loop loads, in the same rank order."""
    files = [shared_trace("hta/timeline_analysis/sampled_rank-0.json.gz"),
             shared_trace("hta/trace_filter/sampled_rank-1.json.gz"),
             shared_trace("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")]
    serial, w1 = load_traces(files, jobs=1)
    parallel, w2 = load_traces(files, jobs=2)
    assert forking == [2]
    assert w1 == w2
    assert [t.rank for t in serial] == [t.rank for t in parallel]
    for a, b in zip(serial, parallel):
        assert a.path == b.path and a.metadata == b.metadata and a.link_stats == b.link_stats
        assert_same_tables(a.tables, b.tables)


def test_bad_rank_among_good_ones_is_skipped_in_parallel(tmp_path, forking):
    good = shared_trace("hta/triton_example/triton_example.json.gz")
    bad = tmp_path / "rank1.json"
    bad.write_bytes(b"not json at all")
    traces, warnings = load_traces([good, bad], jobs=2)
    assert forking == [2]
    assert [t.path for t in traces] == [good]
    assert any("skipped unreadable rank file" in w and "rank1.json" in w for w in warnings)


def _generator():
    spec = importlib.util.spec_from_file_location("make_big_trace", REPO / "benchmarks" / "make_big_trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_trace_repeats_the_source_with_consistent_links(tmp_path):
    """Three shifted copies: three times the kernels, steps and links, each copy linked to itself."""
    src = shared_trace(A100_NCCL)
    gen = _generator()
    doc = gen.load(src)
    out = tmp_path / "big.json.gz"
    n = gen.write_trace(doc, 3, out, rank=5, world=8)
    original = load_rank(src)
    big = load_rank(out)
    body = sum(1 for e in doc["traceEvents"] if e.get("ph") != "M")
    assert n == len(doc["traceEvents"]) + 2 * body
    assert big.rank == 5 and big.metadata["distributedInfo"]["world_size"] == 8
    import re

    with gzip.open(out, "rb") as fh:  # HTA finds the rank with this regex on the raw text
        assert re.search(rb'"rank":\s+(\d+)', fh.read(4096)).group(1) == b"5"
    assert len(big.gpu) == 3 * len(original.gpu)
    assert big.link_stats.linked_pct == pytest.approx(original.link_stats.linked_pct)
    assert (big.gpu["link"].value_counts() == 3 * original.gpu["link"].value_counts()).all()
    # Every kernel's op is from its own copy: the op starts within the same copy's time span.
    span = original.gpu["end"].max() - min(original.gpu["ts"].min(), original.ops["ts"].min())
    linked = big.gpu[big.gpu["op"] >= 0]
    op_ts = big.ops["ts"].to_numpy()[linked["op"].to_numpy()]
    assert ((linked["ts"].to_numpy() - op_ts) < span).all()
    steps = big.tables.annotations["name"].str.startswith("ProfilerStep#")
    assert steps.sum() == 3 * original.tables.annotations["name"].str.startswith("ProfilerStep#").sum()


def test_parallel_chunks_of_one_file_equal_serial(monkeypatch, forking):
    """Chunks parsed by worker processes and merged give the serial tables (ids remapped)."""
    import bwdiag.trace.load as load_mod
    import bwdiag.trace.stream as stream_mod

    path = shared_trace(A100_TRAIN)
    serial = load_rank(path, jobs=1)
    monkeypatch.setattr(load_mod, "PARALLEL_MIN_BYTES", {"gzip": 0, "plain": 0})
    monkeypatch.setattr(stream_mod, "WORKER_CHUNK_BYTES", 256 << 10)  # ~100 chunks
    parallel = load_rank(path, jobs=3)
    assert forking == [2]  # two workers, and this process parses chunks too
    assert_same_tables(serial.tables, parallel.tables)
    assert serial.metadata == parallel.metadata and serial.link_stats == parallel.link_stats
    assert serial.ops["sig"].nunique() == parallel.ops["sig"].nunique()


class _NeverStarts:
    """An executor whose workers never pick anything up: every chunk must be parsed by the reader."""

    _max_workers = 1

    def __init__(self) -> None:
        self.submitted = 0

    def submit(self, fn, *args):
        from concurrent.futures import Future

        self.submitted += 1
        return Future()  # pending for ever; cancel() succeeds


def test_reader_parses_queued_chunks_itself_rather_than_wait():
    """Chunks no worker has started are taken back and parsed by the reading process, in file order."""
    path = shared_trace(A100_TRAIN)
    raw = read_trace_file(path)
    tab, pool = Tabulator(), _NeverStarts()
    meta = stream_events(path, tab.add, chunk_bytes=256 << 10, executor=pool, merge=tab.merge)
    assert pool.submitted > 50  # the 25 MB trace went out in 256 KiB chunks ...
    assert_same_tables(tabulate(raw.events), tab.finish())  # ... and every one came back parsed here
    assert meta == raw.metadata


def test_meanwhile_runs_once_while_workers_parse(monkeypatch, forking):
    """``meanwhile`` (the CLI's imports) runs exactly once during a parallel load, never in a serial one,
    and changes nothing in the tables."""
    import bwdiag.trace.load as load_mod

    path = shared_trace(A100_TRAIN)
    calls: list[int] = []
    serial = load_rank(path, jobs=1, meanwhile=lambda: calls.append(1))
    assert calls == []
    monkeypatch.setattr(load_mod, "PARALLEL_MIN_BYTES", {"gzip": 0, "plain": 0})
    parallel = load_rank(path, jobs=2, meanwhile=lambda: calls.append(1))
    assert calls == [1]
    assert_same_tables(serial.tables, parallel.tables)


def test_parsing_pauses_the_garbage_collector_and_restores_it():
    import gc

    from bwdiag.trace.stream import paused_gc

    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # an inner pause does not end the outer one
    assert gc.isenabled()
    seen = []
    tab = Tabulator()
    stream_events(shared_trace(A100_NCCL), tab.add, meanwhile=lambda: seen.append(gc.isenabled()))
    assert gc.isenabled() and seen == []  # serial: no meanwhile, collector back on


def test_cli_and_loader_import_without_pandas():
    """``bwdiag analyze`` forks its parsing workers before pandas is imported (its ~0.5 s import then
    overlaps the parse): the CLI, the pipeline and the trace loader must not import it themselves."""
    import subprocess
    import sys

    code = ("import sys, bwdiag.cli, bwdiag.pipeline, bwdiag.trace, bwdiag.trace.stream; "
            "print(sorted(m for m in ('pandas', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


_ORIGINALS: dict = {}


class _DiesInAWorker:
    """Stands in for a function sent to worker processes: in a worker it exits at once (as if killed
    for memory); in the test's own process it calls the original. Picklable: workers get it by name."""

    def __init__(self, original) -> None:
        import os

        self.key, self.parent, self.here = original.__qualname__, os.getpid(), 0
        _ORIGINALS[self.key] = original

    def __call__(self, *args):
        import os

        if os.getpid() != self.parent:
            os._exit(9)
        self.here += 1
        return _ORIGINALS[self.key](*args)


def test_a_worker_that_dies_mid_file_means_a_serial_parse_not_a_traceback(monkeypatch, forking):
    import bwdiag.trace.load as load_mod
    import bwdiag.trace.stream as stream_mod

    path = shared_trace(A100_TRAIN)
    serial = load_rank(path, jobs=1)
    monkeypatch.setattr(load_mod, "PARALLEL_MIN_BYTES", {"gzip": 0, "plain": 0})
    monkeypatch.setattr(stream_mod, "tabulate_chunk", _DiesInAWorker(stream_mod.tabulate_chunk))
    streams = []
    real_stream = load_mod.stream_events

    def spy(*args, **kwargs):
        streams.append(kwargs.get("executor") is not None)
        return real_stream(*args, **kwargs)

    monkeypatch.setattr(load_mod, "stream_events", spy)
    again = load_rank(path, jobs=3)
    assert forking == [2] and streams == [True, False]  # the parallel parse gave up, the serial one finished
    assert_same_tables(serial.tables, again.tables)


def test_a_worker_that_dies_on_a_rank_means_loading_the_rest_here(monkeypatch, forking):
    import bwdiag.trace.load as load_mod

    files = [shared_trace(A100_NCCL), shared_trace(A100_TRAIN)]
    serial, _ = load_traces(files, jobs=1)
    stand_in = _DiesInAWorker(load_mod._load_or_error)
    monkeypatch.setattr(load_mod, "_load_or_error", stand_in)
    again, _ = load_traces(files, jobs=2)
    assert forking == [2] and stand_in.here == 2  # both ranks were loaded in this process after the workers died
    assert [t.rank for t in again] == [t.rank for t in serial]
    for a, b in zip(serial, again):
        assert_same_tables(a.tables, b.tables)


def test_no_worker_processes_are_forked_once_torch_is_loaded(monkeypatch):
    """bwdiag run / bwdiag.profile analyse in the process that ran the user's torch code: forking it is
    unsafe (torch's and CUDA's threads), so files and chunks load here instead, with the same tables."""
    import sys
    import types

    import bwdiag.trace.load as load_mod

    path = shared_trace(A100_TRAIN)
    serial = load_rank(path, jobs=1)
    monkeypatch.setattr(load_mod, "PARALLEL_MIN_BYTES", {"gzip": 0, "plain": 0})
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch") or types.ModuleType("torch"))

    def no_pool(jobs):
        raise AssertionError("a process pool was started with torch loaded")

    monkeypatch.setattr(load_mod, "_pool", no_pool)
    again = load_rank(path, jobs=2)
    assert_same_tables(serial.tables, again.tables)
    traces, _ = load_traces([shared_trace(A100_NCCL), path], jobs=2)
    assert len(traces) == 2
