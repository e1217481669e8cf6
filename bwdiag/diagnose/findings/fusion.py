"""Fusion: chains of memory-bound elementwise / norm / activation kernels that one kernel could do.

Saving = the bytes a fused kernel would not move (each intermediate tensor written and read back)
÷ the bandwidth the unfused kernels achieved. Runs that repeat (the same op sequence in every
layer) are reported once, with every occurrence counted.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.chains import fusable_runs
from bwdiag.diagnose.findings.compiled_loops import chained_costs, loop_costs
from bwdiag.diagnose.findings.helpers import fmt_bandwidth, fmt_bytes, fmt_time, generic_module, in_optimizer_step, op_chain
from bwdiag.diagnose.model import FindingKind

#: Module patterns a title names before counting the rest.
MAX_NAMED_MODULES = 3

#: Most fusion findings reported (the largest patterns); the rest are summed into the last line.
MAX_PATTERNS = 5

_NORM = re.compile(r"rms_?norm|layer_?norm|group_?norm|batch_?norm|norm\b", re.I)
_RMS_OPS = {"aten::pow", "aten::mean", "aten::rsqrt"}
#: Ops of a norm computed by hand (mean, variance, reciprocal square root …).
_HAND_NORM_OPS = {"aten::mean", "aten::var", "aten::var_mean", "aten::std", "aten::rsqrt", "aten::pow", "aten::sqrt"}
#: Ops that are already a fused norm kernel.
_NORM_OP = re.compile(r"^aten::(native_)?(layer_norm|rms_norm|_fused_rms_norm|group_norm|batch_norm|instance_norm)"
                      r"|_batch_norm_impl|^aten::native_batch_norm|^aten::native_group_norm")
#: Autograd nodes of a loss's backward, and backward work in general.
_LOSS_NODE = re.compile(r"(NllLoss|MseLoss|CrossEntropy|BinaryCrossEntropy|L1Loss|SmoothL1Loss|HuberLoss|KlDiv)\w*Backward")
_BACKWARD = re.compile(r"Backward|_backward|^autograd::engine")
#: A module that is a loss function itself (``MSELoss_0``, ``CrossEntropyLoss``, ``criterion``).
_LOSS_MODULE = re.compile(r"Loss(_\d+)?$|^(loss|criterion)", re.I)
#: Ops of a loss function (``F.cross_entropy`` → log_softmax + nll_loss).
_LOSS_OPS = re.compile(r"^aten::(log_softmax|_log_softmax|nll_loss|nll_loss_forward|nll_loss2d|cross_entropy_loss|"
                       r"mse_loss|binary_cross_entropy|l1_loss|smooth_l1_loss|huber_loss|kl_div)")
_GELU = re.compile(r"gelu", re.I)


def fusion(ctx: RuleContext) -> list[RuleResult]:
    """Runs of unfused memory-bound kernels over same-size tensors, one finding per repeated pattern."""
    patterns: dict[tuple, list] = defaultdict(list)  # op-name sequence -> [(rank, run)]
    loop_ns = chained_ns = None
    if ctx.is_cpu:  # a CPU trace: the fused loop is Inductor's C++, its arithmetic at the plain script's speed
        stretch = ctx.recorded_stretch
        loop_ns = {op: ns * stretch for op, ns in loop_costs(ctx)[0].items()}
        chained_ns = {op: ns * stretch for op, ns in chained_costs(ctx).items()}
    for rank_pos, a in enumerate(ctx.analyses):
        taken = ctx.claimed(rank_pos)  # eager attention, layout copies, cast round trips: reported already
        op_names = a.activities["op_name"].to_numpy()
        optimizer = in_optimizer_step(a)
        for run in fusable_runs(a.activities, a.trace.ops, loop_ns=loop_ns, chained_ns=chained_ns):
            if taken.intersection(run.rows.tolist()):
                continue
            if optimizer[run.rows].any():
                # A per-parameter optimizer loop chains updates of *different* parameters whose sizes
                # happen to match: independent work, not a dataflow chain (the optimizer and
                # host-overhead rules give its fix: fused / foreach).
                continue
            names = tuple(op_names[run.rows].tolist())
            patterns[names].append((rank_pos, run))
    ranked = sorted(patterns.items(), key=lambda kv: -sum(r.saving_us for _, r in kv[1]))
    findings = []
    for names, runs in ranked[:MAX_PATTERNS]:
        f = _finding(ctx, names, runs)
        if f is not None:
            findings.append(f)
    return findings


def _finding(ctx: RuleContext, names: tuple, runs: list) -> RuleResult | None:
    saving = sum(r.saving_us for _, r in runs) / ctx.ranks
    if not ctx.worth_reporting(saving):
        return None
    a0 = ctx.analyses[runs[0][0]]
    first = runs[0][1]
    sub = a0.activities.iloc[first.rows]
    modules = [_main_module(ctx.analyses[p].activities["module"].iloc[r.rows]) for p, r in runs]
    where = _pattern_name(modules)
    shape = _largest_shape(sub)
    n_ops = len(dict.fromkeys(sub["op"]))
    per_run = f"{n_ops} ops" if n_ops == len(sub) else f"{n_ops} ops ({len(sub)} kernels)"
    bytes_total = sum(r.bytes for _, r in runs) / ctx.ranks
    saved_total = sum(r.saved_bytes for _, r in runs) / ctx.ranks
    time_total = sum(r.time_us for _, r in runs) / ctx.ranks
    bw = bytes_total / (time_total / 1e6)
    unit = "kernels" if not ctx.is_cpu else "CPU ops"
    evidence = [
        f"a chain of {per_run} over {shape} ({ctx.times(len(runs) / ctx.ranks)}): {_sequence(names)}",
        _saving_line(ctx, [r for _, r in runs], unit, saving),
        *_table_modules(ctx, runs)[:3],
    ]
    # the title names the ops (a short chain in full, a long one by its ends) and, where recorded, the modules
    title = f"Fuse {per_run} ({_sequence(names, TITLE_OPS)})" + (f" in {where}" if where else "")
    title += (f" ({ctx.times(len(runs) / ctx.ranks)})" if len(runs) > ctx.ranks else "")
    acts = defaultdict(list)
    for p, r in runs:
        acts[p].extend(r.rows.tolist())
    recorded = any(a.activities["module"].notna().any() for a in ctx.analyses)
    enclosing = tuple(n for o in dict.fromkeys(sub["op"]) if o >= 0 for n in op_chain(a0.trace.ops, int(o))[1:])
    return ctx.finding(FindingKind.FUSION, title, saving, evidence,
                       _fix(names, modules, ctx.is_cpu, recorded, enclosing, _loss_module(ctx)), acts=acts)


#: Ops of a chain its finding's title names in full (evidence lists up to 12).
TITLE_OPS = 5


def _loss_module(ctx: RuleContext) -> str | None:
    """The module whose forward computes the loss (a Hugging Face model given ``labels=``), when a
    loss op of the forward pass ran inside one; None when the loss runs outside every module."""
    for a in ctx.analyses:
        acts = a.activities
        if acts.empty or "module" not in acts:
            continue
        for name, module in zip(acts["op_name"].to_numpy(), acts["module"].to_numpy()):
            if not isinstance(module, str) or not module or not _LOSS_OPS.match(str(name)) or _BACKWARD.search(str(name)):
                continue
            # a loss module of its own (nn.MSELoss called as criterion(out, y)) is the loss, not the model
            if not _LOSS_MODULE.search(module.split(".")[0]):
                return module
    return None


def _saving_line(ctx: RuleContext, runs: list, unit: str, saving: float) -> str:
    """How the saving was worked out: the saved bytes at the achieved bandwidth; where the
    transcendental ops' arithmetic outlasts the fused loop's bytes, unfused time − that arithmetic; on
    a CPU thread, unfused time − (the fused loop's bytes at the best op's bandwidth + its arithmetic)."""
    n = ctx.ranks
    bytes_total = sum(r.bytes for r in runs) / n
    saved_total = sum(r.saved_bytes for r in runs) / n
    time_total = sum(r.time_us for r in runs) / n
    bw = bytes_total / (time_total / 1e6)
    line = f"unfused {unit} move {fmt_bytes(bytes_total)} in {fmt_time(time_total)} ({fmt_bandwidth(bw)} achieved); "
    if all(r.serial for r in runs):
        # a CPU loop: its bytes at the best op's line, and its arithmetic priced as Inductor's code on the
        # host on top (one thread does both in turn)
        memory = sum(r.memory_floor_us for r in runs) / n
        arith = sum(r.arithmetic_us for r in runs) / n
        lo, hi = (fmt_bandwidth(f(r.best_bytes_per_s for r in runs)) for f in (min, max))
        line_rate = f"the best op's {hi}" if lo == hi else f"each run's best op ({lo}–{hi})"
        line += f"fused, {fmt_bytes(bytes_total - saved_total)} would take {fmt_time(memory)} at {line_rate}"
        if arith <= 0:
            return line + f" → saves {fmt_time(time_total)} − {fmt_time(memory)} = {ctx.per_step(saving)}"
        ops = ", ".join(dict.fromkeys(str(o).removeprefix("aten::") for r in runs for o in r.arithmetic_ops))
        ops += " (each feeding the next)" * any(r.chained for r in runs)
        return (line + f", plus {fmt_time(arith)} for {ops} in the compiled loop "
                       f"({loop_costs(ctx)[1]}{_stretch_note(ctx)}) — one CPU thread does both in turn → saves "
                       f"{fmt_time(time_total)} − {fmt_time(memory + arith)} = {ctx.per_step(saving)}")
    bound = [r for r in runs if r.compute_bound]
    if not bound:
        return (line + f"fused: {fmt_bytes(bytes_total - saved_total)} → saves {fmt_bytes(saved_total)} ÷ "
                       f"{fmt_bandwidth(bw)} = {ctx.per_step(saving)}")
    arith = sum(r.arithmetic_us for r in bound) / n
    memory = sum(r.memory_floor_us for r in runs if not r.compute_bound) / n
    ops = ", ".join(dict.fromkeys(str(o).removeprefix("aten::") for r in bound for o in r.arithmetic_ops))
    best = max(r.best_bytes_per_s for r in bound)
    return (line + f"fused, {fmt_bytes(bytes_total - saved_total)} would take {fmt_time(sum(r.memory_floor_us for r in runs) / n)} "
            f"at that bandwidth, but {ops} compute for {fmt_time(arith)} beyond their own bytes at the chain's best "
            f"{fmt_bandwidth(best)} — arithmetic the fused loop still pays (it is compute-bound) → saves "
            f"{fmt_time(time_total)} − {fmt_time(arith + memory)} = {ctx.per_step(saving)}")


def _stretch_note(ctx: RuleContext) -> str:
    """How the calibrated arithmetic (the plain script's speed) was put in the recorded window's terms."""
    stretch, t = ctx.recorded_stretch, ctx.diagnosis.time
    if not (ctx.is_cpu and loop_costs(ctx)[0]) or abs(stretch - 1.0) < 0.005:
        return ""
    return (f", × {stretch:.2f}: the recorded steps took {fmt_time(stretch * t.unprofiled_step_us)} on average, "
            f"{fmt_time(t.unprofiled_step_us)} without the profiler, and the bytes' time is the recording's")


def _table_modules(ctx: RuleContext, runs: list) -> list[str]:
    """Module paths as the kernel table shows them (each kernel group's first module), so the
    report can link the evidence to the table rows."""
    out: dict[str, None] = {}
    for pos, run in runs:
        a = ctx.analyses[pos]
        for gid in a.activities["group"].iloc[run.rows]:
            m = a.groups.at[gid, "module"]
            if isinstance(m, str) and m:
                out.setdefault(m)
    return list(out)


def _main_module(modules) -> str | None:
    """The module most of a run's kernels belong to (a residual add before a norm: the norm)."""
    known = modules.dropna()
    return known.mode().iloc[-1] if len(known) else None


def _sequence(names: tuple, most: int = 12) -> str:
    """``a → b → c``: the ops of a chain without ``aten::``; past ``most`` ops, the first ``most − 1``
    and ``…`` (a title's shorter list: the first ``most − 2``, ``…`` and the last)."""
    short = [str(n).removeprefix("aten::") for n in names]
    if len(short) <= most:
        return " → ".join(short)
    return " → ".join(short[:most - 1] + ["…"] if most >= 12 else short[:most - 2] + ["…", short[-1]])


def _pattern_name(modules: list[str | None]) -> str | None:
    """The modules of a repeated pattern, naming every one that was counted:
    ``Qwen2Model_0.Qwen2DecoderLayer_*.Qwen2RMSNorm_*`` when every layer's norm ran it,
    ``TinyGPT.{blocks.*.ln1, blocks.*.ln2, ln_f}`` when different modules did (most runs first)."""
    known = [m for m in modules if m]
    if not known:
        return None
    if len(set(known)) == 1:
        return known[0]
    generic = [p for p, _ in Counter(generic_module(m) for m in known).most_common()]
    if len(generic) == 1:
        return generic[0]
    parts = [g.split(".") for g in generic]
    common = 0
    while all(len(p) > common + 1 for p in parts) and len({p[common] for p in parts}) == 1:
        common += 1
    rest = [".".join(p[common:]) for p in parts]
    shown = ", ".join(rest[:MAX_NAMED_MODULES]) + (f", … +{len(rest) - MAX_NAMED_MODULES} more"
                                                    if len(rest) > MAX_NAMED_MODULES else "")
    prefix = ".".join(parts[0][:common])
    return f"{prefix}.{{{shown}}}" if prefix else f"{{{shown}}}"


def _largest_shape(sub) -> str:
    best = max((s for s in sub["shapes"] if isinstance(s, str)), key=len, default=None)
    return best.split("], ")[0] + ("]" if "], " in best else "") if best else "tensors of one size"


def _fix(names: tuple, modules: list, cpu: bool, modules_recorded: bool = True,
         context: tuple = (), loss_module: str | None = None) -> str:
    """The fix for a chain: a compile target that holds it, and a fused norm only where the chain
    computes the norm by hand (a chain through ``aten::layer_norm`` already uses the fused op).
    ``context``: the names of the ops enclosing the chain's ops (autograd nodes in the backward);
    ``loss_module``: the module whose forward computes the loss, when one does."""
    mods = " ".join(str(m) for m in modules if m)
    ops = set(names)
    fused_norm = next((n for n in names if _NORM_OP.search(str(n))), None)
    how = "Inductor's C++ backend fuses the chain into one loop" if cpu else "Inductor fuses the chain into one kernel"
    around = [str(n) for n in (*names, *context)]
    loss = next((n for n in around if _LOSS_OPS.search(n) or _LOSS_NODE.search(n)), None)
    backward = any(_BACKWARD.search(n) for n in around)
    if any(modules):
        lines = [f"model = torch.compile(model)  # {how}"]
    elif loss and loss_module:  # the loss's backward, of a loss the model's forward computes (labels=…)
        lines = [f"model = torch.compile(model)  # the chain ({loss}) is the backward of the loss that "
                 f"{loss_module.split('.')[0]}'s forward computes; AOTAutograd compiles that backward too: {how}"]
    elif loss:  # the loss (or its backward) is a function outside the model: compiling the model misses it
        lines = [f"loss_fn = torch.compile(loss_fn)  # the chain ({loss}) is in the loss, outside the model's "
                 f"modules: {how}",
                 "# or compile the training step that calls model and loss: train_step = torch.compile(train_step)"]
    elif backward:  # backward ops carry no module: the forward's compiled graph holds their backward
        lines = [f"model = torch.compile(model)  # the chain runs in the backward pass (no module is recorded "
                 f"there); AOTAutograd compiles the model's backward too: {how}"]
    elif modules_recorded:  # the chain runs outside every module of the model: compiling the model misses it
        lines = [f"fn = torch.compile(fn)  # fn: the function that runs these ops, outside the model's modules "
                 f"(compiling the model alone misses them): {how}"]
    else:
        lines = [f"fn = torch.compile(fn)  # fn: the model or function that runs these ops (the trace records no "
                 f"modules to name it): {how}"]
    if fused_norm:
        lines.append(f"# the norm is already a fused op ({fused_norm}): compiling fuses the ops around it into it")
    elif _RMS_OPS <= ops or ("RMSNorm" in mods and ops & _HAND_NORM_OPS):
        lines.append("# or a fused RMSNorm: torch.nn.RMSNorm(hidden, eps=eps) (compiled), or "
                     "from liger_kernel.transformers import LigerRMSNorm")
    elif _NORM.search(mods) and ops & _HAND_NORM_OPS:
        lines.append("# or a fused norm kernel: torch.nn.LayerNorm / F.layer_norm instead of a hand-written mean/var chain")
    if _GELU.search(mods + " " + " ".join(map(str, names))):
        lines.append("# bias + GELU: fold into the GEMM epilogue (torch.compile, or Transformer Engine "
                     "te.LayerNormMLP(activation='gelu'))")
    return "\n".join(lines)
