"""The report context from hand-built diagnoses: every number checked against hand arithmetic."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from bwdiag.diagnose.model import (
    AppliedFinding, CommFit, CompiledFacts, IdleBreakdown, IdleCauses, LaunchStats, RankWait,
    Straggler, SyncSite, WhatIf,
)
from bwdiag.report.context import build_context, kernel_records, projected_time
from tests.report_fixtures import (
    A100, ADD, COPY, GEMM, HOSTILE, HOSTILE_K, NCCL, TRITON, cpu_diagnosis, gpu_diagnosis,
)


def test_context_is_plain_json():
    ctx = build_context(gpu_diagnosis())
    assert json.loads(json.dumps(ctx, allow_nan=False)) == ctx


def test_verdict_time_bar_matches_breakdown():
    v = build_context(gpu_diagnosis())["verdict"]
    assert v["total_us"] == 20000.0
    assert [(b["key"], b["us"]) for b in v["bars"]] == [
        ("compute", 8000.0), ("memory", 4000.0), ("latency", 1000.0),
        ("communication", 3000.0), ("idle", 3000.0), ("unknown", 1000.0)]
    assert [b["pct"] for b in v["bars"]] == [40.0, 20.0, 5.0, 15.0, 15.0, 5.0]
    assert [b["label"] for b in v["bars"]][3] == "Exposed communication"
    assert v["dominant"] == "compute" and v["dominant_pct"] == 40.0
    assert v["step_us"] == 5000.0 and v["steps"] == 4


def test_top_findings_are_the_three_largest_savings():
    v = build_context(gpu_diagnosis())["verdict"]
    assert [f["saving_us"] for f in v["top_findings"]] == [3000.0, 2500.0, 2500.0]
    assert v["more_findings"] == 1


def test_verdict_shows_the_whatif_projection_per_step():
    # The what-if (findings/whatif.py, tested in test_findings_whatif) projects 12000 of 20000 µs;
    # the verdict scales it to the 5000 µs median step: 5000 × 12000/20000 = 3000 µs, 40 % saved.
    whatif = WhatIf(findings=(AppliedFinding("fusion", "f", 3000.0, 8000.0, True),), total_us=20000.0,
                    saved_us=8000.0, projected_us=12000.0, speedup=20000.0 / 12000.0)
    d = gpu_diagnosis(whatif=whatif)
    assert projected_time(d) == 12000.0 and d.whatif == whatif
    v = build_context(d)["verdict"]
    assert v["projected_us"] == 12000.0
    assert v["saving_pct"] == 40.0
    assert v["projected_step_us"] == 3000.0
    assert v["speedup"] == pytest.approx(20000 / 12000)


def test_the_verdict_never_projects_on_its_own():
    # Findings without the what-if's projection (a hand-made diagnosis): no second, simpler
    # projection is made up in the report.
    d = gpu_diagnosis(whatif=None)
    assert projected_time(d) is None
    assert build_context(d)["verdict"]["projected_us"] is None


def test_projection_from_findings_work_wins():
    whatif = WhatIf(findings=(AppliedFinding("fusion", "f", 3000.0, 5000.0, False),), total_us=20000.0,
                    saved_us=5000.0, projected_us=15000.0, speedup=20000.0 / 15000.0)
    d = gpu_diagnosis(whatif=whatif)
    assert d.projected_us == 15000.0
    assert build_context(d)["verdict"]["projected_us"] == 15000.0


def test_no_projection_without_findings():
    v = build_context(gpu_diagnosis(findings=()))["verdict"]
    assert v["projected_us"] is None and v["saving_pct"] is None and v["top_findings"] == []


def test_kernels_sorted_by_time_with_shares():
    ctx = build_context(gpu_diagnosis())
    names = [k["name"] for k in kernel_records(ctx)]
    assert names == [GEMM.name, ADD.name, NCCL.name, COPY.name, TRITON.name, HOSTILE]
    total = 8000 + 4000 + 3000 + 1000 + 600 + 400
    assert ctx["kernel_summary"]["total_us"] == total
    assert ctx["kernel_summary"]["launches"] == 100 + 40 + 8 + 10 + 200 + 4
    assert kernel_records(ctx)[0]["share_pct"] == pytest.approx(100 * 8000 / total)
    assert kernel_records(ctx)[0]["mean_us"] == 80.0


def test_roofline_points_are_groups_with_flops_and_bytes():
    ctx = build_context(gpu_diagnosis())
    r = ctx["roofline"]
    # GEMM, ADD and the hostile one have flops and bytes; COPY has bytes only (the bandwidth
    # strip), TRITON and NCCL none.
    assert [kernel_records(ctx)[p["k"]]["name"] for p in r["points"]] == [GEMM.name, ADD.name, HOSTILE]
    gemm = r["points"][0]
    assert gemm["x"] == pytest.approx(2 * 2048**3 / (3 * 2048 * 2048 * 2))  # 682.67 FLOP/B
    assert gemm["y"] == pytest.approx(2 * 2048**3 * 100 / 8000e-6)  # 2.147e14 FLOP/s
    assert gemm["b"] == "compute" and gemm["t"] == 8000.0
    reasons = {kernel_records(ctx)[u["k"]]["name"]: u["reason"] for u in r["unplotted"]}
    assert reasons == {
        NCCL.name: "communication (see Communication)",
        TRITON.name: "no FLOP or byte estimate",
    }
    assert r["unplotted_us"] == 3000.0 + 600.0
    assert [k["plotted"] for k in kernel_records(ctx)] == [True, True, False, True, False, True]


def test_byte_only_groups_are_on_the_bandwidth_strip():
    # COPY: 2 × 4 B × 16777216 elements × 10 calls in 1000 µs = 1.342 TB/s, 65.8 % of the
    # A100's 2.039 TB/s; it is 1000 of the table's 17000 µs (5.88 %).
    strip = build_context(gpu_diagnosis())["roofline"]["bandwidth"]
    ctx = build_context(gpu_diagnosis())
    (mark,) = strip["marks"]
    assert kernel_records(ctx)[mark["k"]]["name"] == COPY.name
    assert mark["x"] == pytest.approx(2 * 4 * 16777216 * 10 / 1000e-6)
    assert mark["pct"] == pytest.approx(100 * 2 * 4 * 16777216 * 10 / 1000e-6 / 2.039e12)
    assert mark["b"] == "memory" and mark["t"] == 1000.0
    assert strip["us"] == 1000.0
    assert strip["pct_of_kernel_time"] == pytest.approx(100 * 1000 / 17000)
    assert strip["memory_bandwidth"] == 2.039e12
    # Decades around the mark (1.34e12 / 1.5) and the roof (2.039e12 × 1.5 = 3.06e12).
    assert strip["extent"] == {"xmin": 1e11, "xmax": 1e13}


def test_zero_flop_groups_without_a_rate_stay_off_the_strip():
    # Bytes but no duration-derived rate: nothing to place, listed beside the chart instead.
    copy = dataclasses.replace(COPY, achieved_bytes_per_s=None)
    d = gpu_diagnosis()
    d = dataclasses.replace(d, kernels=tuple(copy if k.name == COPY.name else k for k in d.kernels))
    ctx = build_context(d)
    assert ctx["roofline"]["bandwidth"]["marks"] == [] and ctx["roofline"]["bandwidth"]["extent"] is None
    reasons = {kernel_records(ctx)[u["k"]]["name"]: u["reason"] for u in ctx["roofline"]["unplotted"]}
    assert reasons[COPY.name] == "moves bytes only (no FLOPs)"


def test_roofs_merge_equal_peaks_and_place_ridges():
    r = build_context(gpu_diagnosis())["roofline"]
    assert [(x["label"], x["flops"], x["vector"]) for x in r["roofs"]] == [
        ("int8", 624e12, False), ("bf16, fp16", 312e12, False), ("tf32", 156e12, False),
        ("fp64 · fp32 vector", 19.5e12, False)]
    assert r["roofs"][1]["ridge"] == pytest.approx(312e12 / 2.039e12)  # 153.0 FLOP/B
    assert r["memory_bandwidth"] == A100.memory_bandwidth
    # ADD sits at 1/12 FLOP/B -> xmin 10^floor(log10(1/24)) = 0.01; GEMM 682.7 -> xmax 10^4.
    e = r["extent"]
    assert (e["xmin"], e["xmax"]) == (0.01, 1e4)
    assert e["ymax"] == 1e15  # int8 roof 6.24e14 × 1.5 -> 10^15
    add_y = 16777216 * 40 / 4000e-6  # 1.68e11 FLOP/s
    assert e["ymin"] == 10.0 ** math.floor(math.log10(add_y / 2))


def test_vector_units_sharing_a_height_share_a_label():
    from tests.report_fixtures import A100

    dev = dataclasses.replace(A100, peak_flops={"bf16": 312e12},
                              vector_flops={"bf16": 39e12, "fp16": 39e12})
    r = build_context(gpu_diagnosis(device=dev))["roofline"]["roofs"]
    assert [(x["label"], x["vector"]) for x in r] == [("bf16", False), ("bf16, fp16 vector", True)]


def test_findings_link_evidence_to_kernels():
    f = build_context(gpu_diagnosis())["findings"]
    assert [x["title"] for x in f][:2] == [
        "Fuse the elementwise chain in model.layers.0", "Overlap the gradient all-reduce with backward"]
    assert f[0]["evidence"] == [{"text": ADD.name, "find": ADD.name},
                                {"text": "model.layers.0", "find": "model.layers.0"}]
    assert f[2]["evidence"] == [{"text": HOSTILE, "find": HOSTILE}]
    assert f[0]["kind_label"] == "Fusion"


def test_evidence_naming_a_module_prefix_links_but_sentences_do_not():
    finding = dataclasses.replace(
        gpu_diagnosis().findings[0],
        evidence=("model.layers", "model.layers.7", "48× a chain of 9 ops in model.layers"))
    f = build_context(gpu_diagnosis(findings=(finding,)))["findings"][0]
    # "model.layers" is inside "model.layers.0.mlp"; no module contains "model.layers.7".
    assert [e["find"] for e in f["evidence"]] == ["model.layers", None, None]


def test_communication_and_ranks():
    ctx = build_context(gpu_diagnosis())
    c = ctx["communication"]
    assert c["total_us"] == 3000.0 and c["exposed_us"] == 3000.0 and c["link_bandwidth"] == 300e9
    assert c["rows"][0]["busbw"] == 266.7e9
    ranks = ctx["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert [r["idle_pct"] for r in ranks] == [15.0, 25.0]
    assert [r["most_idle"] for r in ranks] == [False, True]
    assert [r["longest"] for r in ranks] == [False, False]  # equal totals: nobody is slowest
    # rank 1 bar: busy 15000 - exposed 2000 = 13000 -> 65%, exposed 10%, idle 25% of 20000.
    assert ranks[1]["bar"] == {"busy": 65.0, "communication": 10.0, "idle": 25.0}


def test_idle_breakdown_rendered_as_times_with_shares():
    idle = build_context(gpu_diagnosis())["idle"]
    assert idle["kind"] == "kv"
    # Mean of the two ranks' identical records; idle = 2000 + 600 + 400 µs, the parts' whole.
    assert [(r["label"], r["value"]) for r in idle["rows"]][:5] == [
        ("Idle", "3 ms"), ("Host wait", "2 ms"), ("Kernel wait", "600 µs"), ("Other", "400 µs"), ("Gaps", "50")]
    shares = [r["share"] for r in idle["rows"]][:5]
    assert shares[0] is None and shares[4] is None
    assert shares[1:4] == pytest.approx([66.6667, 20.0, 13.3333], rel=1e-5)


def test_sections_without_a_place_are_shown_generically():
    """compiled and step durations have no section of their own: display trees, in JSON order."""
    compiled = CompiledFacts(regions=3, residual_us=1500.0, residual_estimated_us=500.0, compile_spans=1,
                             compile_us=2.5e6)
    time = dataclasses.replace(gpu_diagnosis().time, step_ids=(7, 8), step_durations_us=(5000.0, 5200.0))
    ctx = build_context(gpu_diagnosis(compiled=compiled, time=time, whatif=None))
    assert [x["key"] for x in ctx["sections"]] == ["compiled", "step_durations_us"]
    rows = {r["label"]: r["value"] for r in ctx["sections"][0]["tree"]["rows"]}
    assert rows == {"Regions": "3", "Residual": "1.5 ms", "Residual estimated": "500 µs",
                    "Compile spans": "1", "Compile": "2.5 s", "Graph inputs": "0"}
    steps = ctx["sections"][1]["tree"]["rows"]
    assert [(r["label"], r["value"]) for r in steps] == [("7", "5 ms"), ("8", "5.2 ms")]
    # Step durations are times: each step's share of the two, 5000 / 10200 and 5200 / 10200.
    assert [r["share"] for r in steps] == pytest.approx([100 * 5000 / 10200, 100 * 5200 / 10200])


def test_timeline_idle_total_and_counts():
    """An idle record with the A100 training rank's numbers."""
    idle = IdleBreakdown(host_wait_us=13646.0, kernel_wait_us=2339.0, other_us=774669.0, gaps=7071,
                         causes=IdleCauses(sync_us=8393.0, data_loader_us=0.0),
                         top_syncs=(SyncSite("cudaDeviceSynchronize", 1, 158183.0),), rank=0)
    tree = build_context(gpu_diagnosis(idle_by_rank=(idle,)))["idle"]
    rows = {r["label"]: r for r in tree["rows"]}
    # 13,646 + 2,339 + 774,669 = 790,654: the whole, and the parts' shares of it.
    assert rows["Idle"]["value"] == "791 ms" and rows["Idle"]["share"] is None
    assert rows["Host wait"]["share"] == pytest.approx(100 * 13646 / 790654)
    assert rows["Other"]["share"] == pytest.approx(100 * 774669 / 790654)
    assert rows["Gaps"]["value"] == "7,071" and rows["Gaps"]["share"] is None
    assert [r["value"] for r in rows["Causes"]["child"]["rows"]] == ["8.39 ms", "0 µs", "0 µs", "0 µs"]  # sync, loader, pageable, sync in loader
    assert rows["Top syncs"]["child"]["rows"] == [["cudaDeviceSynchronize", "1", "158 ms"]]


def test_timeline_by_rank_straggler_and_fits():
    """Two ranks of the sampled 128-rank job (numbers from it)."""
    idle = (IdleBreakdown(host_wait_us=362945.0, kernel_wait_us=119.0, other_us=312127.0, gaps=930, rank=0),
            IdleBreakdown(host_wait_us=341109.0, kernel_wait_us=100.0, other_us=309927.0, gaps=826, rank=1))
    launch = tuple(LaunchStats(kernels=1154, short_kernels=379, short_kernel_us=2116.0, cpu_launch_us=us,
                               gpu_busy_us=606519.0, mean_queue_length=22.3, launch_bound=False, rank=r)
                   for r, us in ((0, 9475.0), (1, 8969.0)))
    straggler = Straggler(rank=1, made_others_wait_us=123301.0, arrived_last_calls=7, matched_calls=10,
                          wait_us_by_rank=(RankWait(0, 123301.0), RankWait(1, 106155.0)))
    fit = CommFit(collective="send_recv", alpha_us=45294.7, beta_bytes_per_s=7.4e10, n=12, sizes=6)
    d = gpu_diagnosis(idle_by_rank=idle, launch_by_rank=launch, straggler=straggler, comm_fits=(fit,), whatif=None)
    ctx = build_context(d)
    table = ctx["idle_by_rank"]
    assert table["columns"][:6] == ["Rank", "Idle", "Host wait", "Kernel wait", "Other", "Gaps"]
    # 362945 + 119 + 312127 = 675,191 µs; 341109 + 100 + 309927 = 651,136 µs.
    assert [row[:2] for row in table["rows"]] == [["0", "675 ms"], ["1", "651 ms"]]
    assert ctx["straggler"] == {"rank": 1, "made_others_wait_us": 123301.0,
                                "arrived_last_calls": 7, "matched_calls": 10}
    assert ctx["comm_fits"] == [{"collective": "send_recv", "alpha_us": 45294.7,
                                 "beta_bytes_per_s": 7.4e10, "n": 12, "sizes": 6}]
    assert [x["key"] for x in ctx["sections"]] == ["launch", "launch_by_rank"]  # the rest have their own place
    mean = {r["label"]: r["value"] for r in ctx["sections"][0]["tree"]["rows"]}
    # (9475 + 8969) / 2 = 9222 µs; the launch gap is the mean host wait, (362945 + 341109) / 2 = 352,027 µs.
    assert mean["CPU launch"] == "9.22 ms" and mean["Launch gap"] == "352 ms" and mean["Launch bound"] == "no"


def test_nan_and_inf_become_none():
    k = dataclasses.replace(GEMM, pct_of_ceiling=float("nan"), intensity=float("inf"))
    ctx = build_context(gpu_diagnosis(kernels=(k,)))
    assert kernel_records(ctx)[0]["pct_of_ceiling"] is None
    assert kernel_records(ctx)[0]["intensity"] is None
    assert ctx["roofline"]["points"] == []  # no finite intensity, so no point
    json.dumps(ctx, allow_nan=False)


def test_cpu_trace_without_kernels():
    ctx = build_context(cpu_diagnosis())
    assert kernel_records(ctx) == [] and ctx["roofline"]["points"] == []
    assert ctx["roofline"]["extent"] is None and ctx["roofline"]["roofs"] == []
    assert ctx["device"]["assumed"] is True
    assert ctx["verdict"]["projected_us"] is None
    assert ctx["multi_rank"] is False and ctx["ranks"] == []
    assert sum(b["us"] for b in ctx["verdict"]["bars"]) == 1500.0


def test_hostile_kernel_data_is_kept_verbatim():
    ctx = build_context(gpu_diagnosis())
    row = [k for k in kernel_records(ctx) if k["name"] == HOSTILE][0]
    assert row["op"] == HOSTILE_K.op and row["module"] == HOSTILE


def test_numpy_values_become_python_numbers_when_a_record_is_built():
    import numpy as np

    idle = IdleBreakdown(host_wait_us=np.float64(12.5), kernel_wait_us=np.float64("nan"), other_us=0.0,
                         gaps=np.int64(3), rank=0)
    assert type(idle.host_wait_us) is float and type(idle.gaps) is int
    ctx = build_context(gpu_diagnosis(idle_by_rank=(idle,)))
    json.dumps(ctx, allow_nan=False)
    rows = {r["label"]: r["value"] for r in ctx["idle"]["rows"]}
    assert rows["Host wait"] == "12.5 µs" and rows["Gaps"] == "3"


def test_groups_above_their_roof_are_flagged():
    fast = dataclasses.replace(ADD, pct_of_ceiling=250.0)
    noisy = dataclasses.replace(COPY, pct_of_ceiling=105.0)  # within timing noise
    r = build_context(gpu_diagnosis(kernels=(GEMM, fast, noisy)))["roofline"]
    assert r["above_roof"] == {"count": 1, "max_pct": 250.0}
    assert build_context(gpu_diagnosis())["roofline"]["above_roof"] == {"count": 0, "max_pct": None}


def test_a_multi_rank_step_says_it_is_the_median_over_ranks():
    # The fixture's two ranks: each rank's median step, then the median over the ranks (the heat strip's
    # median of all rank-steps can differ: a new-user run read 617 ms here and 615 ms there).
    from bwdiag.capture.report import summary_text

    d = gpu_diagnosis()
    assert build_context(d)["verdict"]["step_ranks"] == 2
    assert "complete steps per rank, the median over 2 ranks" in summary_text(d, width=200)
    one = dataclasses.replace(d, source=dataclasses.replace(d.source, ranks=(0,)))
    assert "per rank" not in summary_text(one, width=200)


def test_a_runner_up_within_the_step_noise_is_called_a_tie():
    # compute 8000 µs (40 %) vs memory 7900 µs (39.5 %) of 20000; steps 4.5–5.5 ms around 5 ms:
    # ±10 % noise, 10 % of a 40 % share = 4 points > the 0.5-point gap → a tie, said so.
    d = gpu_diagnosis()
    time = dataclasses.replace(d.time, by_bound={**d.time.by_bound, "memory": 7900.0, "unknown": 1100.0},
                               step_min_us=4500.0, step_max_us=5500.0)
    v = build_context(dataclasses.replace(d, time=time))["verdict"]
    assert v["dominant"] == "compute"
    assert "memory (39.5%) is within the run-to-run noise of it (40.0%; steps vary ±10%)" in v["headline"]
    # steady steps and a 20-point gap (the fixture: compute 40 %, memory 20 %): no qualifier
    steady = build_context(d)["verdict"]["headline"]
    assert steady == "Compute-bound: most time is in kernels limited by the FLOP/s ceiling"
    # A CPU-only trace says it in the host's words: ops, not kernels; no "device waits for the host".
    cpu = dataclasses.replace(d, source=dataclasses.replace(d.source, trace_kind="cpu"))
    assert build_context(cpu)["verdict"]["headline"] == "Compute-bound: most time is in ops limited by the CPU's FLOP/s ceiling"
    idle = dataclasses.replace(cpu, time=dataclasses.replace(d.time, by_bound={**d.time.by_bound, "idle": 15000.0}))
    assert build_context(idle)["verdict"]["headline"].startswith("Between ops: most of the time the main thread runs no op")


def test_compute_far_below_its_roof_is_called_overhead():
    # Both compute groups at 1 % of their roof: 100 % of compute time is under 5 % of it.
    slow = dataclasses.replace(GEMM, pct_of_ceiling=1.0)
    d = gpu_diagnosis(kernels=(slow, dataclasses.replace(slow, name="gemm2", total_us=1000.0), ADD))
    headline = build_context(d)["verdict"]["headline"]
    assert headline.startswith("Compute-bound")
    assert "yet 100% of that time runs at under 5% of its roof: per-op overhead" in headline
    # at 68.8 % of the roof (the fixture's GEMM) the headline stands alone
    assert "per-op overhead" not in build_context(gpu_diagnosis())["verdict"]["headline"]


# ------------------------------------------------------------------------- what-if, kernel table


def test_whatif_section_per_step():
    # WHATIF (report_fixtures) saves 8000 of 20000 µs; the median step is 5000 µs, so every window
    # figure is scaled by 5000/20000 = 0.25: 20000 → 12000 µs is step 5000 → 3000 µs, 1.67× faster.
    w = build_context(gpu_diagnosis())["whatif"]
    assert w["per_step"] and w["unit"] == "per step"
    assert (w["n"], w["of"]) == (4, 4)
    assert (w["before_us"], w["after_us"], w["saved_us"]) == (5000.0, 3000.0, 2000.0)
    assert w["saved_pct"] == 40.0 and w["speedup"] == pytest.approx(20000 / 12000)
    rows = w["rows"]
    assert [r["saving_us"] for r in rows] == [750.0, 625.0, 625.0, 125.0]  # 3000, 2500, 2500, 500 × 0.25
    assert [r["applied_us"] for r in rows] == [750.0, 625.0, 500.0, 125.0]  # the 2nd fusion: 2000 of 2500
    assert [r["applied_pct"] for r in rows] == [100.0, 100.0, 80.0, 100.0]
    assert [r["capped"] for r in rows] == [False, False, True, False]
    assert w["claimed_us"] == 2125.0 and w["capped"] == 1
    # Each row links to its card in the Findings list (sorted by saving, as the page shows them).
    assert [r["finding"] for r in rows] == [1, 2, 3, 4]
    assert [r["cap_reason"] is None for r in rows] == [True, True, False, True]
    assert rows[2]["cap_reason"].startswith("overlapping time")


def test_whatif_section_over_the_window_and_cap_reasons():
    # No complete steps: the window's own figures; the first finding capped can only have hit
    # its time class (nothing above it to overlap), a finding counted at 0 is used up.
    time = dataclasses.replace(gpu_diagnosis().time, steps=0, step_us=None)
    f = gpu_diagnosis().findings
    whatif = WhatIf(findings=(AppliedFinding("fusion", f[0].title, 3000.0, 1000.0, True),
                              AppliedFinding("overlap", f[1].title, 2500.0, 0.0, True)),
                    total_us=20000.0, saved_us=1000.0, projected_us=19000.0, speedup=20000 / 19000)
    w = build_context(gpu_diagnosis(time=time, whatif=whatif))["whatif"]
    assert not w["per_step"] and w["unit"] == "over the window"
    assert (w["before_us"], w["after_us"], w["saved_us"], w["claimed_us"]) == (20000.0, 19000.0, 1000.0, 5500.0)
    assert (w["n"], w["of"]) == (2, 4)  # the page says the other 2 are left out
    assert [r["applied_pct"] for r in w["rows"]] == [pytest.approx(100 / 3), 0.0]
    assert w["rows"][0]["cap_reason"].startswith("capped by the time class")
    assert w["rows"][1]["cap_reason"].startswith("nothing left to save")


def test_no_whatif_section_without_a_projection():
    assert build_context(gpu_diagnosis(whatif=None))["whatif"] is None
    ctx = build_context(gpu_diagnosis())
    assert "whatif" not in [x["key"] for x in ctx["sections"]]  # no raw dump beside it


def test_op_column_only_when_it_differs_from_the_name():
    assert build_context(gpu_diagnosis())["show_op_column"] is True  # ADD: aten::add under its kernel
    d = gpu_diagnosis()
    same = tuple(dataclasses.replace(k, op=k.name) for k in d.kernels)
    assert build_context(dataclasses.replace(d, kernels=same))["show_op_column"] is False
    assert build_context(cpu_diagnosis())["show_op_column"] is False
