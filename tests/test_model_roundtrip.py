"""``Diagnosis.from_dict(d.to_dict()) == d`` on every shared trace, and what from_dict does with
documents that are newer, older (``@1``) or damaged."""

from __future__ import annotations

import dataclasses
import json
import math

import orjson
import pytest

from benchmarks.compare_outputs import SHARED, shared_traces
from bwdiag.diagnose.model import (
    Bound,
    Category,
    Diagnosis,
    FindingKind,
    IdleBreakdown,
    KernelRow,
    LaunchStats,
    RecordError,
    Regime,
    SpecSource,
    Source,
    TraceKind,
)
from bwdiag.errors import BwdiagError
from bwdiag.report.json_out import read_diagnosis, render_json
from tests.conftest import REPO
from tests.report_fixtures import GEMM, gpu_diagnosis

SHARED_FILES = shared_traces()
#: Bundled traces that reach the sections no shared trace has: two ranks (idle_by_rank, straggler)
#: and torch.compile on CPU (compiled).
LOCAL = [REPO / "tests/data/gloo_straggler", REPO / "tests/data/cpu_compiled_mlp_train.json.gz",
         REPO / "sample_traces/ddp_gloo_cpu"]


def _analyse(path):
    from bwdiag.pipeline import analyze

    return analyze([str(path)])


def _round_trips(d: Diagnosis) -> None:
    assert Diagnosis.from_dict(d.to_dict()) == d
    back = Diagnosis.from_dict(orjson.loads(render_json(d)))  # through the bytes diagnosis.json holds
    assert back == d
    assert render_json(back) == render_json(d)


def test_the_shared_traces_are_there():
    if not SHARED.is_dir():
        pytest.skip(f"real traces not available at {SHARED}")
    assert len(SHARED_FILES) >= 18


@pytest.mark.parametrize("path", SHARED_FILES, ids=lambda p: str(p.relative_to(SHARED)))
def test_every_shared_trace_round_trips(path):
    _round_trips(_analyse(path))


def test_local_traces_cover_every_section():
    seen = set()
    for path in LOCAL:
        d = _analyse(path)
        _round_trips(d)
        seen |= {name for name in ("straggler", "compiled", "whatif") if getattr(d, name) is not None}
        if len(d.idle_by_rank) > 1:
            seen.add("idle_by_rank")
        if d.comm_fits:
            seen.add("comm_fits")
    assert seen >= {"straggler", "compiled", "whatif"}


def test_two_ranks_keep_their_rank_records():
    d = _analyse(REPO / "tests/data/gloo_straggler")
    assert d.straggler is not None and d.straggler.rank == 1
    assert [w.rank for w in d.straggler.wait_us_by_rank] == [0, 1]
    doc = d.to_dict()
    assert [w["rank"] for w in doc["straggler"]["wait_us_by_rank"]] == [0, 1]


# ----------------------------------------------------------------------- the model's boundary


def test_nan_becomes_none_and_strings_become_enums_when_built():
    k = dataclasses.replace(GEMM, pct_of_ceiling=float("nan"), intensity=float("inf"), module=float("nan"),
                            bound="memory", category="elementwise")
    assert k.pct_of_ceiling is None and k.intensity is None and k.module is None
    assert k.bound is Bound.MEMORY and k.category is Category.ELEMENTWISE
    assert f"{k.bound}/{k.category}" == "memory/elementwise"  # the enums print as their values
    assert KernelRow.from_dict({**k.to_dict(), "bound": "warp-drive"}).bound is Bound.UNKNOWN
    d = gpu_diagnosis()
    assert d.device.spec_source is SpecSource.TABLE and d.findings[0].kind is FindingKind.FUSION
    assert d.source.trace_kind is TraceKind.GPU and d.source.trace_kind == "gpu"
    assert d.to_dict()["findings"][0]["kind"] == "fusion"
    with pytest.raises(RecordError, match="'tpu' is not a TraceKind \\(gpu, cpu\\)"):
        Source(paths=(), ranks=(), trace_kind="tpu")  # no fallback: an unknown trace kind is an error
    assert dataclasses.replace(d.collectives[0], regime="bandwidth").regime is Regime.BANDWIDTH
    assert dataclasses.replace(d.collectives[0], regime="warp").regime is None  # unknown regime: unknown


def test_derived_views_come_from_the_rank_records():
    idle = (IdleBreakdown(host_wait_us=100.0, kernel_wait_us=10.0, other_us=0.0, gaps=3, rank=0),
            IdleBreakdown(host_wait_us=300.0, kernel_wait_us=30.0, other_us=6.0, gaps=4, rank=1))
    launch = tuple(LaunchStats(kernels=k, short_kernels=1, short_kernel_us=5.0, cpu_launch_us=9.0,
                               gpu_busy_us=50.0, mean_queue_length=q, launch_bound=False, rank=r)
                   for r, k, q in ((0, 10, None), (1, 20, 2.0)))
    d = gpu_diagnosis(idle_by_rank=idle, launch_by_rank=launch)
    assert d.idle.host_wait_us == 200.0 and d.idle.gaps == 3.5 and d.idle.rank is None
    assert d.idle.idle_us == pytest.approx((110 + 336) / 2)
    assert d.launch.kernels == 15.0
    assert d.launch.mean_queue_length is None  # as the first rank has it (no launches recorded)
    doc = d.to_dict()
    assert doc["idle"]["idle_us"] == pytest.approx(223.0) and "rank" not in doc["idle"]
    assert doc["launch"]["launch_gap_us"] == 200.0  # the mean host wait, not a second idle figure
    assert [r["launch_gap_us"] for r in doc["launch_by_rank"]] == [100.0, 300.0]
    _round_trips(d)


# --------------------------------------------------------------------- newer, older, damaged


def test_unknown_fields_of_a_newer_file_are_ignored():
    d = gpu_diagnosis()
    doc = d.to_dict()
    doc["energy"] = {"joules": 12.0}
    doc["kernels"][0]["occupancy_pct"] = 50.0
    doc["device"]["l2_bytes"] = 50e6
    assert Diagnosis.from_dict(doc) == d


def test_a_v1_file_is_read_with_its_extras_as_sections():
    """The ``@1`` layout, written out by hand: timeline facts under ``extras``, per-rank maps keyed
    by the rank as a string, step durations keyed by step id."""
    d = gpu_diagnosis(whatif=None)  # the what-if comes from the @1 extras below
    doc = d.to_dict()
    v1 = {k: v for k, v in doc.items() if k not in (
        "idle", "launch", "idle_by_rank", "launch_by_rank", "comm_fits", "comm_fit", "straggler", "compiled",
        "projected_us", "whatif")}
    v1["schema"] = "bwdiag/diagnosis@1"
    v1["time"] = {**doc["time"], "step_ids": [3, 4], "step_durations_us": None}
    del v1["time"]["step_durations_us"]
    facts = {"idle_us": 3000.0, "host_wait_us": 2000.0, "kernel_wait_us": 600.0, "other_us": 400.0, "gaps": 50,
             "causes": {"sync_us": 0.0, "data_loader_us": 0.0, "pageable_memcpy_us": 0.0},
             "pageable_memcpy_count": 0, "top_syncs": []}
    v1["extras"] = {"idle": facts, "idle_by_rank": {"0": facts, "1": facts},
                    "straggler": {"rank": 1, "made_others_wait_us": 7.0, "arrived_last_calls": 2,
                                  "matched_calls": 3, "wait_us_by_rank": {"0": 7.0, "1": 0.0}},
                    "comm_fits": {"all_reduce": {"collective": "all_reduce", "alpha_us": 20.0,
                                                 "beta_bytes_per_s": 1e11, "n": 9, "sizes": 3}},
                    "step_durations_us": {"3": 5000.0, "4": 5100.0},
                    "projected_us": 12000.0,
                    "whatif": {"findings": [{"kind": "fusion", "title": "t", "est_saving_us": 8000.0,
                                             "applied_us": 8000.0, "capped": False}],
                               "total_us": 20000.0, "saved_us": 8000.0, "projected_us": 12000.0, "speedup": 20 / 12}}
    got = Diagnosis.from_dict(v1)
    assert got.schema == "bwdiag/diagnosis@2"
    assert got.idle_by_rank == d.idle_by_rank  # the fixture's two identical rank records
    assert got.straggler.rank == 1 and [(w.rank, w.wait_us) for w in got.straggler.wait_us_by_rank] == [(0, 7.0), (1, 0.0)]
    assert got.comm_fit.alpha_us == 20.0 and got.comm_fit.n == 9
    assert got.time.step_durations_us == (5000.0, 5100.0)
    assert got.projected_us == 12000.0 and got.whatif.findings[0].kind is FindingKind.FUSION
    assert dataclasses.replace(got, straggler=None, comm_fits=(), whatif=None,
                               time=d.time) == d


@pytest.mark.parametrize("damage, where", [
    (lambda doc: doc["kernels"][1].__setitem__("total_us", "fast"), "diagnosis.kernels[1].total_us: expected a number"),
    (lambda doc: doc["time"].pop("total_us"), "diagnosis.time: 'total_us' is missing"),
    (lambda doc: doc.__setitem__("findings", {"kind": "fusion"}), "diagnosis.findings: expected a list"),
    (lambda doc: doc["idle_by_rank"][0].__setitem__("causes", [1, 2]), "diagnosis.idle_by_rank[0].causes: expected an object"),
    (lambda doc: doc.__setitem__("schema", "someone/else@1"), "schema 'someone/else@1' is not a bwdiag diagnosis"),
])
def test_a_damaged_document_names_where(damage, where, tmp_path):
    doc = gpu_diagnosis().to_dict()
    damage(doc)
    with pytest.raises(RecordError, match=None) as err:
        Diagnosis.from_dict(doc)
    assert where in str(err.value)
    path = tmp_path / "diagnosis.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BwdiagError) as err:
        read_diagnosis(path)
    message = str(err.value)
    assert message.startswith(f"{path}: not a bwdiag diagnosis: ") and where in message and "\n" not in message


@pytest.mark.parametrize("content, says", [
    (b'{"schema": "bwdiag/diagnosis@2", "source": {', "not valid JSON"),
    (b"\x1f\x8b\x08\x00garbage", "not valid JSON"),
    (b"[1, 2, 3]", "expected an object"),
    (b'{"traceEvents": []}', "schema None is not a bwdiag diagnosis"),
])
def test_a_file_that_is_not_a_diagnosis(content, says, tmp_path):
    path = tmp_path / "diagnosis.json"
    path.write_bytes(content)
    with pytest.raises(BwdiagError) as err:
        read_diagnosis(path)
    assert str(err.value).startswith(f"{path}: ") and says in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(BwdiagError, match="cannot be read"):
        read_diagnosis(tmp_path / "missing.json")


def test_text_fields_keep_none_and_numbers_stay_finite():
    s = Source(paths=("a", float("nan")), ranks=(0,), trace_kind="gpu", torch_version=float("nan"))
    assert s.paths == ("a",) and s.torch_version is None
    d = gpu_diagnosis(kernels=(dataclasses.replace(GEMM, pct_of_ceiling=float("nan")),))
    raw = render_json(d)
    assert b"NaN" not in raw
    assert all(v is None or math.isfinite(v) for v in orjson.loads(raw)["kernels"][0].values()
               if isinstance(v, float))
