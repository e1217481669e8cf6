"""``--engine ray`` against the local engine: the same map and reduce, the same diagnosis.

One local Ray instance (2 CPUs, no dashboard) serves the whole module and is shut down in the
fixture's finaliser. The synthetic 32-rank job is written here: every rank runs two steps of one
GEMM (50 µs) and one NCCL all_reduce (100 µs), except rank 7, whose all_reduce takes 20 µs — it
arrives last at every call, so the others wait 80 µs each for it. Worked out by hand: 2 matched
calls × 31 waiting ranks × 80 µs = 4,960 µs that rank 7 made the others wait.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from bwdiag import pipeline
from bwdiag.diagnose.reduce import reduce
from bwdiag.engine import ray_engine
from bwdiag.engine.local import map_rank
from tests.conftest import A100_NCCL, missing_input, shared_trace
from tests.test_ceilings_host import real_record  # noqa: F401 - a fixture: a calibration file as calibrate writes it

REPO = Path(__file__).resolve().parents[1]
RANKS = 32
SLOW_ARRIVER = 7


def _rank_doc(rank: int, world: int, coll_us: float, mm_us: float = 50.0, steps: int = 2) -> dict:
    events, t, corr = [], 1000.0, 1
    for step in range(1, steps + 1):
        t0 = t
        for op, kernel, dur in (("aten::mm", "volta_sgemm_128x64_nn", mm_us),
                                ("c10d::allreduce_", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", coll_us)):
            events += [
                {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": t, "dur": 10,
                 "args": {"External id": corr}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 2,
                 "dur": 5, "args": {"correlation": corr, "External id": corr}},
                {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": t + 20, "dur": dur,
                 "args": {"device": 0, "stream": 7, "correlation": corr, "External id": corr}},
            ]
            t += 20 + dur + 5
            corr += 1
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": t0 - 1, "dur": t - t0 + 2, "args": {}})
        t += 10
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85e9,
                                  "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
            "traceEvents": events}


@pytest.fixture(autouse=True)
def _bounded():
    """No Ray test may hang the suite: each fails after 120 s (they take seconds)."""
    def expire(*_):
        raise TimeoutError("a Ray engine test ran past 120 s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(120)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def job32(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("job32")
    for r in range(RANKS):
        with gzip.open(folder / f"rank{r}.json.gz", "wt") as fh:
            json.dump(_rank_doc(r, RANKS, 20.0 if r == SLOW_ARRIVER else 100.0), fh)
    return folder


def test_findings_merged_across_ranks_save_the_mean(job32):
    """The rules run per rank; the job's finding saves the mean over ranks. Exposed all_reduce per
    rank: 2 calls × 100 µs with nothing else running (rank 7: 2 × 20 µs), so the overlap finding
    saves (31 × 200 + 40) / 32 = 195 µs over the window, and per step 195 × step ÷ window."""
    d = pipeline.analyze([job32])
    (overlap,) = [f for f in d.findings if f.kind == "overlap"]
    assert overlap.est_saving_us == pytest.approx((31 * 200 + 2 * 20) / 32)
    assert overlap.est_saving_per_step_us == pytest.approx(overlap.est_saving_us * d.time.step_us / d.time.total_us)
    assert overlap.evidence[-1].startswith(f"found on {RANKS} of {RANKS} ranks")
    assert d.whatif.findings[0].applied_us == pytest.approx(overlap.est_saving_us)


@pytest.fixture(scope="module")
def local_ray():
    try:
        import ray
    except ImportError:
        missing_input('Ray is not installed (pip install -e ".[test]" installs it)')
    # The workers inherit PYTHONPATH from the raylet: this checkout, and tests/ for _kills_rank3.
    path = os.pathsep.join([str(REPO), str(REPO / "tests")])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", path)
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def _same(paths) -> tuple:
    local = pipeline.analyze(paths)
    on_ray = pipeline.analyze(paths, engine="ray")
    assert on_ray.to_dict() == local.to_dict()
    return local, on_ray


def test_synthetic_32_ranks_same_on_both_engines(local_ray, job32):
    d, _ = _same([job32])
    assert d.source.ranks == tuple(range(RANKS))
    assert len(d.ranks) == RANKS
    s = d.straggler
    assert s.rank == SLOW_ARRIVER and s.matched_calls == 2
    assert s.made_others_wait_us == pytest.approx(2 * (RANKS - 1) * 80.0)
    # every rank: 2 GEMMs of 50 µs and 2 all_reduces (100 µs; rank 7: 20 µs)
    comm = {r.rank: r.communication_us for r in d.ranks}
    assert comm[SLOW_ARRIVER] == pytest.approx(40.0) and comm[0] == pytest.approx(200.0)


def test_shared_multi_rank_traces_same_on_both_engines(local_ray):
    two = [shared_trace("hta/timeline_analysis/sampled_rank-0.json.gz"),
           shared_trace("hta/trace_filter/sampled_rank-1.json.gz")]
    d, _ = _same(two)
    assert len(d.ranks) == 2
    gloo = REPO / "tests/data/gloo_straggler"
    d, _ = _same([gloo])
    assert d.straggler is not None and d.straggler.rank == 1  # the script slows rank 1 down
    _same([shared_trace(A100_NCCL)])


def _kills_rank3(path: Path, **kwargs):
    if path.name == "rank3.json.gz":
        os._exit(1)  # the worker dies mid-task, as a kill for memory would end it
    return map_rank(path, **kwargs)


def test_damaged_rank_and_dead_worker_are_missing_and_the_rest_is_diagnosed(local_ray, job32, tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for r in range(8):
        (folder / f"rank{r}.json.gz").write_bytes((job32 / f"rank{r}.json.gz").read_bytes())
    (folder / "rank5.json.gz").write_bytes(b"\x1f\x8b not a gzip stream at all")
    files = sorted(folder.iterdir())
    maps, missing = ray_engine.run(files, work=_kills_rank3)
    by_name = {m.path.name: m.reason for m in missing}
    assert set(by_name) == {"rank3.json.gz", "rank5.json.gz"}
    assert "worker died" in by_name["rank3.json.gz"]
    assert "rank5.json.gz" in by_name["rank5.json.gz"]
    d, _ = reduce(maps, [m.reason for m in missing])
    assert d.source.ranks == (0, 1, 2, 4, 6, 7)
    assert sum("rank3.json.gz" in w and "worker died" in w for w in d.warnings) == 1
    assert sum("rank5.json.gz" in w for w in d.warnings) == 1
    # rank 7 is still the one the other 5 wait for: 2 calls × 5 ranks × 80 µs
    assert d.straggler.rank == SLOW_ARRIVER
    assert d.straggler.made_others_wait_us == pytest.approx(2 * 5 * 80.0)


def test_engine_ray_without_ray_fails_in_one_line(monkeypatch, tmp_path, job32):
    from click.testing import CliRunner

    from bwdiag.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    res = CliRunner().invoke(main, ["analyze", str(job32), "--engine", "ray", "-o", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert 'pip install "bwdiag[ray]"' in res.output
    assert not (tmp_path / "out").exists()



def test_ray_ranks_are_placed_against_the_drivers_calibration(local_ray, real_record, tmp_path, monkeypatch):
    # The Ray workers started with another environment (another cache, on a cluster another node's):
    # the calibration this analysis reads, in this test's private cache, must reach them too.
    from tests.test_ceilings_host import BANDWIDTH, FP32, _cpu_trace_here, _write_calibration

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    _write_calibration(real_record, BANDWIDTH, FP32, "2026-01-02T03:04:05+00:00")
    trace = _cpu_trace_here(tmp_path / "here.json")
    local, on_ray = _same([trace])
    assert str(on_ray.device.spec_source) == "calibrated" and on_ray.device.memory_bandwidth == BANDWIDTH
