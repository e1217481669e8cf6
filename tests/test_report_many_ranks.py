"""The report at many ranks: one page under 5 MB at 1024 ranks, per-rank rows folded into
distributions, the slowest ranks and why, and a rank × step heat strip; diagnosis.json keeps every
per-rank row. Expected figures are worked out here from how the inputs were built."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from bwdiag.diagnose.model import CollectiveRow, Diagnosis, RankSummary
from bwdiag.report.context import build_context, kernel_records
from bwdiag.report.html import render_html
from bwdiag.report.json_out import render_json
from bwdiag.report.many_ranks import RANK_DETAIL_MAX, fold_warnings, quantile
from tests.many_rank_traces import write_job
from tests.report_fixtures import gpu_diagnosis

N = 1024
SLOW = 700  # the rank made slow: 3 ms more compute in step 3


def _step_us(r: int, s: int) -> float:
    return 5000.0 + r + (3000.0 if (r == SLOW and s == 3) else 0.0)


def _scale(r: int) -> float:
    return 1.0 + (r % 7) / 10.0


@pytest.fixture(scope="module")
def big() -> Diagnosis:
    """The two-rank fixture spread over 1024 ranks: each rank's kernel groups take ``_scale(r)``
    times the fixture's time, its steps ``_step_us``; one all-reduce row per rank."""
    base = gpu_diagnosis()
    kernels = tuple(dataclasses.replace(k, rank=r, total_us=k.total_us * _scale(r))
                    for r in range(N) for k in base.kernels)
    coll = base.collectives[0]
    collectives = tuple(dataclasses.replace(coll, rank=r, total_us=1000.0 + r, exposed_us=500.0)
                        for r in range(N))
    ranks = tuple(RankSummary(rank=r, total_us=20000.0, busy_us=15000.0 + (3000.0 if r == SLOW else 0.0),
                              compute_us=12000.0 + (3000.0 if r == SLOW else 0.0), communication_us=3000.0,
                              exposed_communication_us=2000.0, idle_us=5000.0 - (3000.0 if r == SLOW else 0.0),
                              kernels=362, step_ids=(1, 2, 3),
                              step_durations_us=tuple(_step_us(r, s) for s in (1, 2, 3)))
                  for r in range(N))
    warnings = tuple(f"rank{r}.json.gz: {r + 10} events have args of the wrong form" for r in range(N))
    return dataclasses.replace(
        base, kernels=kernels, collectives=collectives, ranks=ranks, warnings=warnings,
        source=dataclasses.replace(base.source, ranks=tuple(range(N)),
                                   paths=tuple(f"traces/rank{r}.json.gz" for r in range(N))),
        idle_by_rank=tuple(dataclasses.replace(base.idle_by_rank[0], rank=r) for r in range(N)))


def test_kernel_rows_merge_across_ranks_with_summed_time(big):
    base = gpu_diagnosis()
    ctx = build_context(big)
    assert ctx["ranks_aggregated"] and ctx["rank_count"] == N
    rows = {(r["name"], r["shapes"]): r for r in kernel_records(ctx)}
    assert len(rows) == len(base.kernels)  # one row per group, not 1024 × 6
    scale_sum = sum(1.0 + (r % 7) / 10.0 for r in range(N))  # 1024 + (146 full weeks·2.1 + 2 left·0.1)
    assert scale_sum == pytest.approx(1024 + 146 * 2.1 + 0.1)
    for k in base.kernels:
        row = rows[(k.name, k.shapes)]
        assert row["ranks"] == N and row["count"] == N * k.count
        assert row["total_us"] == pytest.approx(k.total_us * scale_sum)
        assert row["rank_min_us"] == pytest.approx(k.total_us) and row["rank_max_us"] == pytest.approx(k.total_us * 1.6)
        if k.flops:  # same FLOPs per rank, summed, over the summed time
            assert row["achieved_flops_per_s"] == pytest.approx(N * k.flops / (k.total_us * scale_sum * 1e-6))
            # the fixture's % of ceiling scales as 1/time per rank: the time-weighted mean is the same per rank
            assert row["pct_of_ceiling"] == pytest.approx(k.pct_of_ceiling)


def test_collectives_fold_to_one_row_per_kind_with_time_per_rank(big):
    (row,) = build_context(big)["communication"]["rows"]
    assert row["ranks"] == N and row["count"] == N * 8
    assert row["total_us"] == pytest.approx(1000.0 + (N - 1) / 2)  # mean of 1000 + r
    assert (row["rank_min_us"], row["rank_max_us"], row["slowest_rank"]) == (1000.0, 1000.0 + N - 1, N - 1)
    assert row["exposed_us"] == pytest.approx(500.0)


def test_heat_strip_slowest_ranks_and_distributions(big):
    ctx = build_context(big)
    hs = ctx["heat_strip"]
    assert hs["ranks"] == list(range(N)) and hs["steps"] == [1, 2, 3]
    assert hs["values"][SLOW] == [5700.0, 5700.0, 8700.0] and hs["values"][3] == [5003.0] * 3
    assert hs["slowest"] == {"rank": SLOW, "step": 3, "us": 8700.0}
    assert hs["median_us"] == pytest.approx(float(np.median([_step_us(r, s) for r in range(N) for s in (1, 2, 3)])))
    slow = ctx["slowest_ranks"]
    assert slow["by"] == "median step"
    # median steps are 5000 + r for every rank (the slow rank's step 3 does not move its median)
    assert [r["rank"] for r in slow["rows"]] == list(range(N - 1, N - 11, -1))
    dist = {r["label"]: r for r in ctx["rank_distributions"]["rows"]}
    compute = [12000.0] * N
    compute[SLOW] = 15000.0
    assert dist["Compute"]["quantiles"] == [pytest.approx(float(np.percentile(compute, q))) for q in (0, 25, 50, 75, 100)]
    assert dist["Compute"]["most_rank"] == SLOW and dist["Idle"]["least_rank"] == SLOW
    assert sum(ctx["rank_distributions"]["histogram"]["counts"]) == N
    assert ctx["ranks"] == [] and ctx["idle_by_rank"] is None


def test_slowest_rank_names_its_compute():
    """Three ranks over the detail limit, one with 3 ms more compute and a longer median step."""
    base = gpu_diagnosis()
    n = RANK_DETAIL_MAX + 1
    ranks = tuple(RankSummary(rank=r, total_us=20000.0, busy_us=15000.0, compute_us=12000.0 + (3000.0 if r == 5 else 0),
                              communication_us=3000.0, exposed_communication_us=2000.0, idle_us=5000.0, kernels=1,
                              step_ids=(1,), step_durations_us=(5000.0 + (3000.0 if r == 5 else 0),))
                  for r in range(n))
    d = dataclasses.replace(base, ranks=ranks, source=dataclasses.replace(base.source, ranks=tuple(range(n))))
    first = build_context(d)["slowest_ranks"]["rows"][0]
    assert first["rank"] == 5 and first["value_us"] == 8000.0 and first["vs_median_pct"] == pytest.approx(60.0)
    assert first["why"].startswith("compute 15 ms vs 12 ms on the median rank (+3 ms)")


def test_page_stays_under_5_mb_and_json_keeps_every_row(big):
    html = render_html(big).encode()
    assert len(html) < 5_000_000
    doc = json.loads(render_json(big))
    assert len(doc["ranks"]) == N and doc["ranks"][SLOW]["step_durations_us"] == [5700.0, 5700.0, 8700.0]
    assert len(doc["kernels"]) == N * len(gpu_diagnosis().kernels) and len(doc["collectives"]) == N
    assert len(doc["idle_by_rank"]) == N and len(doc["warnings"]) == N
    assert Diagnosis.from_dict(doc) == big
    # the page folds the 1024 per-file warnings into one line that says how many files
    assert b"and 1,023 more files with this warning" in html


def test_few_ranks_keep_their_rows():
    d = gpu_diagnosis()
    ctx = build_context(d)
    assert not ctx["ranks_aggregated"] and len(ctx["ranks"]) == 2 and ctx["rank_distributions"] is None
    assert len(kernel_records(ctx)) == len(d.kernels)


def test_fold_warnings_keeps_distinct_messages():
    ws = ["rank1.json.gz: 12 events bad", "rank2.json.gz: 13 events bad", "device assumed", "rank3.json.gz: other"]
    assert fold_warnings(ws) == [
        "rank1.json.gz: 12 events bad (and 1 more file with this warning, their figures differing; "
        "all of them are in diagnosis.json)", "device assumed", "rank3.json.gz: other"]


def test_quantile_matches_numpy():
    vals = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6]
    for q in (0, 10, 25, 50, 75, 90, 100):
        assert quantile(vals, q) == pytest.approx(float(np.percentile(vals, q)))


def test_real_analysis_of_40_rank_files(tmp_path):
    """A real analysis of 40 rank files (over the detail limit): the heat strip holds each rank's
    steps as the files were written, the slowest rank is the one built slow, and the page is small."""
    from bwdiag.pipeline import analyze

    n = 40
    write_job(tmp_path / "job", n, step_us=lambda r, s: 1000.0 + 10 * r + (900.0 if (r == 13 and s == 2) else 0.0),
              kernel_us=lambda r: 300.0 + (200.0 if r == 13 else 0.0))
    d = analyze([tmp_path / "job"])
    assert d.source.ranks == tuple(range(n))
    ctx = build_context(d)
    hs = ctx["heat_strip"]
    assert hs["ranks"] == list(range(n)) and hs["steps"] == [1, 2, 3]
    for r in range(n):
        assert hs["values"][r] == [1000.0 + 10 * r, 1000.0 + 10 * r + (900.0 if r == 13 else 0.0), 1000.0 + 10 * r]
    assert hs["slowest"] == {"rank": 13, "step": 2, "us": 2030.0}
    # by median step the last ranks are slowest (1000 + 10 r); rank 13's extra GEMM time is its compute
    slow = ctx["slowest_ranks"]["rows"]
    assert [r["rank"] for r in slow[:3]] == [39, 38, 37]
    dist = {r["label"]: r for r in ctx["rank_distributions"]["rows"]}
    assert dist["Compute"]["most_rank"] == 13
    assert dist["Compute"]["quantiles"][-1] == pytest.approx(3 * 500.0) and dist["Compute"]["quantiles"][0] == pytest.approx(900.0)
    (gemm,) = [r for r in kernel_records(ctx) if r["name"].startswith("ampere")]
    assert gemm["ranks"] == n and gemm["count"] == 3 * n
    assert gemm["total_us"] == pytest.approx(3 * (300.0 * n + 200.0))
    assert len(render_html(d).encode()) < 1_000_000
