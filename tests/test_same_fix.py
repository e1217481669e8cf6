"""One fix that resolves several findings: which compile target covers which, and what the set saves.

Compiling the training step removes the Python between its ops *and* fuses the chains in the model:
the host-overhead finding's fix resolves the fusion findings whose fix is ``model = torch.compile(model)``
too, and what applying it saves is the set together, not its own line of the list.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from bwdiag.diagnose import depgraph
from bwdiag.diagnose.findings.same_fix import CompileScope, compile_scope, covers, same_fix_sets
from bwdiag.diagnose.findings.whatif import graph_alone, together_savings
from bwdiag.diagnose.model import Diagnosis, FindingKind
from bwdiag.report.context import build_context
from tests.conftest import SAMPLE_TRACES
from tests.findings_helpers import analysed
from tests.test_depgraph import cpu_rank, result

MODEL = "model = torch.compile(model)  # Inductor's C++ backend fuses the chain into one loop"
STEP = "train_step = torch.compile(train_step)  # the function that runs forward, loss and backward"
FUSED_ADAMW = "optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)"


@pytest.mark.parametrize("fix, scope", [
    (MODEL, CompileScope("model")),
    (STEP + "\n# the optimizer step's gaps go with the fused step", CompileScope("train_step")),
    ("self.model = torch.compile(self.model)  # in your LightningModule's __init__", CompileScope("model")),
    ("TrainingArguments(..., torch_compile=True)  # the Trainer compiles the model it runs", CompileScope("model")),
    ('model = torch.compile(model, mode="reduce-overhead")  # CUDA graphs + fusion', CompileScope("model", True)),
    ("loss_fn = torch.compile(loss_fn)  # the chain is in the loss", CompileScope("loss_fn")),
    ("fn = torch.compile(fn)  # fn: the function that runs these ops", CompileScope("fn")),
    (FUSED_ADAMW, None),
    ("# the step already runs torch.compile'd regions\nmodel = torch.compile(model)", None),  # advice, not the fix
    ("", None),
])
def test_the_compile_target_is_read_from_the_fix_to_paste(fix, scope):
    assert compile_scope(fix) == scope


def test_which_compile_covers_which():
    model, step, loss, fn = (CompileScope(t) for t in ("model", "train_step", "loss_fn", "fn"))
    graphs = CompileScope("model", graphs=True)
    assert covers(model, model, training=True)
    assert covers(step, model, training=True) and covers(step, loss, training=True) and covers(step, fn, True)
    assert not covers(model, step, training=True)  # the model alone leaves the loss and the user's code
    assert not covers(step, model, training=False)  # no training step in an inference trace
    assert not covers(fn, fn, training=True)  # "the function that runs these ops": maybe another one
    assert not covers(model, loss, training=True)
    assert covers(graphs, model, training=True) and not covers(model, graphs, training=True)  # no CUDA graphs


def test_same_fix_sets_name_the_other_findings_only():
    fixes = [FUSED_ADAMW, MODEL, STEP, MODEL, "loss_fn = torch.compile(loss_fn)"]
    assert same_fix_sets(fixes, training=True) == [(), (3,), (1, 3, 4), (1,), ()]
    assert same_fix_sets(fixes, training=False) == [(), (3,), (), (1,), ()]


# One CPU thread: mul 0–10, add 30–40, relu 60–70. The host-overhead finding cuts the 40 µs of gaps
# by 30 (idle_us), the fusion finding halves add (5 µs); on one thread nothing overlaps, so the two
# together save 30 + 5 = 35 µs of the 70 µs window (50 %), each alone its own.
def test_a_fix_and_the_finding_it_covers_are_re_timed_together():
    a = cpu_rank([("aten::mul", 0, 10, 1, "elementwise"), ("aten::add", 30, 40, 1, "elementwise"),
                  ("aten::relu", 60, 70, 1, "elementwise")])
    g = depgraph.build_graph([a])
    ctx = SimpleNamespace(analyses=[a], ranks=1, total_us=70.0)
    results = [result(30.0, idle_us=30.0, kind="host_bound"), result(5.0, {0: [1]}), result(5.0, {0: [2]})]
    alone = graph_alone(ctx, results, g)
    assert alone.savings == pytest.approx((30.0, 5.0, 5.0))
    sets = same_fix_sets([STEP, MODEL, FUSED_ADAMW], training=True)
    together = together_savings(ctx, results, sets, alone)
    assert together[0] == pytest.approx((35.0, 50.0))
    assert together[1] is None and together[2] is None  # the model's compile does not cover the step's


SAMPLE = SAMPLE_TRACES / "train_transformer_cpu"


def test_the_sample_transformers_step_compile_resolves_its_model_fusions():
    d, _ = analysed(SAMPLE)
    host = next(f for f in d.findings if f.kind == FindingKind.HOST_BOUND)
    assert compile_scope(host.fix) == CompileScope("train_step")  # gaps outside the model too (loss)
    model_fixes = [f for f in d.findings if compile_scope(f.fix) == CompileScope("model")]
    assert model_fixes, "the sample has fusion findings inside the model"
    assert set(host.same_fix) == {f.title for f in model_fixes}
    # one thread records the whole step: re-timed together, the savings add up
    alone = host.graph_saving_us + sum(f.graph_saving_us for f in model_fixes)
    assert host.fix_saving_us == pytest.approx(alone, rel=1e-3)
    assert host.fix_saving_per_step_us == pytest.approx(host.fix_saving_us * d.time.step_us / d.time.total_us,
                                                        rel=1e-6)
    assert host.fix_saving_pct == pytest.approx(100 * host.fix_saving_us / d.time.total_us, rel=1e-3)
    optimizer = next(f for f in d.findings if "AdamW" in f.title)
    assert optimizer.same_fix == () and optimizer.fix_saving_us is None
    back = Diagnosis.from_dict(d.to_dict())
    assert next(f for f in back.findings if f.kind == FindingKind.HOST_BOUND).same_fix == host.same_fix


def test_the_views_say_what_the_fix_saves_with_the_findings_it_covers():
    d, _ = analysed(SAMPLE)
    ctx = build_context(d)
    host = next(f for f in ctx["findings"] if f["kind"] == "host_bound")
    numbers = [i for i, f in enumerate(ctx["findings"], 1) if f["title"] in
               next(g for g in d.findings if g.kind == FindingKind.HOST_BOUND).same_fix]
    assert host["same_fix_refs"] == ", ".join(f"#{i}" for i in numbers)
    assert host["same_fix_note"].startswith(f"The same fix also resolves {host['same_fix_refs']}: applied, it saves")
    assert host["fix_saving_shown_us"] > host["saving_shown_us"]
    assert all(f["same_fix_note"] is None for f in ctx["findings"] if f["kind"] != "host_bound")


def test_a_fix_whose_other_findings_add_nothing_says_so_without_a_figure():
    from bwdiag.diagnose.model import Finding
    from bwdiag.report.verdict import same_fix_note
    graphs = Finding(FindingKind.LAUNCH_OVERHEAD, "Capture the launches in a CUDA graph", 100.0, 10.0, (),
                     'model = torch.compile(model, mode="reduce-overhead")', graph_saving_us=80.0,
                     same_fix=("Fuse 2 ops",), fix_saving_us=80.5, fix_saving_pct=8.05)
    assert same_fix_note(graphs, ["Capture the launches in a CUDA graph", "Fuse 2 ops"]) == (
        "The same fix also resolves #2; together they save no more than this finding alone "
        "(re-timed on the dependency graph).")
    more = dataclasses.replace(graphs, fix_saving_us=120.0, fix_saving_pct=12.0)
    assert same_fix_note(more, ["Capture the launches in a CUDA graph", "Fuse 2 ops"]) == (
        "The same fix also resolves #2: applied, it saves 120 µs over the window (12.0%) with it "
        "(re-timed on the dependency graph); the list counts each finding once.")


def test_diff_compares_the_step_with_the_fix_as_applied():
    from bwdiag.diff.compare import compare
    from bwdiag.diff.render import fix_lines
    before, _ = analysed(SAMPLE)
    host = next(f for f in before.findings if f.kind == FindingKind.HOST_BOUND)
    # AFTER: the step compiled — the host finding and the model's fusions gone, the rest still there
    gone = {host.title, *host.same_fix}
    after = dataclasses.replace(before, findings=tuple(f for f in before.findings if f.title not in gone))
    row = next(r for r in compare(before, after)["findings"] if r["title"] == host.title)
    assert row["fix_predicted_us"] == pytest.approx(host.fix_saving_per_step_us)
    assert row["fix_applied_with"] == list(host.same_fix)
    assert row["realised_on_step_over_fix"] == pytest.approx(row["realised_on_step_us"] / host.fix_saving_per_step_us)
    others = [r for r in compare(before, after)["findings"] if r["title"] != host.title]
    # the chain's finding is gone: not "still there" because AFTER's one fusion finding is the optimizer's
    assert {r["title"]: r["status"] for r in others if r["title"] in host.same_fix} == {
        t: "resolved" for t in host.same_fix}
    assert all(r["fix_predicted_us"] is None for r in others)
    (line,) = fix_lines(compare(before, after))
    assert line.startswith(f'"{host.title}": its fix also changed "') and "predicted together" in line
    # only the host finding gone (the model's fusions still there): its own saving is the prediction
    kept = dataclasses.replace(before, findings=tuple(f for f in before.findings if f.title != host.title))
    row = next(r for r in compare(before, kept)["findings"] if r["title"] == host.title)
    assert row["fix_predicted_us"] is None and row["fix_applied_with"] == []
