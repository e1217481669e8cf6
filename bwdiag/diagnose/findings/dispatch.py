"""Host overhead on CPU traces: the interpreter and the dispatcher stepping from one op to the next.

On a CPU trace the "device" is the main thread itself: every microsecond between two top-level ops
(:func:`~.helpers.host_gaps`) is Python and dispatch time the step pays in full. Many tiny ops make
it the largest class of time — 300 per-parameter SGD updates of 8-element tensors spend more time
between ops than in them. The saving is that gap time (gaps under ``DISPATCH_GAP_US`` outside
DataLoader spans: longer ones are other host work, named but not counted), which a compiled step
(one fused loop instead of N dispatched ops) or a foreach optimizer (one op per tensor list) removes.
GPU traces: the device idle those gaps cause is :mod:`.launch` / :mod:`.host`'s.

The profiler itself lengthens the gaps it measures, and more than its bookkeeping (:mod:`.recording`):
recording each op evicts what the next op and the interpreter had in cache, so the dispatch inside
the ops' spans slows down as much as the Python between them. When ``bwdiag run`` timed steps after
the profiler stopped, the time it added ((profiled − unprofiled step) over the window) is spread over
the overhead in proportion — the gaps and the ops' time beyond their roofline; work at its roofline
keeps its speed (:class:`~.recording.Dilation`) — and the saving is what the plain script saves: its
share of the gaps, plus the own time of tiny ops a compiled step fuses away (their overhead at the same
share) — given, like every saving, as its share of the profiled step. Without an unprofiled step the
saving is the gaps (their share of the profiled step carries over), and the evidence names the
recording from ``PROFILER_OP_US`` or the host's ``bwdiag calibrate``
(``device.calibration.values.profiler_op_us``). Checked with ``benchmarks/savings.py`` (2-core AMD
EPYC VM, one thread, 7 Dec 2026): the decode loop took 1.90 ms a step profiled and 0.55 ms after; the
earlier model (all of the added time between ops, k µs per recorded op the fix removes) left it no
saving, the dilation 30 % of the step, and compiling saved 30 % (431 → 301 µs). The gaps
of a per-parameter optimizer step are left out of the saving when the optimizer rule advises a fused
step: that fix removes them, compiling the step does not. Either way the saving keeps what the compiled
code itself costs per call and per extern GEMM call (:mod:`.compiled_calls`) — on the bundled decode
loop, half of what the eager gaps promised.
"""

from __future__ import annotations

from bwdiag.diagnose.compiled import COMPILED_KIND
from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.compiled_calls import kept_by_compiled
from bwdiag.diagnose.findings.helpers import (
    DISPATCH_GAP_US,
    PER_PARAMETER_OPS,
    TINY_OP_US,
    fmt_time,
    host_gaps,
    op_column,
    optimizer_batched,
)
from bwdiag.diagnose.findings.recording import FUSED_RUN_OPS
from bwdiag.diagnose.findings.recording import (  # noqa: F401  (PROFILER_OP_US: re-exported)
    PROFILER_OP_US,
    compiled_away,
    dilation,
    overhead_by_row,
    profiler_op_us,
    recorded_ops,
    run_op_us,
)
from bwdiag.diagnose.model import FindingKind

#: Gaps between ops that are not tiny are reported only from this share of the window (%): between
#: long ops the interpreter's time is small beside the work, and a compiled step saves little.
LARGE_OPS_MIN_PCT = 10.0
#: The optimizer's share of the gaps from which a foreach/fused optimizer is advised. Low on purpose: the
#: per-parameter op count is the evidence, and on a loaded host the backward's gaps swell more than the
#: optimizer's (SGD over 300 tensors: 4.4 of 40.8 ms of gaps, 11 %, in one run; under 10 % in a loaded one).
OPTIMIZER_GAP_SHARE = 0.05

#: Labels of :attr:`HostGaps.where` that are not module paths.
_NOT_MODULES = ("optimizer step", "zero_grad", "backward", "outside any module", "forward (no modules recorded)")


def host_overhead(ctx: RuleContext) -> list[RuleResult]:
    """CPU traces: time between consecutive top-level ops on the main thread."""
    if not ctx.is_cpu:
        return []
    found = [(pos, g) for pos, a in enumerate(ctx.analyses) if (g := host_gaps(a)) is not None]
    if not found:
        return []
    n = ctx.ranks
    measured = sum(g.gap_us for _, g in found) / n
    recorded = sum(max(0, recorded_ops(ctx.analyses[pos], g.tid) - len(g.loader_rows)) for pos, g in found) / n
    per_op, per_op_source = profiler_op_us(ctx)
    profiler_us = min(measured, recorded * per_op)
    # One cause, one finding: a fused optimizer step advised by the optimizer rule removes the
    # per-parameter loop's gaps; compiling the forward/backward does not, so they are not this saving.
    fused_step = [r for r in ctx.prior.get("optimizer", ()) if r.finding.fix]
    moved = sum(g.where.get("optimizer step", [0.0, 0])[0] for _, g in found) / n if fused_step else 0.0
    compiled = any((a.activities["kind"] == COMPILED_KIND).any() for a in ctx.analyses)
    saving, idle, acts, plain_line, kept_line = _saving(ctx, found, measured - moved, bool(fused_step), recorded,
                                                        per_op, compiled)
    ops = sum(g.ops for _, g in found) / n
    tiny = sum(g.tiny_ops for _, g in found) / n
    is_tiny = tiny >= ops / 2
    # Between long ops, or between torch.compile'd regions (whose small top-level ops are Dynamo's
    # wrappers, not the user's), the gaps are the outer Python loop: advice only when they are large.
    if not ctx.worth_reporting(saving) or ((compiled or not is_tiny) and ctx.pct(saving) < LARGE_OPS_MIN_PCT):
        return []
    gaps = sum(g.gaps for _, g in found) / n
    work_us = sum(g.work_us for _, g in found) / n
    between = sum(g.between_us for _, g in found) / n
    where: dict[str, list] = {}
    for _, g in found:
        for label, (us, k) in g.where.items():
            slot = where.setdefault(label, [0.0, 0])
            slot[0] += us / n
            slot[1] += k / n
    ranked = sorted(where.items(), key=lambda kv: -kv[1][0])
    evidence = [
        f"the main thread does no op's work for {fmt_time(measured)} in {gaps:,.0f} short gaps (ops at work: "
        f"{fmt_time(work_us)}): {fmt_time(between)} between its {ops:,.0f} top-level ops (Python), "
        f"{fmt_time(measured - between)} inside them (autograd nodes, dispatch to the kernels)"
        + ("" if moved > 0 else f" → {ctx.per_step(measured, measured=True)}"),
        *([f"less the optimizer step's {fmt_time(moved)} of gaps, which the fused step of \"{fused_step[0].title}\" "
           f"removes (compiling the forward and backward does not) → {ctx.per_step(measured - moved, measured=True)}"] if moved > 0 else []),
        plain_line or
        f"≈{fmt_time(profiler_us)} of the gaps is the profiler's own recording ({recorded:,.0f} recorded ops × "
        f"{per_op:g} µs, {per_op_source}); not subtracted: it lengthens the ops too, so the gaps' share of the step is what "
        f"carries over to the script run without the profiler (`bwdiag run` also times steps without it, and the "
        f"saving then subtracts the recording the fix removes)",
        *([kept_line] if kept_line else []),
        f"{tiny:,.0f} of the {ops:,.0f} ops take under {TINY_OP_US:.0f} µs: per-op dispatch rivals their work"
        if is_tiny else f"{tiny:,.0f} of the {ops:,.0f} ops take under {TINY_OP_US:.0f} µs",
        "gaps by where the next op runs: " + ", ".join(
            f"{label} {fmt_time(us)} ({k:,.0f})" for label, (us, k) in ranked[:5]),
    ]
    long_us = sum(g.long_gap_us for _, g in found) / n
    if long_us > 0:
        long_n = sum(g.long_gaps for _, g in found) / n
        evidence.append(f"another {fmt_time(long_us)} in {long_n:,.0f} gaps over {fmt_time(DISPATCH_GAP_US)} is "
                        f"other host work or the thread descheduled (not counted: py-spy / cProfile shows which)")
    fix = _fix(ctx, found, where, is_tiny and not compiled, compiled)
    title = ("The CPU runs Python between the compiled regions" if compiled
             else f"Cut the Python and dispatch time between {ops:,.0f} tiny ops" if is_tiny
             else "The CPU runs Python between ops")
    return [ctx.finding(FindingKind.HOST_BOUND, title, saving, evidence, fix, acts=acts, idle_us=idle)]


def _saving(ctx: RuleContext, found, gaps_us: float, keep_optimizer: bool, recorded: float, per_op: float,
            compiled: bool):
    """(saving, of it the gap time cut, the fused ops' rows, the recording's evidence line, the compiled
    code's evidence line) over the window.

    Without an unprofiled step: the gaps (their share of the profiled step carries over). With one
    (:func:`~.recording.dilation`): the plain script's share of the gaps, plus the own time of the tiny
    ops a compiled step fuses away (their roofline work whole, their overhead at that share), is what
    the plain script saves; it is given as the same share of the profiled step (× profiled ÷
    unprofiled step), as every saving is. Either way, less what the compiled code itself costs per call
    (:mod:`.compiled_calls`) — unless the step is compiled already (the fix is then the graph breaks)."""
    n = ctx.ranks
    removed = {pos: compiled_away(ctx.analyses[pos], g, keep_optimizer) for pos, g in found}
    kept = None if compiled else kept_by_compiled(ctx, found, sum(r.externs for r in removed.values()) / n)
    kept_us = kept.us if kept is not None else 0.0
    kept_line = kept.line(fmt_time) if kept is not None and kept.us > 0 else None
    scale = ctx.step_scale
    stretch = dilation(ctx, found)
    if stretch is None:
        saving = max(0.0, gaps_us - kept_us)
        return saving, saving, None, None, kept_line
    fused = sum(r.fused_us for r in removed.values()) / n
    share = stretch.plain_share
    # the fused ops' own time: their roofline work as recorded, their overhead as the plain script pays it
    fused_over = sum(float(overhead_by_row(ctx.analyses[pos])[r.fused_rows].sum()) for pos, r in removed.items()) / n
    plain = max(0.0, gaps_us * share + fused - fused_over * (1.0 - share) - kept_us)
    t = ctx.diagnosis.time
    saving = plain * ctx.recorded_stretch
    idle = saving * gaps_us / (gaps_us + fused) if gaps_us + fused > 0 else 0.0
    acts = {pos: r.fused_rows for pos, r in removed.items() if len(r.fused_rows)}
    k = run_op_us(ctx, recorded * scale)
    stretched = (f"stretching it {stretch.factor:.2f}×" if stretch.factor
                 else "all of it: the plain script has no overhead left to cut")
    line = (f"the profiler's own cost: the steps took {fmt_time(t.step_us)} profiled and "
            f"{fmt_time(t.unprofiled_step_us)} after it stopped ({k:.2f} µs per recorded op, {recorded * scale:,.0f} "
            f"a step; the probe's bookkeeping alone: {per_op:g} µs); the {fmt_time(stretch.added_us)} it added falls on "
            f"the overhead — {fmt_time(stretch.gaps_us)} of gaps and {fmt_time(stretch.overhead_us)} of the ops' time "
            f"beyond their roofline — {stretched} (work at its roofline keeps its speed); the plain script pays "
            f"{share:.0%} of the {fmt_time(gaps_us)} of gaps the fix removes"
            + (f", and {fmt_time(fused - fused_over * (1.0 - share))} of the {fmt_time(fused)} that "
               f"{sum(len(r.fused_rows) for r in removed.values()) / n:,.0f} tiny ops fused away took (runs of "
               f"{FUSED_RUN_OPS}+ between kernel calls)" if fused > 0 else "")
            + (f", less {fmt_time(kept_us)} the compiled code keeps (below)" if kept_us > 0 else "")
            + f" = {fmt_time(plain)} of the plain script's time; as a share of the profiled "
            f"step → {ctx.per_step(saving)}")
    return saving, idle, acts, line, kept_line


def _fix(ctx: RuleContext, found, where: dict, is_tiny: bool, compiled: bool) -> str:
    total = sum(us for us, _ in where.values()) or 1.0
    in_model = sum(us for label, (us, _) in where.items() if label not in _NOT_MODULES)
    opt_us = where.get("optimizer step", [0.0, 0])[0]
    lines = []
    if compiled:
        lines.append("# the step already runs torch.compile'd regions: the gaps are between them — find the graph "
                     "breaks (TORCH_LOGS=graph_breaks) and compile\n# the rest of the step too (loss, optimizer: "
                     "torch.compile(opt.step))")
    elif in_model >= 0.8 * total:
        modules = [label for label in where if label not in _NOT_MODULES]
        lines.append(f"model = torch.compile(model)  # the gaps are inside {_common_module(modules)}: one compiled "
                     f"graph, no Python between its ops")
    elif "lightning" in ctx.frameworks:  # Lightning runs the step: no train_step of the user's to compile
        lines.append("self.model = torch.compile(self.model)  # in your LightningModule's __init__ (or "
                     "configure_model): Lightning calls training_step, forward and backward run compiled; "
                     "the loss too if it is computed inside the compiled module")
    elif "hf_trainer" in ctx.frameworks:
        lines.append("TrainingArguments(..., torch_compile=True)  # the Trainer compiles the model it runs "
                     "(forward, loss when the model computes it, backward)")
    elif not ctx.is_training and in_model > 0:
        # inference (no backward, no optimizer): there is no training step; the gaps outside the model
        # are the decoding loop's own Python (HF generate: sampling, stopping criteria, cache updates)
        lines.append("model = torch.compile(model)  # inference: the model's forward runs as one compiled graph per "
                     "call; the gaps outside it are the loop that calls it (with HF generate: its sampling and "
                     "cache updates), which more sequences per call amortise")
    elif not ctx.is_training:  # inference with the gaps outside the model, or no modules recorded
        lines.append("fn = torch.compile(fn)  # fn: the function that runs the forward pass — the model, or the "
                     "loop body that calls it (inference: the trace has no backward or optimizer step"
                     + ("; it records no modules to narrow it down)" if "outside any module" not in where else
                        "; the gaps are outside the model's modules too, so compiling the model alone leaves them)"))
    elif "outside any module" in where:
        lines.append("train_step = torch.compile(train_step)  # the function that runs forward, loss and backward: "
                     "the gaps are outside the model's modules too (loss, user code), so compiling the model alone "
                     "leaves them")
    else:
        lines.append("train_step = torch.compile(train_step)  # the function that runs forward, loss and backward "
                     "(the trace records no modules to narrow it down)")
    optim = next((g.optimizer for _, g in found if g.optimizer), None)
    per = sum(g.optimizer_ops for _, g in found) / ctx.ranks
    steps = sum(g.optimizer_steps for _, g in found) / ctx.ranks
    fused = [r for r in ctx.prior.get("optimizer", ()) if r.finding.fix]
    if fused and opt_us > 0:
        lines.append(f"# the optimizer step's {fmt_time(opt_us)} of gaps go with the fused step advised in "
                     f"\"{fused[0].title}\"")
    elif (optim and opt_us >= OPTIMIZER_GAP_SHARE * total and per >= PER_PARAMETER_OPS * steps
            and not any(optimizer_batched(a) for a in ctx.analyses)):
        lines.append(f"optimizer = torch.optim.{optim}(params, lr=lr, foreach=True)  # the step dispatches "
                     f"{per:,.0f} per-parameter ops ({fmt_time(opt_us)} of gaps); foreach: a few ops per "
                     f"tensor list")
    if is_tiny:
        lines.append("# or larger batches / fewer, larger tensors: the same number of ops, more work in each")
    return "\n".join(lines)


def _common_module(paths: list[str]) -> str:
    """The module that holds every path (``Decoder`` for ``Decoder.tok`` and ``Decoder.layers.*.attn``),
    else "the model's modules (…)" naming a few of them (paths relative to the top-level model)."""
    split = [p.split(".") for p in paths]
    common = []
    for parts in zip(*split):
        if len(set(parts)) != 1 or parts[0] == "*":
            break
        common.append(parts[0])
    if common:
        return ".".join(common)
    return "the model's modules (" + ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "") + ")"


__all__ = ["host_overhead"]
