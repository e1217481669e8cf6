"""A fix must apply (issue 13, Build 2): no advice the code already follows or the device cannot
run, and a compile target that holds the chain. Hand-built contexts (tests/rule_context.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from bwdiag.diagnose.findings import attention, fusion, kv_cache, quantization
from tests.rule_context import context, kernel, op, rank

MiB = 1 << 20
F32 = "float"
BF16 = "c10::BFloat16"
N = [1 << 20]


def _chain(names: list[str], module: str | None = None, parent_of: dict | None = None, extra_ops=()):
    """Back-to-back 1 Mi-element fp32 elementwise ops (4 MiB each); two-input ops move 12 MiB in
    12 µs, one-input ops 8 MiB in 8 µs: 1 MiB/µs achieved."""
    ops, acts, t = list(extra_ops), [], 0.0
    for name in names:
        two = name in ("aten::mul", "aten::add", "aten::sub")
        ops.append(op(name, dims=[N, N] if two else [N], types=[F32, F32] if two else [F32], ts=t, module=module,
                      parent=(parent_of or {}).get(name, -1)))
        b = (12 if two else 8) * MiB
        acts.append(kernel(f"{name}_kernel", op=len(ops) - 1, ts=t, dur=b / MiB, category="elementwise",
                           bound="memory", bytes=b, module=module))
        t += b / MiB
    return rank(ops, acts)


def _fix(r) -> str:
    (f,) = r
    return f.finding.fix


def test_chain_through_layer_norm_gets_no_hand_written_norm_advice():
    # add (residual) → layer_norm inside model.blocks.0.ln: the norm is aten::layer_norm already.
    r = fusion.fusion(context([_chain(["aten::add", "aten::layer_norm"], module="model.blocks.0.ln")], total_us=100))
    fix = _fix(r)
    # add 12 MiB + layer_norm 8 MiB in 20 µs; the 4 MiB intermediate written and read back: 8 µs.
    assert r[0].est_saving_us == pytest.approx(8.0)
    assert "hand-written" not in fix and "already a fused op (aten::layer_norm)" in fix
    assert fix.startswith("model = torch.compile(model)")  # the chain is inside the model's modules


def test_hand_written_norm_chain_gets_the_fused_norm():
    r = fusion.fusion(context([_chain(["aten::sub", "aten::rsqrt", "aten::mul"], module="model.LayerNorm_0")],
                              total_us=100))
    assert "torch.nn.LayerNorm / F.layer_norm instead of a hand-written mean/var chain" in _fix(r)


def test_chain_in_the_loss_outside_the_model_compiles_the_loss():
    """mul → log_softmax with no module, in a trace that records modules (an op of model.fc ran
    before): F.cross_entropy outside the model — compiling the model would not touch it."""
    fc = op("aten::addmm", dims=[[4, 4], [4, 4], [4, 4]], types=[F32, F32, F32], ts=-50, module="model.fc")
    a = _chain(["aten::mul", "aten::_log_softmax"], extra_ops=[fc])
    a.activities["module"] = a.activities["module"].astype(object)
    row = kernel("gemm", op=0, ts=-50, dur=1, category="gemm", bound="compute", module="model.fc")
    a.activities.loc[len(a.activities)] = pd.Series(row)  # the model's GEMM: modules are recorded
    fix = _fix(fusion.fusion(context([a], total_us=100)))
    assert fix.startswith("loss_fn = torch.compile(loss_fn)")
    assert "aten::_log_softmax" in fix and "model = torch.compile(model)" not in fix


def test_backward_of_a_loss_the_model_computes_compiles_the_model():
    """A Hugging Face model given labels= computes its loss in its forward: the loss's backward chain
    (no module: backward ops carry none) is compiled with the model, and there is no loss_fn to name."""
    fwd = op("aten::_log_softmax", dims=[[4, 4], []], types=[F32, "Scalar"], ts=-50, module="GPT2LMHeadModel")
    a = _chain(["aten::zero_", "aten::_log_softmax_backward_data"], extra_ops=[fwd])
    a.activities["module"] = a.activities["module"].astype(object)
    row = kernel("log_softmax", op=0, ts=-50, dur=1, category="elementwise", bound="memory",
                 module="GPT2LMHeadModel")
    a.activities.loc[len(a.activities)] = pd.Series({**row, "op_name": "aten::_log_softmax"})
    fix = _fix(fusion.fusion(context([a], total_us=100)))
    assert fix.startswith("model = torch.compile(model)") and "loss_fn" not in fix
    assert "the backward of the loss that GPT2LMHeadModel's forward computes" in fix
    # A loss module of its own (nn.MSELoss called as criterion(out, y), recorded as MSELoss_0) is the
    # loss outside the model: compiling the model would not reach it.
    a.activities.loc[len(a.activities) - 1, "module"] = "MSELoss_0"
    assert _fix(fusion.fusion(context([a], total_us=100))).startswith("loss_fn = torch.compile(loss_fn)")


def test_chain_without_any_module_recorded_names_no_model():
    fix = _fix(fusion.fusion(context([_chain(["aten::mul", "aten::add", "aten::relu"])], total_us=100)))
    assert fix.startswith("fn = torch.compile(fn)") and "no modules" in fix


def test_per_parameter_optimizer_updates_are_no_fusion_chain():
    """mul → add over equal-size tensors inside Optimizer.step: updates of two different parameters
    whose sizes match, not a dataflow chain."""
    step = op("Optimizer.step#SGD.step", cat="user_annotation", ts=0, end=100)
    a = _chain(["aten::mul", "aten::add"], extra_ops=[step])
    assert fusion.fusion(context([a], total_us=100)) == []
    # The same ops outside the step are a chain (2·4 MiB of 24 MiB in 24 µs = 8 µs).
    (r,) = fusion.fusion(context([_chain(["aten::mul", "aten::add"])], total_us=100))
    assert r.est_saving_us == pytest.approx(8.0)


def _attention(parent: int = -1, extra_ops=(), module: str | None = None):
    """bmm → softmax → bmm over an [8, 256, 256] fp32 score tensor; ``parent``: index of the op
    enclosing the softmax (an SDPA call)."""
    s = [8, 256, 256]
    ops = list(extra_ops) + [op("aten::bmm", dims=[[8, 256, 64], [8, 64, 256]], types=[F32, F32]),
                             op("aten::_softmax", dims=[s, [], []], types=[F32, "Scalar", "Scalar"], parent=parent),
                             op("aten::bmm", dims=[s, [8, 256, 64]], types=[F32, F32])]
    k = len(extra_ops)
    g = "cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8"
    acts = [kernel(g, op=k, ts=0, dur=20, category="gemm", bound="compute", module=module),
            kernel("softmax_warp_forward", op=k + 1, ts=20, dur=7, category="softmax", bound="memory",
                   bytes=4 * MiB, module=module),
            kernel(g, op=k + 2, ts=27, dur=20, category="gemm", bound="compute", module=module)]
    return acts, ops


def test_attention_inside_sdpa_is_its_math_fallback_not_use_sdpa():
    sdpa = op("aten::scaled_dot_product_attention", ts=0, end=50)
    acts, ops = _attention(parent=0, extra_ops=[sdpa])
    ops[2]["parent"] = 0  # softmax (index 2) runs inside SDPA (index 0)
    (r,) = attention.attention_materialisation(context([rank(ops, acts)], total_us=100))
    assert "math fallback" in r.title and r.est_saving_us == pytest.approx(7.0)  # the softmax between
    assert "attn_implementation" not in r.finding.fix and "sdpa_kernel" in r.finding.fix


def test_no_fused_attention_advice_where_the_module_runs_flash_kernels():
    acts, ops = _attention(module="model.h.0.attn")
    ops.append(op("aten::_flash_attention_forward", ts=100, end=110))
    acts.append(kernel("flash_fwd_kernel", op=len(ops) - 1, ts=100, dur=10, category="attention",
                       bound="compute", module="model.h.1.attn"))  # the same module pattern, model.h.*.attn
    assert attention.attention_materialisation(context([rank(ops, acts)], total_us=200)) == []


def test_no_8bit_kv_cache_on_cpu():
    q, kv = [1, 32, 1, 128], [1, 32, 4096, 128]
    ops = [op("aten::scaled_dot_product_attention", dims=[q, kv, kv], types=[BF16, BF16, BF16])]
    acts = [kernel("aten::scaled_dot_product_attention", op=0, ts=100 * i, dur=100, category="attention",
                   bound="memory", dtype="bf16", kind="cpu_op", bytes=2 * 32 * 4096 * 128 * 2) for i in range(4)]
    assert kv_cache.kv_cache_quantization(context([rank(ops, acts)], total_us=10000, trace_kind="cpu")) == []
    # the same work on a GPU is advised (test_rules_unit: 200 µs)
    assert kv_cache.kv_cache_quantization(context([rank(ops, acts)], total_us=10000))


def test_fp8_weight_quantization_only_on_fp8_devices():
    x, w = [1, 4096], [4096, 4096]
    ops = [op("aten::linear", dims=[x, w], types=[BF16, BF16])]
    acts = [kernel("gemv_bf16", op=0, ts=100 * i, dur=100, category="gemm", bound="memory", dtype="bf16",
                   tensor=True, bytes=4096 * 4096 * 2 + 16384) for i in range(10)]
    (a100,) = quantization.weight_only_quantization(context([rank(ops, acts)], total_us=10000))
    assert "int8_weight_only" in a100.finding.fix and "fp8" not in a100.finding.fix  # A100: no fp8 units
    h100 = {"peak_flops": {"bf16": 989e12, "fp8": 1979e12}, "vector_flops": {}, "memory_bandwidth": 3.35e12}
    (r,) = quantization.weight_only_quantization(context([rank(ops, acts)], total_us=10000, device=h100))
    assert "float8_weight_only" in r.finding.fix


def test_backward_chain_without_module_compiles_the_model_and_says_why():
    """Backward ops carry no module: a chain under an autograd node is the model's backward
    (AOTAutograd compiles it with the forward), not code "outside the model"."""
    node = op("autograd::engine::evaluate_function: MulBackward0", ts=0, end=100)
    a = _chain(["aten::mul", "aten::add"], extra_ops=[node], parent_of={"aten::mul": 0, "aten::add": 0})
    a.activities["module"] = a.activities["module"].astype(object)
    a.activities.loc[len(a.activities)] = pd.Series(
        kernel("gemm", op=0, ts=200, dur=1, category="gemm", bound="compute", module="model.fc"))
    fix = _fix(fusion.fusion(context([a], total_us=300)))
    assert fix.startswith("model = torch.compile(model)") and "backward pass" in fix


# -- labels that match what is counted (Build 3) ---------------------------------------------------


def test_title_names_every_module_the_pattern_counted():
    from bwdiag.diagnose.findings.fusion import _pattern_name

    # ln1 of two blocks, ln2 of one, ln_f: four runs of the same op sequence, three module patterns.
    mods = ["TinyGPT.blocks.0.ln1", "TinyGPT.blocks.1.ln1", "TinyGPT.blocks.0.ln2", "TinyGPT.ln_f"]
    assert _pattern_name(mods) == "TinyGPT.{blocks.*.ln1, blocks.*.ln2, ln_f}"
    assert _pattern_name(["m.blocks.0.ln1", "m.blocks.3.ln1"]) == "m.blocks.*.ln1"
    assert _pattern_name(["m.a", "m.b", "m.c", "m.d", "m.a"]) == "m.{a, b, c, … +1 more}"
    assert _pattern_name(["x.a", "y.b"]) == "{x.a, y.b}"
    assert _pattern_name([None, "m.fc"]) == "m.fc"


def test_fusion_title_over_two_module_patterns():
    """The same add → relu chain in model.blocks.0.mlp and in model.head, a GEMM between them
    ending the first run: one pattern, two runs, and the title names both modules."""
    ops, acts = [], []
    for t0, module in ((0, "model.blocks.0.mlp"), (100, "model.head")):
        for k, (name, b) in enumerate((("aten::add", 12), ("aten::relu", 8))):
            dims, types = ([N, N], [F32, F32]) if b == 12 else ([N], [F32])
            ops.append(op(name, dims=dims, types=types, ts=t0 + 12 * k, module=module))
            acts.append(kernel(f"{name}_kernel", op=len(ops) - 1, ts=t0 + 12 * k, dur=b, category="elementwise",
                               bound="memory", bytes=b * MiB, module=module))
        ops.append(op("aten::mm", dims=[[64, 64], [64, 64]], types=[F32, F32], ts=t0 + 30))
        acts.append(kernel("gemm", op=len(ops) - 1, ts=t0 + 30, dur=5, category="gemm", bound="compute"))
    (r,) = fusion.fusion(context([rank(ops, acts)], total_us=200))
    # each run: 4 MiB intermediate written and read back, 20 MiB in 20 µs → 8 µs; two runs: 16 µs
    assert r.est_saving_us == pytest.approx(16.0)
    assert r.title.startswith("Fuse 2 ops (add → relu) in model.{blocks.*.mlp, head}")


def test_foreach_adamw_does_not_run_per_parameter():
    """AdamW(foreach=True): the step's kernels are multi_tensor_apply over tensor lists — no
    "runs per parameter" finding (the fused-step advice prices the foreach passes instead)."""
    from bwdiag.diagnose.findings import optimizer

    p = [1 << 18]
    ops = [op("Optimizer.step#AdamW.step", cat="user_annotation", ts=0, end=100)]
    acts = []
    for k, name in enumerate(("aten::_foreach_lerp_", "aten::_foreach_mul_", "aten::_foreach_addcmul_",
                              "aten::_foreach_addcdiv_")):
        ops.append(op(name, dims=[p, p], types=[F32, F32], ts=10 * k + 1, end=10 * k + 2))
        acts.append(kernel("void at::native::multi_tensor_apply_kernel<...>", op=len(ops) - 1, ts=10 * k + 5, dur=4,
                           category="elementwise", bound="memory", bytes=4 * MiB))
    (r,) = optimizer.per_parameter_optimizer(context([rank(ops, acts)], total_us=1000))
    # Not "per parameter": the foreach step's own finding. Its 4 ops pass over the parameters
    # 3 + 2 + 4 + 4 = 13 times in 4 × 4 µs of kernels; a fused step's 7 passes: 16 × (1 − 7/13) µs.
    assert r.title == "Use the fused AdamW step instead of foreach kernels"
    assert r.est_saving_us == pytest.approx(16.0 * (1 - 7 / 13))


def test_foreach_adamw_on_cpu_loops_inside_the_foreach_op_and_is_not_per_parameter():
    """On a CPU, _foreach_addcdiv_ runs aten::addcdiv_ per tensor as its children: those children
    are the activities, but the step is foreach, not a Python loop over parameters."""
    from bwdiag.diagnose.findings import optimizer

    p = [1 << 18]
    names = ("lerp_", "mul_", "addcmul_", "addcdiv_")
    ops = [op("Optimizer.step#AdamW.step", cat="user_annotation", ts=0, end=100)]
    acts = []
    for k, name in enumerate(names):
        ops.append(op(f"aten::_foreach_{name}", ts=20 * k, end=20 * k + 10))
        ops.append(op(f"aten::{name}", dims=[p, p, p, []], types=[F32, F32, F32, "Scalar"], ts=20 * k + 1,
                      end=20 * k + 9, parent=len(ops) - 1))
        acts.append(kernel(f"aten::{name}", op=len(ops) - 1, ts=20 * k + 1, dur=8, kind="cpu_op",
                           category="elementwise", bound="memory", bytes=4 * MiB))
    ctx = context([rank(ops, acts)], total_us=100, trace_kind="cpu")
    assert optimizer.per_parameter_optimizer(ctx) == []
    # Without the foreach parents the same children are a per-parameter loop. On a CPU thread the
    # fused step removes the loop's ops (4 × 8 µs) and the interpreter between them (ops at 1–9, 21–29,
    # 41–49, 61–69 inside the step: 3 gaps of 12 µs) and pays one op over 7 × 1 MiB at the host's
    # bandwidth (1 MiB/µs here: 7 µs) → 32 + 36 − 7 = 61 µs. (The bytes at the loop's achieved 0.5
    # MiB/µs would say (16 − 7) MiB ÷ 0.5 = 18 µs: what the GPU path still computes.)
    for k in range(len(names)):
        ops[1 + 2 * k]["name"] = "aten::linear"  # any wrapper that is not foreach
    cpu = context([rank(ops, acts)], total_us=100, trace_kind="cpu", device={"memory_bandwidth": MiB * 1e6})
    (r,) = optimizer.per_parameter_optimizer(cpu)
    assert r.est_saving_us == pytest.approx(61.0)
    assert "saves 32 µs + 36 µs − 7 µs" in r.finding.evidence[-1]
    (g,) = optimizer.per_parameter_optimizer(context([rank(ops, acts)], total_us=100))
    assert g.est_saving_us == pytest.approx(18.0)
    # Where the loop's ops ran faster than the host's memory bandwidth (its tensors in cache: 16 MiB in
    # 32 µs = 0.5 MiB/µs against 0.25), the fused op reads the same tensors at the loop's speed:
    # 7 MiB ÷ 0.5 = 14 µs → 32 + 36 − 14 = 54 µs (at the host's 0.25 it would be 28 µs: 40).
    cached = context([rank(ops, acts)], total_us=100, trace_kind="cpu", device={"memory_bandwidth": MiB * 0.25e6})
    (c,) = optimizer.per_parameter_optimizer(cached)
    assert c.est_saving_us == pytest.approx(54.0)
    assert "14 µs at the 524 GB/s the loop's ops achieved (above the host's 262 GB/s" in c.finding.evidence[-1]


def test_a_long_chain_title_names_its_ends():
    from bwdiag.diagnose.findings.fusion import TITLE_OPS, _sequence

    names = tuple(f"aten::op{i}" for i in range(14))
    assert TITLE_OPS == 5
    assert _sequence(names[:5], TITLE_OPS) == "op0 → op1 → op2 → op3 → op4"
    assert _sequence(names[:6], TITLE_OPS) == "op0 → op1 → op2 → … → op5"
    # evidence keeps up to 12, then the first 11 and …
    assert _sequence(names) == " → ".join(f"op{i}" for i in range(11)) + " → …"
