"""Host overhead and the data loader on CPU traces (findings/dispatch.py, findings/host.py), on
hand-built contexts whose savings are worked out by hand in the comments."""

from __future__ import annotations

import pytest

from bwdiag.diagnose.findings import dispatch, host
from bwdiag.diagnose.findings.helpers import host_gaps
from bwdiag.diagnose.findings.registry import run_rules
from tests.rule_context import context, kernel, op, rank

ANNOT = "user_annotation"


@pytest.fixture(autouse=True)
def _no_compiled_call_cost(monkeypatch):
    """These steps are tens of µs: what compiled code keeps per call (tens of µs, compiled_calls.py)
    would swallow their gaps, so it is zero here unless a test's calibration gives it."""
    from bwdiag.diagnose.findings import compiled_calls

    monkeypatch.setattr(compiled_calls, "COMPILED_CALL",
                        {mode: {"call_us": 0.0, "extern_us": 0.0} for mode in ("inference", "training")})


def _calibrated(ctx, values: dict):
    """``ctx`` as diagnosed with a calibration of its host that measured ``values``."""
    import dataclasses

    calibration = {"path": "calibration-cpu.json", "origin": "local", "values": values}
    device = dataclasses.replace(ctx.diagnosis.device, calibration=calibration)
    return dataclasses.replace(ctx, diagnosis=dataclasses.replace(ctx.diagnosis, device=device))


def cpu(name: str, o: int, ts: float, end: float) -> dict:
    """The activity row of leaf CPU op ``o``."""
    return kernel(name, op=o, ts=ts, dur=end - ts, category="elementwise", bound="memory", kind="cpu_op",
                  stream=1, bytes=64.0)


def _tiny_rank():
    """A step of tiny ops on one thread (µs):

    mul 0–10 | add 15–20 | MulBackward0 30–50 holding mul 32–40 and sum 43–46 |
    Optimizer.step 52–100 holding add_ 62–70 and add_ 74–80 | mul 2000–2010 in module ``net`` (so
    the trace records modules, and the ops before are outside any)."""
    ops = [op("ProfilerStep#1", cat=ANNOT, ts=0, end=2010),                       # 0
           op("aten::mul", ts=0, end=10),                                          # 1
           op("aten::add", ts=15, end=20),                                         # 2
           op("autograd::engine::evaluate_function: MulBackward0", ts=30, end=50),  # 3
           op("aten::mul", ts=32, end=40, parent=3),                               # 4
           op("aten::sum", ts=43, end=46, parent=3),                               # 5
           op("Optimizer.step#SGD.step", cat=ANNOT, ts=52, end=100),               # 6
           op("aten::add_", ts=62, end=70),                                        # 7
           op("aten::add_", ts=74, end=80),                                        # 8
           op("aten::mul", ts=2000, end=2010, module="net")]                       # 9
    acts = [cpu("aten::mul", 1, 0, 10), cpu("aten::add", 2, 15, 20), cpu("aten::mul", 4, 32, 40),
            cpu("aten::sum", 5, 43, 46), cpu("aten::add_", 7, 62, 70), cpu("aten::add_", 8, 74, 80),
            cpu("aten::mul", 9, 2000, 2010)]
    return rank(ops, acts)


def test_host_gaps_split_by_where_they_sit():
    g = host_gaps(_tiny_rank())
    # Gaps between work: 10→15 (5, before add: outside any module), 20→32 (12, before MulBackward0:
    # backward), 40→43 (3, inside MulBackward0: backward), 46→62 (16, mid 54 inside Optimizer.step),
    # 70→74 (4, optimizer step); 80→2000 (1,920) is over DISPATCH_GAP_US: not dispatch.
    assert g.gap_us == pytest.approx(5 + 12 + 3 + 16 + 4) and g.gaps == 5
    assert g.between_us == pytest.approx(37.0)  # all but the 3 µs inside MulBackward0
    assert g.where == {"outside any module": [5.0, 1], "backward": [15.0, 2], "optimizer step": [20.0, 2]}
    assert (g.long_gap_us, g.long_gaps) == (pytest.approx(1920.0), 1)
    assert (g.ops, g.tiny_ops) == (6, 6)  # mul, add, MulBackward0, add_, add_, mul: all under 50 µs
    assert g.optimizer == "SGD" and g.optimizer_ops == 2 and g.optimizer_steps == 1


def test_host_overhead_saves_the_short_gaps():
    ctx = context([_tiny_rank()], total_us=2010, trace_kind="cpu")
    (r,) = dispatch.host_overhead(ctx)
    # 40 µs of short gaps in a 2,010 µs window: 1.99 %.
    assert r.kind == "host_bound" and "6 tiny ops" in r.title
    assert r.est_saving_us == pytest.approx(40.0) and r.idle_us == pytest.approx(40.0)
    assert r.finding.est_saving_pct == pytest.approx(100 * 40 / 2010)
    # The profiler's recording of the 8 CPU ops on the thread (mul, add, MulBackward0, mul, sum, add_,
    # add_, mul; the two ranges are annotations) is named, not subtracted: 8 × 0.8 = 6.4 µs.
    assert dispatch.PROFILER_OP_US == 0.8
    assert ("≈6.4 µs of the gaps is the profiler's own recording (8 recorded ops × 0.8 µs, measured on a 2-core "
            "dev VM" in r.finding.evidence[1])
    assert "37 µs between its 6 top-level ops" in r.finding.evidence[0]
    assert "optimizer step 20 µs (2), backward 15 µs (2), outside any module 5 µs (1)" in r.finding.evidence[3]
    assert "1.92 ms in 1 gaps" in r.finding.evidence[4]
    # Gaps outside the model (no module at all): compile the step, not the model; 2 ops in the
    # optimizer step is no per-parameter loop (PER_PARAMETER_OPS = 16).
    assert r.finding.fix.startswith("train_step = torch.compile(train_step)")
    assert "foreach" not in r.finding.fix


def test_inference_gaps_get_no_training_step_advice():
    # No backward and no optimizer step (a decode loop, HF generate): no train_step, loss or backward to
    # compile — the model, and the loop around it named as what is left.
    ops = [op("ProfilerStep#1", cat=ANNOT, ts=0, end=100),
           op("aten::mul", ts=0, end=10), op("aten::add", ts=15, end=20, module="net.fc"),
           op("aten::mul", ts=30, end=40, module="net.fc"), op("aten::add", ts=45, end=50)]
    acts = [cpu(o["name"], i, o["ts"], o["end"]) for i, o in enumerate(ops) if i > 0]
    (r,) = dispatch.host_overhead(context([rank(ops, acts)], total_us=100, trace_kind="cpu"))
    assert r.finding.fix.startswith("model = torch.compile(model)  # inference:") and "train_step" not in r.finding.fix


def test_inference_without_modules_gets_no_training_step_advice():
    # The same ops with no module recorded (a trace without with_modules): the forward is compiled,
    # there is no train_step with a loss and a backward to name.
    ops = [op("ProfilerStep#1", cat=ANNOT, ts=0, end=100),
           op("aten::mul", ts=0, end=10), op("aten::add", ts=15, end=20),
           op("aten::mul", ts=30, end=40), op("aten::add", ts=45, end=50)]
    acts = [cpu(o["name"], i, o["ts"], o["end"]) for i, o in enumerate(ops) if i > 0]
    (r,) = dispatch.host_overhead(context([rank(ops, acts)], total_us=100, trace_kind="cpu"))
    assert r.finding.fix.startswith("fn = torch.compile(fn)  # fn: the function that runs the forward pass")
    assert "inference: the trace has no backward or optimizer step; it records no modules" in r.finding.fix
    assert "train_step" not in r.finding.fix and "backward)" not in r.finding.fix


@pytest.mark.parametrize("framework, fix", [
    ("lightning", "self.model = torch.compile(self.model)  # in your LightningModule's __init__"),
    ("hf_trainer", "TrainingArguments(..., torch_compile=True)"),
])
def test_a_framework_that_runs_the_step_gets_its_own_switch(framework, fix):
    # The capture saw the script import Lightning / the HF Trainer: there is no train_step of the user's.
    a = _tiny_rank()
    a.trace.metadata = {"bwdiag": {"frameworks": [framework]}}
    (r,) = dispatch.host_overhead(context([a], total_us=2010, trace_kind="cpu"))
    assert r.finding.fix.startswith(fix) and "train_step" not in r.finding.fix


def test_host_overhead_names_the_profiler_cost_the_calibration_measured():
    ctx = _calibrated(context([_tiny_rank()], total_us=2010, trace_kind="cpu"), {"profiler_op_us": 1.5})
    (r,) = dispatch.host_overhead(ctx)
    # The same 8 recorded ops at this host's measured 1.5 µs: 12 µs, still not subtracted (saving 40 µs).
    assert ("≈12 µs of the gaps is the profiler's own recording (8 recorded ops × 1.5 µs, measured on this host "
            "by bwdiag calibrate)" in r.finding.evidence[1])
    assert r.est_saving_us == pytest.approx(40.0)


def _optimizer_rank(foreach: bool = False):
    """Optimizer.step 0–395 dispatching 20 add_ ops of 10 µs every 20 µs (10 µs gaps), then a
    forward op in module ``net.fc`` 410–420."""
    ops = [op("ProfilerStep#1", cat=ANNOT, ts=0, end=420), op("Optimizer.step#SGD.step", cat=ANNOT, ts=0, end=395)]
    acts = []
    for k in range(20):
        name = "aten::_foreach_add_" if foreach and k == 0 else "aten::add_"
        ops.append(op(name, ts=20 * k, end=20 * k + 10))
        acts.append(cpu(name, len(ops) - 1, 20 * k, 20 * k + 10))
    ops.append(op("aten::relu", ts=410, end=420, module="net.fc"))
    acts.append(cpu("aten::relu", len(ops) - 1, 410, 420))
    return rank(ops, acts)


def test_per_parameter_optimizer_gaps_advise_foreach():
    (r,) = dispatch.host_overhead(context([_optimizer_rank()], total_us=420, trace_kind="cpu"))
    # 19 gaps of 10 µs inside the step (190 µs) + 390→410 before relu (20 µs, net.fc) = 210 µs.
    assert r.est_saving_us == pytest.approx(210.0)
    assert "foreach=True" in r.finding.fix and "20 per-parameter ops" in r.finding.fix


def test_optimizer_gaps_go_to_the_fused_step_finding():
    from bwdiag.diagnose.findings.base import RuleResult
    from bwdiag.diagnose.model import Finding
    fused = RuleResult(Finding("fusion", "Use a fused SGD step", 50.0, 10.0, ("x",), "fused=True"))
    ctx = context([_optimizer_rank()], total_us=420, trace_kind="cpu")
    ctx = type(ctx)(ctx.diagnosis, ctx.analyses, {"optimizer": (fused,)})
    (r,) = dispatch.host_overhead(ctx)
    # 210 µs of gaps, 190 of them inside Optimizer.step (19 × 10 µs): the fused step removes those;
    # compiling the step removes the 20 µs before relu.
    assert r.est_saving_us == pytest.approx(20.0)
    assert "less the optimizer step's 190 µs of gaps" in r.finding.evidence[1]
    assert "Use a fused SGD step" in r.finding.evidence[1] and "foreach=True" not in r.finding.fix


def test_no_foreach_advice_when_the_optimizer_already_batches():
    (r,) = dispatch.host_overhead(context([_optimizer_rank(foreach=True)], total_us=420, trace_kind="cpu"))
    assert r.est_saving_us == pytest.approx(210.0)
    assert "foreach" not in r.finding.fix


def test_without_module_annotations_the_gaps_are_not_called_outside_the_model():
    a = _tiny_rank()
    a.trace.ops["module"] = None
    g = host_gaps(a)
    assert g.where["forward (no modules recorded)"] == [5.0, 1]
    (r,) = dispatch.host_overhead(context([a], total_us=2010, trace_kind="cpu"))
    assert "no modules" in r.finding.fix and "outside the model" not in r.finding.fix


def test_host_overhead_is_for_cpu_traces():
    assert dispatch.host_overhead(context([_tiny_rank()], total_us=2010)) == []


def _loader_rank():
    """DataLoader __next__ 0–600 holding aten::empty 10–20; then mm 600–900 and add 905–910."""
    ops = [op("ProfilerStep#1", cat=ANNOT, ts=0, end=1000),
           op("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", cat=ANNOT, ts=0, end=600),
           op("aten::empty", ts=10, end=20), op("aten::mm", ts=600, end=900), op("aten::add", ts=905, end=910)]
    acts = [cpu("aten::empty", 2, 10, 20), kernel("aten::mm", op=3, ts=600, dur=300, category="gemm",
                                                  bound="compute", kind="cpu_op", stream=1),
            cpu("aten::add", 4, 905, 910)]
    return rank(ops, acts)


def test_cpu_data_loader_saves_the_time_inside_next():
    ctx = context([_loader_rank()], total_us=900, trace_kind="cpu")
    (r,) = host.data_loader(ctx)
    # The window runs from the first activity (10) to the last (910); __next__ covers 10–600 of it:
    # 590 µs, 10 of them in aten::empty (an activity), 580 waiting.
    assert r.kind == "data_loader"
    assert r.est_saving_us == pytest.approx(590.0) and r.idle_us == pytest.approx(580.0)
    assert sorted(r.acts[0].tolist()) == [0]
    assert "_MultiProcessingDataLoaderIter" in r.finding.evidence[0]
    assert "persistent_workers=True" in r.finding.fix and "pin_memory" not in r.finding.fix


def _with_cores(ctx, cores):
    import dataclasses

    d = ctx.diagnosis
    d = dataclasses.replace(d, device=dataclasses.replace(d.device, trace_host={"hostname": "h", "cores": cores}))
    return type(ctx)(d, ctx.analyses)


def test_the_loader_fix_counts_the_recording_hosts_cores():
    base = context([_loader_rank()], total_us=900, trace_kind="cpu")
    (r,) = host.data_loader(base)  # cores unknown: the old advice, no host line
    assert "num_workers=8" in r.finding.fix and "up to the free cores" in r.finding.fix
    assert not any("cores of the recording host" in e or "core of the recording host" in e for e in r.finding.evidence)
    (r,) = host.data_loader(_with_cores(base, 2))  # the 2-core VM: one core beside the main thread
    assert "past 1 (this host's 2 cores less the main thread) only an I/O-bound __getitem__ gains" in r.finding.fix
    assert "the script has 2 cores of the recording host: workers beyond 1 load in parallel only while" \
        in r.finding.evidence[-1]
    assert r.est_saving_us == pytest.approx(590.0)  # the wait is what the finding measures, cores or not
    # a loader on the main thread: as many workers as the cores beside it, four at most
    single = _loader_rank()
    single.trace.ops.loc[1, "name"] = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    for cores, workers in ((2, 1), (3, 2), (16, 4), (1, 1)):
        (r,) = host.data_loader(_with_cores(context([single], total_us=900, trace_kind="cpu"), cores))
        assert f"num_workers={workers}," in r.finding.fix, (cores, r.finding.fix)


def test_loader_wait_is_not_host_overhead_too():
    results = run_rules(context([_loader_rank()], total_us=900, trace_kind="cpu"))
    by = {r.kind: r.est_saving_us for r in results}
    # The 580 µs between empty and mm lie inside __next__: the data loader's. Only 900→905 is a
    # dispatch gap: 5 µs = 0.56 % of the window.
    assert by == {"data_loader": pytest.approx(590.0), "host_bound": pytest.approx(5.0)}


def test_gpu_host_wait_names_the_host_gaps_and_a_per_parameter_step():
    """GPU trace: Optimizer.step 0–395 dispatching 20 add_ ops (10 µs each, 10 µs apart) with one
    2 µs kernel each, then relu 410–420. The GPU idles between the kernels; the host-side gaps are
    the 19 × 10 µs in the step + 20 µs before relu."""
    ops = [op("ProfilerStep#1", cat=ANNOT, ts=0, end=420), op("Optimizer.step#SGD.step", cat=ANNOT, ts=0, end=395)]
    acts = []
    for k in range(20):
        ops.append(op("aten::add_", ts=20 * k, end=20 * k + 10))
        acts.append(kernel("vectorized_elementwise_kernel", op=len(ops) - 1, ts=20 * k + 8, dur=2,
                           category="elementwise", bound="memory", bytes=64.0))
    ops.append(op("aten::relu", ts=410, end=420, module="net.fc"))
    acts.append(kernel("relu_kernel", op=len(ops) - 1, ts=418, dur=2, category="elementwise", bound="memory"))
    a = rank(ops, acts)
    g = host_gaps(a)
    assert g.gap_us == pytest.approx(19 * 10 + 20) and g.where["optimizer step"] == [190.0, 19]
    idle = {"host_wait_us": 300.0, "gaps": 20, "causes": {"sync_us": 0.0, "data_loader_us": 0.0}}
    launch = {"kernels": 21, "short_kernels": 21, "short_kernel_us": 42.0, "cpu_launch_us": 60.0,
              "gpu_busy_us": 42.0, "launch_bound": True, "mean_queue_length": 0.1}
    (r,) = run_rules(context([a], total_us=412, extras={"idle": idle, "launch": launch}))
    # The saving stays the device idle the host wait causes (300 µs); the host gaps explain it.
    assert r.kind == "launch_overhead" and r.est_saving_us == pytest.approx(300.0)
    assert "210 µs of short gaps" in r.finding.evidence[-1] and "optimizer step 190 µs" in r.finding.evidence[-1]
    assert "torch.optim.SGD(params, lr=lr, foreach=True)" in r.finding.fix and "20 per-parameter ops" in r.finding.fix


def _with_unprofiled(ctx, unprofiled_us: float):
    """``ctx`` as ``bwdiag run`` leaves it when it also timed steps after the profiler stopped."""
    import dataclasses

    time = dataclasses.replace(ctx.diagnosis.time, unprofiled_step_us=unprofiled_us)
    return dataclasses.replace(ctx, diagnosis=dataclasses.replace(ctx.diagnosis, time=time))


def test_with_an_unprofiled_step_the_recording_of_removed_ops_is_subtracted():
    ctx = _with_unprofiled(context([_tiny_rank()], total_us=2010, trace_kind="cpu", step_us=2010), 1990)
    (r,) = dispatch.host_overhead(ctx)
    # One 2,010 µs step, 1,990 µs without the profiler: it added 20 µs (2.5 µs over each of 8 recorded
    # ops). The ops' roofline time is unknown here (no placement): they count as all work, so the 20 µs
    # fall on the 40 µs of gaps, stretched 2×: the plain script pays half, 20 µs, which compiling
    # removes — shown as the same share of the profiled step: 20 × 2010 / 1990.
    assert r.est_saving_us == pytest.approx(20 * 2010 / 1990) and r.idle_us == pytest.approx(r.est_saving_us)
    assert not r.acts
    line = r.finding.evidence[1]
    assert "2.50 µs per recorded op" in line and "40 µs of gaps and 0 µs of the ops' time beyond their roofline" in line
    assert "stretching it 2.00×" in line and "pays 50% of the 40 µs of gaps" in line


def _extern_rank():
    """linear 0–50 (holding t 2–5 and addmm 10–45) | relu 60–70 | linear 80–130 recorded as a leaf
    (inference mode) | add 140–150; the trace's activities are the four top-level ops."""
    ops = [op("ProfilerStep#1", cat=ANNOT, ts=0, end=200),
           op("aten::linear", ts=0, end=50, module="net.fc"), op("aten::t", ts=2, end=5, parent=1),
           op("aten::addmm", ts=10, end=45, parent=1), op("aten::relu", ts=60, end=70, module="net"),
           op("aten::linear", ts=80, end=130, module="net.fc"), op("aten::add", ts=140, end=150, module="net")]
    acts = [cpu(ops[i]["name"], i, ops[i]["ts"], ops[i]["end"]) for i in (1, 4, 5, 6)]
    return rank(ops, acts)


def test_extern_kernels_stay_recorded_in_a_compiled_step():
    ctx = _with_unprofiled(context([_extern_rank()], total_us=200, trace_kind="cpu", step_us=200), 190)
    (r,) = dispatch.host_overhead(ctx)
    # Gaps 50→60, 70→80, 130→140: 30 µs; the profiler added 10 µs, all on the gaps (the ops' roofline
    # time is unknown: work) — including the recording of addmm and the leaf linear, which a compiled
    # graph still calls, since the plain script pays none of it either: 30 × (1 − 10/30) = 20 µs, all
    # of which compiling removes. 20 × 200 / 190.
    assert r.est_saving_us == pytest.approx(20 * 200 / 190)
    assert "pays 67% of the 30 µs of gaps" in r.finding.evidence[1]


def _run_rank(extern_at: int | None = None):
    """40 top-level ops of 2 µs every 5 µs (3 µs gaps); op ``extern_at`` an addmm."""
    ops = [op("ProfilerStep#1", cat=ANNOT, ts=0, end=200)]
    acts = []
    for k in range(40):
        name = "aten::addmm" if k == extern_at else "aten::mul"
        ops.append(op(name, ts=5 * k, end=5 * k + 2))
        acts.append(cpu(name, k + 1, 5 * k, 5 * k + 2))
    return rank(ops, acts)


def test_tiny_ops_in_a_long_run_are_fused_away_with_their_gaps():
    from bwdiag.diagnose.findings.recording import FUSED_RUN_OPS

    ctx = _with_unprofiled(context([_run_rank()], total_us=200, trace_kind="cpu", step_us=200), 160)
    (r,) = dispatch.host_overhead(ctx)
    # 39 gaps of 3 µs = 117 µs; the profiler added 40 µs, all on the gaps (roofline unknown: the ops
    # are work) → the plain script's gaps 117 − 40 = 77 µs; one run of 40 ≥ FUSED_RUN_OPS (32) tiny
    # ops: their 80 µs (all work) go too. 77 + 80 = 157 µs of the plain step → 157 × 200 / 160; the
    # gaps' part of it (117 of 197) is cut from the gaps, the rest from the 40 ops.
    assert FUSED_RUN_OPS == 32
    assert r.est_saving_us == pytest.approx(157 * 200 / 160)
    assert r.idle_us == pytest.approx(157 * 200 / 160 * 117 / 197)
    assert sorted(r.acts[0].tolist()) == list(range(40))
    # An addmm in the middle: two runs of 20 and 19 — too short to fuse away; addmm stays recorded.
    ctx = _with_unprofiled(context([_run_rank(extern_at=20)], total_us=200, trace_kind="cpu", step_us=200), 160)
    (r,) = dispatch.host_overhead(ctx)
    assert r.est_saving_us == pytest.approx((117 - 40) * 200 / 160) and not r.acts


#: What compiled code costs per call on a made-up host: the mode the trace runs in picks its pair.
COMPILED = {"compiled_call": {"inference": {"call_us": 3.0, "extern_us": 1.0},
                              "training": {"call_us": 5.0, "extern_us": 2.0}}}


def test_a_compiled_step_keeps_its_calls_and_extern_calls():
    a = _extern_rank()
    # The model's forward 0–135 and a loss module 138–150 (compiling the model does not compile it).
    for name, ts, end in (("nn.Module: Net", 0, 135), ("nn.Module: CrossEntropyLoss", 138, 150)):
        a.trace.ops.loc[len(a.trace.ops)] = op(name, cat=ANNOT, ts=ts, end=end, module=name[11:])
    ctx = _with_unprofiled(context([a], total_us=200, trace_kind="cpu", step_us=200), 190)
    (r,) = dispatch.host_overhead(_calibrated(ctx, COMPILED))
    # As in test_extern_kernels_stay_recorded_in_a_compiled_step: 20 µs of plain gaps removed. No
    # backward: inference. One compiled call (Net's forward) × 3 µs + 2 extern calls (addmm; the leaf
    # linear) × 1 µs = 5 µs the compiled step keeps: (20 − 5) × 200 / 190.
    assert r.est_saving_us == pytest.approx((20 - 5) * 200 / 190)
    assert ("a compiled step still pays 1 compiled calls × 3 µs (Dynamo's guards, the AOTAutograd wrappers) + 2 "
            "GEMM/convolution/attention calls × 1 µs of generated code around each (inference, measured on this "
            "host by bwdiag calibrate) = 5 µs, which stays") in r.finding.evidence
    assert "less 5 µs the compiled code keeps (below)" in r.finding.evidence[1]


def test_without_modules_a_compiled_step_is_one_call_a_step():
    # _tiny_rank records no module forward: the compiled function is the step's, called once a step;
    # the 2,010 µs window holds two 1,005 µs steps. A backward and an optimizer step: training,
    # 2 calls × 5 µs, no extern kernel. No unprofiled step: the gaps' 40 µs − 10.
    ctx = _calibrated(context([_tiny_rank()], total_us=2010, trace_kind="cpu", step_us=1005), COMPILED)
    (r,) = dispatch.host_overhead(ctx)
    assert r.est_saving_us == pytest.approx(40 - 2 * 5) and r.idle_us == pytest.approx(30)
    assert any("2 compiled calls × 5 µs (Dynamo's guards, the AOTAutograd wrappers, the compiled backward node)"
               in e and "(training, " in e for e in r.finding.evidence)



def test_a_step_compiled_already_keeps_nothing_more():
    # A trace with a compiled region: the fix is its graph breaks, and what its compiled calls cost is
    # in the trace already — the same saving with or without the per-call costs, and no line for them.
    a = _run_rank()
    a.activities.loc[len(a.activities)] = kernel("CompiledFxGraph f (Inductor code)", ts=200, dur=2,
                                                 category="elementwise", bound="memory", kind="compiled", stream=1)
    ctx = context([a], total_us=202, trace_kind="cpu", step_us=101)
    (plain,) = dispatch.host_overhead(ctx)
    (r,) = dispatch.host_overhead(_calibrated(ctx, COMPILED))
    assert r.est_saving_us == pytest.approx(plain.est_saving_us) and r.est_saving_us > 0
    assert not any("a compiled step still pays" in e for e in r.finding.evidence)
    # The same trace without the compiled region: no backward (inference), no modules, two steps in the
    # window — 2 calls × 3 µs kept, no extern call.
    ctx = context([_run_rank()], total_us=200, trace_kind="cpu", step_us=100)
    (eager,) = dispatch.host_overhead(ctx)
    (kept,) = dispatch.host_overhead(_calibrated(ctx, COMPILED))
    assert kept.est_saving_us == pytest.approx(eager.est_saving_us - 2 * 3)


def test_the_profilers_added_time_falls_on_the_gaps_and_the_ops_overhead_alike():
    # Ten mul ops of 10 µs every 20 µs (9 gaps of 10 µs = 90 µs), whose roofline time is 2 µs each:
    # 10 × 8 = 80 µs of the ops' time is overhead too. A 190 µs step, 105 µs without the profiler: its
    # 85 µs fall on 90 + 80 = 170 µs of overhead, stretched 2× — the plain script pays half of the gaps,
    # 45 µs, which compiling removes (10 ops: too few to fuse away): 45 × 190 / 105. The earlier model
    # (all 85 µs between the ops) left 90 − 85 = 5 µs.
    ops = [op("ProfilerStep#1", cat=ANNOT, ts=0, end=190)]
    acts = []
    for k in range(10):
        ops.append(op("aten::mul", ts=20 * k, end=20 * k + 10))
        acts.append(cpu("aten::mul", k + 1, 20 * k, 20 * k + 10))
    a = rank(ops, acts, placement={"aten::mul": {"best_time_s": 10 * 2e-6}})
    ctx = _with_unprofiled(context([a], total_us=190, trace_kind="cpu", step_us=190), 105)
    (r,) = dispatch.host_overhead(ctx)
    assert r.est_saving_us == pytest.approx(45 * 190 / 105)
    line = r.finding.evidence[1]
    assert "85 µs it added falls on the overhead — 90 µs of gaps and 80 µs of the ops' time beyond their roofline" in line
    assert "stretching it 2.00×" in line and "pays 50% of the 90 µs of gaps" in line
