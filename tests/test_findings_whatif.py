"""The what-if projection and the rules' behaviour when evidence (or a timeline fact) is missing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bwdiag.diagnose.findings import RULES, add_findings
from bwdiag.diagnose.findings.base import RuleContext
from bwdiag.diagnose.findings.whatif import project
from bwdiag.diagnose.model import FindingKind
from tests.conftest import A100_TRAIN, H100_BERT, H100_QWEN, shared_trace
from tests.findings_helpers import DATA, analysed, by_kind


def _ctx(rel_or_path):
    d, analyses = analysed(rel_or_path)
    return RuleContext(dataclasses.replace(d, findings=(), whatif=None), analyses)


def test_the_same_kernels_are_never_saved_twice():
    ctx = _ctx(shared_trace(H100_QWEN))
    acts = ctx.analyses[0].activities
    rows = np.flatnonzero((acts["op_name"] == "aten::pow").to_numpy())  # 48 memory-bound pow kernels
    pow_us = float(acts["dur"].to_numpy()[rows].sum())
    a = ctx.finding(FindingKind.FUSION, "a", pow_us / 2, ["x"], "fix", acts={0: rows})
    b = ctx.finding(FindingKind.CAST, "b", pow_us / 4, ["x"], "fix", acts={0: rows})
    c = ctx.finding(FindingKind.CAST, "c", pow_us / 4, ["x"], "fix", acts={0: rows[:24]})
    out = project(ctx, [a, b, c])
    applied = [w.applied_us for w in out.findings]
    assert applied == [pytest.approx(pow_us / 2), 0.0, 0.0]
    assert out.projected_us == pytest.approx(ctx.total_us - pow_us / 2)


def test_savings_capped_by_their_bound_class():
    ctx = _ctx(shared_trace(H100_QWEN))
    acts = ctx.analyses[0].activities
    latency = np.flatnonzero((acts["bound"] == "latency").to_numpy())
    lat_us = ctx.diagnosis.time.by_bound["latency"]
    # A (wrong) finding claiming 10× the latency-bound time gets at most the latency class.
    f = ctx.finding(FindingKind.BATCHING, "too much", 10 * lat_us, ["x"], "fix", acts={0: latency})
    out = project(ctx, [f])
    assert out.findings[0].applied_us == pytest.approx(lat_us)
    assert out.findings[0].capped is True
    # Idle-time findings draw on idle only.
    idle_us = ctx.diagnosis.time.by_bound["idle"]
    g = ctx.finding(FindingKind.HOST_BOUND, "idle", 2 * idle_us, ["x"], "fix", idle_us=2 * idle_us)
    assert project(ctx, [g]).findings[0].applied_us == pytest.approx(idle_us)


def test_timeline_rules_need_their_facts():
    """Without the idle and launch sections the host and launch rules say nothing."""
    ctx = _ctx(shared_trace(H100_BERT))
    bare = RuleContext(dataclasses.replace(ctx.diagnosis, idle_by_rank=(), launch_by_rank=()), ctx.analyses)
    kinds = {f.kind for rule in RULES for f in rule(bare)}
    assert not kinds & {"launch_overhead", "host_bound", "sync", "data_loader"}
    assert "quantization" in kinds and "batching" in kinds  # kernel-level rules still fire


@pytest.mark.parametrize("kind", ["attention", "cast", "quantization", "overlap", "data_loader"])
def test_no_evidence_no_finding_on_qwen(kind):
    d, _ = analysed(shared_trace(H100_QWEN))
    if kind == "attention":  # flash attention already: no eager bmm → softmax → bmm
        assert not [f for f in d.findings if "attention" in f.title]
    else:
        assert not by_kind(d, kind)


def test_no_fusion_or_precision_on_the_a100_training_rank():
    """torch.compile'd model (Triton kernels, tf32 cutlass GEMMs): nothing to fuse or move to tensor cores."""
    d, _ = analysed(shared_trace(A100_TRAIN))
    assert not by_kind(d, "fusion") and not by_kind(d, "precision") and not by_kind(d, "launch_overhead")


def test_findings_json_round_trip():
    d, _ = analysed(DATA / "cpu_attention.json.gz")
    out = d.to_dict()
    assert out["findings"][0]["kind"] == "fusion"
    assert set(out["findings"][0]) == {"kind", "title", "est_saving_us", "est_saving_pct", "evidence", "fix",
                                           "est_saving_per_step_us", "graph_saving_us", "graph_saving_per_step_us",
                                           "graph_saving_pct", "same_fix", "fix_saving_us", "fix_saving_per_step_us",
                                           "fix_saving_pct"}
    assert isinstance(out["projected_us"], float)
    assert all(type(f["graph_saving_us"]) is float for f in out["findings"])
    assert type(out["whatif"]["graph_projected_us"]) is float
    assert all(type(w["applied_us"]) is float for w in out["whatif"]["findings"])


def test_empty_trace_has_no_findings():
    ctx = _ctx(shared_trace(H100_QWEN))
    empty = [dataclasses.replace(a, activities=a.activities.iloc[0:0], groups=a.groups.iloc[0:0])
             for a in ctx.analyses]
    d = add_findings(dataclasses.replace(ctx.diagnosis, collectives=(), idle_by_rank=(), launch_by_rank=()), empty)
    assert d.findings == () and d.whatif is None and d.projected_us is None


def test_per_step_savings_add_up_to_step_minus_projected():
    """The units bug of the first release: Step 170 ms − saves 39.5 ms ≠ Projected 157 ms, because
    the savings were window totals. On the bundled 3-step training trace the findings act on disjoint
    kernels (none is capped), so Step − Σ per-step savings must equal the projected step exactly."""
    from pathlib import Path

    from bwdiag.report.verdict import build_verdict

    d, _ = analysed(Path(__file__).resolve().parents[1] / "sample_traces/train_transformer_cpu/rank0.pt.trace.json.gz")
    assert d.time.steps == 3 and d.findings
    assert not any(w.capped for w in d.whatif.findings)
    per_step = [f.est_saving_per_step_us for f in d.findings]
    assert all(p is not None for p in per_step)
    v = build_verdict(d)
    assert v["step_us"] - sum(per_step) == pytest.approx(v["projected_step_us"], rel=1e-9)
    assert [f["saving_unit"] for f in v["top_findings"]] == ["per step"] * len(v["top_findings"])
