"""Issue 14: every view shows, and ranks by, the dependency graph's saving where a finding has one.

Hand-built cases where the rule's own estimate and the graph's re-timing disagree, so a view that
still read the rule's figure (or its order) fails: the verdict, the HTML page, the terminal summary,
``--summary-md``, the many-ranks merge (``reduce``), and ``add_findings`` itself on a timeline from
``tests/test_depgraph.py`` whose graph savings are worked out by hand. Older ``diagnosis.json``
files, without the graph fields, fall back to the rule's figures.
"""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import numpy as np
import pytest

from bwdiag.capture.report import summary_text
from bwdiag.diagnose import findings as findings_pkg
from bwdiag.diagnose import model
from bwdiag.diagnose.digest import RankFinding
from bwdiag.diagnose.findings import add_findings
from bwdiag.diagnose.findings.base import RuleResult
from bwdiag.diagnose.model import AppliedFinding, Diagnosis, Finding, TimeBreakdown, WhatIf
from bwdiag.diagnose.reduce import merge_findings, merge_whatif
from bwdiag.report.context import build_context
from bwdiag.report.html import render_html
from bwdiag.report.markdown import render_markdown
from bwdiag.units import fmt_time
from tests.report_fixtures import FINDINGS, gpu_diagnosis
from tests.test_depgraph import gpu_rank

# The fixture's window is 20 ms with 5 ms steps: per-step figures are window figures × 0.25.
SCALE = 5000.0 / 20000.0

# The fusion finding's rule says 3 ms over the window (750 µs per step), the graph 300 µs (75 µs per
# step): the GPU waits for the host around its kernels. The overlap finding: rule 2.5 ms, graph 2.4 ms
# (600 µs per step) — within 10 %, so no second line. Ranked by the graph: overlap (2.4 ms) first,
# then the hostile fusion (graph 1.2 ms), then fp8 (no graph figure: its rule's 500 µs), then the
# chain fusion (300 µs) — which the rule ranked first.
GRAPH = {FINDINGS[0].title: 300.0, FINDINGS[1].title: 2400.0, FINDINGS[2].title: 1200.0}


def _with_graph(f: Finding) -> Finding:
    g = GRAPH.get(f.title)
    return dataclasses.replace(f, est_saving_per_step_us=f.est_saving_us * SCALE, graph_saving_us=g,
                               graph_saving_per_step_us=None if g is None else g * SCALE)


def _graph_diagnosis() -> Diagnosis:
    """The report fixture with graph figures: findings stored in the order add_findings ranks them,
    the what-if applying them in that order (graph: 2400 + 1200 + 400 + 300 = 4300 µs saved together,
    20000 → 15700 µs; the subtraction's own figures are left as the fixture has them)."""
    found = sorted((_with_graph(f) for f in FINDINGS), key=lambda f: -f.saving_us)
    applied = {FINDINGS[1].title: 2400.0, FINDINGS[2].title: 1200.0, FINDINGS[0].title: 300.0,
               FINDINGS[3].title: 400.0}
    d = gpu_diagnosis()
    whatif = dataclasses.replace(
        d.whatif, findings=tuple(dataclasses.replace(a, graph_applied_us=applied[a.title])
                                 for a in sorted(d.whatif.findings, key=lambda a: [f.title for f in found].index(a.title))),
        graph_projected_us=15700.0, graph_saved_us=4300.0, graph_speedup=20000.0 / 15700.0)
    return dataclasses.replace(d, findings=tuple(found), whatif=whatif)


GRAPH_ORDER = [FINDINGS[1].title, FINDINGS[2].title, FINDINGS[3].title, FINDINGS[0].title]
RULE_ORDER = [f.title for f in FINDINGS]  # the fixture lists them by the rule's estimate


def test_finding_shows_the_graph_saving_and_falls_back_to_the_rule():
    f = _with_graph(FINDINGS[0])
    assert (f.saving_model, f.saving_us, f.saving_per_step_us) == ("graph", 300.0, 75.0)
    assert f.saving_pct == pytest.approx(100.0 * 300.0 / 20000.0)  # 15 % × 300 / 3000
    old = FINDINGS[3]  # no graph figure: the rule's
    assert (old.saving_model, old.saving_us, old.saving_pct) == ("rule", 500.0, 2.5)


def test_verdict_ranks_by_and_shows_the_graph_figures():
    v = build_context(_graph_diagnosis())["verdict"]
    assert [f["title"] for f in v["top_findings"]] == GRAPH_ORDER[:3]
    assert [f["saving_shown_us"] for f in v["top_findings"]] == [600.0, 300.0, 125.0]
    assert [f["saving_model"] for f in v["top_findings"]] == ["graph", "graph", "rule"]
    # the headline projection is the graph's: 15.7 ms of 20 ms, per step 5 ms × 0.785
    assert v["projected_us"] == 15700.0 and v["projected_model"] == "graph"
    assert v["projected_step_us"] == pytest.approx(3925.0)
    assert v["saving_pct"] == pytest.approx(21.5)


def test_html_ranks_by_the_graph_and_says_both_figures_where_they_differ():
    d = _graph_diagnosis()
    page = render_html(d)
    articles = re.findall(r'<article class="finding" id="finding-(\d+)">.*?<h3>(.*?)</h3>', page, re.S)
    assert [t for _, t in articles] == [t.replace("<", "&lt;").replace(">", "&gt;") for t in GRAPH_ORDER]
    assert re.search(r'id="kpi-projected">' + re.escape(fmt_time(3925.0)), page)
    notes = re.findall(r'<p class="models-note muted">(.*?)</p>', page)
    # the chain fusion (rule 750 µs, graph 75 µs per step) and the hostile one (625 vs 300 µs);
    # not the overlap (625 vs 600 µs: 4 % apart) nor fp8 (no graph figure)
    assert len(notes) == 2
    assert f"The rule&#39;s own estimate is {fmt_time(750.0)} per step" in notes[1]
    assert f"dependency graph (host order, launches, streams, syncs) {fmt_time(75.0)}" in notes[1]
    # the fixture's GPU idles 2 ms of 20 waiting for the host: 10 % of the window
    assert "likely because the GPU waits for the host (10% of the window)" in notes[1]
    # the what-if table: the graph's figures, its rows linking to the findings' new places
    ctx = build_context(d)["whatif"]
    assert ctx["model"] == "graph" and ctx["after_us"] == pytest.approx(3925.0)
    assert ctx["rule_after_us"] == pytest.approx(12000.0 * SCALE)
    assert [r["finding"] for r in ctx["rows"]] == [1, 2, 3, 4]
    assert [r["saving_us"] for r in ctx["rows"]] == [600.0, 300.0, 125.0, 75.0]
    assert [r["applied_us"] for r in ctx["rows"]] == [600.0, 300.0, 100.0, 75.0]
    assert [r["capped"] for r in ctx["rows"]] == [False, False, True, False]


def test_the_summary_says_when_the_findings_overlap():
    # The fixture's top three claim 12 + 6 + 2.5 = 20.5 % alone and the graph projects 21.5 %: they add
    # up, nothing said. Projected at 19 ms of 20 (5 %), the same three overlap: the summary says so.
    d = _graph_diagnosis()
    assert "The findings overlap" not in summary_text(d, width=200)
    d = dataclasses.replace(d, whatif=dataclasses.replace(d.whatif, graph_projected_us=19000.0,
                                                          graph_speedup=20000.0 / 19000.0))
    text = summary_text(d, width=200)
    assert "The findings overlap: alone the 3 above claim 20.5% of the step, together the projection counts 5.0%" in text


def test_a_projection_from_the_unprofiled_step_never_counts_the_profiler_as_saved():
    # The capture timed the steps unprofiled: the graph re-timed the 20 ms window to 12 ms with the
    # profiler's cost taken out of the host side (graph_base_us), and the same 4.3 ms of fixes leave
    # 7.7 ms. Per step (× 0.25): 3 ms unprofiled → 1.925 ms, 1.075 ms saved = 35.8 % — not the
    # 5 − 1.925 = 3.075 ms (61.5 %) that counting from the recorded step would claim.
    d = _graph_diagnosis()
    d = dataclasses.replace(d, whatif=dataclasses.replace(d.whatif, graph_base_us=12000.0, graph_projected_us=7700.0,
                                                          graph_speedup=12000.0 / 7700.0))
    assert d.whatif.shown_saved_us == pytest.approx(4300.0)
    ctx = build_context(d)["whatif"]
    assert ctx["from_unprofiled"] is True
    assert ctx["before_us"] == pytest.approx(3000.0) and ctx["after_us"] == pytest.approx(1925.0)
    assert ctx["saved_us"] == pytest.approx(1075.0) and ctx["saved_pct"] == pytest.approx(100 * 4300 / 12000)
    assert ctx["recorded_us"] == pytest.approx(5000.0)
    page = render_html(d)
    head = re.sub(r"<[^>]+>", "", re.search(r'id="whatif-head">(.*?)</p>', page, re.S).group(1))
    assert head == (f"If you fix the top 4 findings: step without the profiler {fmt_time(3000.0)} → "
                    f"{fmt_time(1925.0)} (1.56× faster)")
    assert f"together the graph saves {fmt_time(1075.0)} (35.8% of the step without the profiler" in page
    assert f"would give {fmt_time(3000.0)} from the recorded {fmt_time(5000.0)}." in page
    # The verdict (terminal, summary) says the same from the same start.
    v = build_context(d)["verdict"]
    assert v["projected_base_step_us"] == pytest.approx(3000.0) and v["saving_pct"] == pytest.approx(35.83, abs=0.01)


def test_a_cpu_projection_applies_the_recorded_shares_to_the_unprofiled_step():
    # A CPU trace: the profiler slows the ops too, so there is no host-only baseline; the step the
    # capture timed unprofiled (3 ms against the 5 ms recorded) gets the recorded shares: the graph
    # saves 4.3 ms of the 20 ms window (21.5 %) → 3 ms × (1 − 0.215) = 2.355 ms.
    d = _graph_diagnosis()
    d = dataclasses.replace(d, source=dataclasses.replace(d.source, trace_kind="cpu"),
                            time=dataclasses.replace(d.time, unprofiled_step_us=3000.0))
    v = build_context(d)["verdict"]
    assert v["projected_from"] == "shares" and v["projected_base_step_us"] == pytest.approx(3000.0)
    assert v["projected_step_us"] == pytest.approx(2355.0) and v["saving_pct"] == pytest.approx(21.5)
    text = summary_text(d, width=200)
    assert (f"Projected after fixes: {fmt_time(2355.0)} per step  (−21.5%, 1.27× faster)  from the unprofiled "
            f"{fmt_time(3000.0)}: the recorded step's shares applied to it") in text
    w = build_context(d)["whatif"]
    assert w["before_us"] == pytest.approx(5000.0) and w["after_us"] == pytest.approx(3925.0)
    assert w["unprofiled_before_us"] == pytest.approx(3000.0) and w["unprofiled_after_us"] == pytest.approx(2355.0)
    assert re.search(r'id="kpi-projected">' + re.escape(fmt_time(2355.0)), render_html(d))
    # The findings' per-step savings too, so that none reads larger than the step the script runs:
    # 600, 300, 125, 75 µs of the recorded 5 ms step → × 3/5 of the unprofiled 3 ms one (shares unchanged).
    assert [f["saving_shown_us"] for f in v["top_findings"]] == [pytest.approx(x) for x in (360.0, 180.0, 75.0)]
    assert [f["saving_shown_us"] for f in build_context(d)["findings"]] == [
        pytest.approx(x) for x in (360.0, 180.0, 75.0, 45.0)]
    assert f"{fmt_time(360.0)} per step" in text and "(12.0%)" in text
    # A GPU trace with the same unprofiled step but no baseline keeps the recorded step (its host
    # side is what the graph baseline would take the profiler out of); a baseline that differs from the
    # window only by a re-timing's rounding is no baseline: no "from the unprofiled" label.
    g = _graph_diagnosis()
    g = dataclasses.replace(g, time=dataclasses.replace(g.time, unprofiled_step_us=3000.0),
                            whatif=dataclasses.replace(g.whatif, graph_base_us=20000.0 * (1 + 1e-12)))
    v = build_context(g)["verdict"]
    assert v["projected_from"] is None and v["projected_base_step_us"] is None
    assert v["projected_step_us"] == pytest.approx(3925.0)
    assert "from the unprofiled" not in summary_text(g, width=200)
    assert build_context(g)["whatif"]["before_us"] == pytest.approx(5000.0)


def test_terminal_and_summary_md_rank_by_the_graph():
    d = _graph_diagnosis()
    text = summary_text(d, width=160)
    pos = [text.index(t) for t in GRAPH_ORDER[:3]]
    assert pos == sorted(pos)
    assert f"{fmt_time(600.0)} per step" in text and f"{fmt_time(300.0)} per step" in text
    assert f"rule's estimate {fmt_time(625.0)}" in text  # short second figure where they differ
    assert text.count("rule's estimate") == 1  # not for the overlap (4 % apart) nor fp8 (no graph)
    assert re.search(re.escape(fmt_time(3925.0)) + r" per step .*dependency graph", text)
    md = render_markdown(d)
    rows = [line for line in md.splitlines() if re.match(r"\| \d \|", line)]
    assert [r.split(" | ")[2] for r in rows] == [f"{fmt_time(x)} ({p})" for x, p in
                                                 [(600.0, "12.0%"), (300.0, "6.0%"), (125.0, "2.5%"), (75.0, "1.5%")]]
    assert f"**{fmt_time(3925.0)}** (−21.5%, 1.27× faster, dependency graph)" in md


def test_an_older_diagnosis_without_graph_fields_renders_with_the_rules_figures():
    doc = _graph_diagnosis().to_dict()
    for f in doc["findings"]:
        for key in ("graph_saving_us", "graph_saving_per_step_us"):
            del f[key]
    for key in ("graph_projected_us", "graph_saved_us", "graph_speedup"):
        del doc["whatif"][key]
    for a in doc["whatif"]["findings"]:
        del a["graph_applied_us"]
    d = Diagnosis.from_dict(doc)
    v = build_context(d)["verdict"]
    assert [f["title"] for f in v["top_findings"]] == RULE_ORDER[:3]  # re-ranked by the rule's
    assert [f["saving_shown_us"] for f in v["top_findings"]] == [750.0, 625.0, 625.0]
    assert v["projected_us"] == 12000.0 and v["projected_model"] == "rule"
    page = render_html(d)
    assert "models-note" not in page and 'id="kpi-projected">' + fmt_time(3000.0) in page
    assert f"**{fmt_time(3000.0)}** (−40.0%, 1.67× faster)" in render_markdown(d)


def test_the_switch_flips_every_view_back_to_the_rule(monkeypatch):
    monkeypatch.setattr(model, "SHOW_GRAPH_MODEL", False)
    d = _graph_diagnosis()
    v = build_context(d)["verdict"]
    assert [f["title"] for f in v["top_findings"]] == RULE_ORDER[:3]
    assert v["projected_us"] == 12000.0


# -- add_findings on a hand-built timeline (tests/test_depgraph.py's GPU-waits-on-host one) ---------
#
# A launch every 100 µs (10 µs call, 90 µs of Python); each kernel starts 15 µs after its call and
# runs 20 µs: the window is 15 → 435 = 420 µs, the GPU idle 80 of every 100.
#   A (fusion) claims 50 µs from halving the five kernels: each still starts when its launch
#     arrives, so only the last ends earlier: graph 10 µs.
#   B (host_bound) claims 30 µs of host time while the GPU idled: the cut (65 µs of each of the
#     four 90 µs gaps overlaps GPU idle, 260 µs scaled down to 30) moves every later launch up, the
#     last by all 30 µs, and no kernel queues (they are 20 µs, ≥ 72 µs apart): graph 30 µs.
# By the rule A (50) ranks first; by the graph B (30) does. Together: the last kernel starts 30 µs
# earlier and runs 10 µs: 40 µs saved — B adds 30, A then 10.


def _hand_built(monkeypatch):
    kernels = [(7, 100 * i + 15, 100 * i + 35, i) for i in range(5)]
    calls = [("cudaLaunchKernel", 100 * i, 100 * i + 10, i) for i in range(5)]
    rank = gpu_rank(kernels, calls)
    a = RuleResult(Finding("fusion", "A", 50.0, 0.0, (), "fix"), {0: np.arange(5)})
    b = RuleResult(Finding("host_bound", "B", 30.0, 0.0, (), "fix"), {}, 30.0)
    monkeypatch.setattr(findings_pkg, "run_rules", lambda ctx: [a, b])
    d = dataclasses.replace(gpu_diagnosis(), findings=(), whatif=None, time=TimeBreakdown(
        total_us=420.0, by_bound={"memory": 100.0, "idle": 320.0}, exposed_communication_us=0.0,
        communication_overlap_pct=0.0))
    return d, [rank]


def test_add_findings_ranks_and_projects_by_the_graph(monkeypatch):
    d, analyses = _hand_built(monkeypatch)
    results = []
    out = add_findings(d, analyses, results_out=results)
    assert [f.title for f in out.findings] == ["B", "A"]
    assert [r.title for r in results] == ["B", "A"]  # --annotated-trace's F1, F2 follow the same order
    assert [f.graph_saving_us for f in out.findings] == pytest.approx([30.0, 10.0])
    assert [f.est_saving_us for f in out.findings] == [30.0, 50.0]  # the rule's figures kept as written
    w = out.whatif
    assert [a.title for a in w.findings] == ["B", "A"]
    assert [a.graph_applied_us for a in w.findings] == pytest.approx([30.0, 10.0])
    assert w.graph_projected_us == pytest.approx(380.0) and out.shown_projected_us == pytest.approx(380.0)
    assert w.projected_us == pytest.approx(340.0)  # the subtraction: 30 idle + 50 memory
    ctx = build_context(out)
    assert ctx["findings"][1]["models_note"].startswith(
        f"The rule's own estimate is {fmt_time(50.0)} over the window; re-timed on the dependency graph")


def test_add_findings_keeps_the_rules_order_with_the_switch_off(monkeypatch):
    d, analyses = _hand_built(monkeypatch)
    monkeypatch.setattr(model, "SHOW_GRAPH_MODEL", False)
    out = add_findings(d, analyses)
    assert [f.title for f in out.findings] == ["A", "B"]
    assert [a.graph_applied_us for a in out.whatif.findings] == pytest.approx([10.0, 30.0])
    assert out.shown_projected_us == pytest.approx(340.0)


# -- the many-ranks merge ---------------------------------------------------------------------------


def test_reduce_merges_graph_savings_as_the_mean_over_ranks():
    # Two ranks of a 20 ms window with 5 ms steps. X: rank 0 rule 4000 / graph 400, rank 1 rule
    # 2000 / graph 200 → mean rule 3000, graph 300. Y: only on rank 1, rule 2000 / graph 1800 →
    # mean rule 1000, graph 900. By the rule X ranks first; by the graph Y does.
    def f(title, est, graph):
        # each rank's own share, of its own graph window (here 16 ms): the merge must not keep it
        return Finding("fusion", title, est, 100.0 * est / 20000.0, (), "fix", graph_saving_us=graph,
                       graph_saving_pct=100.0 * graph / 16000.0)

    def digest(rank, found, graph_projected=1.0):
        rfs = tuple(RankFinding(x, 0.0, x.est_saving_us, x.graph_saving_us) for x in found)
        return SimpleNamespace(rank=rank, findings=rfs, whatif=WhatIf((), 20000.0, 0.0, 20000.0, 1.0,
                                                                    graph_projected_us=graph_projected))

    digests = [digest(0, [f("X", 4000.0, 400.0)]), digest(1, [f("Y", 2000.0, 1800.0), f("X", 2000.0, 200.0)])]
    d = gpu_diagnosis()
    merged, members = merge_findings(d, digests)
    assert [m.title for m in merged] == ["Y", "X"]
    assert [(m.est_saving_us, m.graph_saving_us) for m in merged] == [(1000.0, 900.0), (3000.0, 300.0)]
    assert [m.graph_saving_per_step_us for m in merged] == [225.0, 75.0]
    # shares of the job's 20 ms window, as the per-step figures and the merged what-if take them:
    # 900 / 20000 = 4.5 %, 300 / 20000 = 1.5 % (225 and 75 µs of a 5 ms step)
    assert [m.graph_saving_pct for m in merged] == [4.5, 1.5]
    w = merge_whatif(d, merged, members, digests)
    assert [a.title for a in w.findings] == ["Y", "X"]
    assert [a.graph_applied_us for a in w.findings] == [900.0, 300.0]
    assert (w.graph_saved_us, w.graph_projected_us) == (1200.0, 18800.0)
    assert (w.saved_us, w.projected_us) == (4000.0, 16000.0)
    # a rank whose what-if has no graph: the job's what-if has none either (no half-graph figure)
    digests[0].whatif = WhatIf((), 20000.0, 0.0, 20000.0, 1.0)
    assert merge_whatif(d, merged, members, digests).graph_projected_us is None
