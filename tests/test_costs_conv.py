"""Convolutions priced under every op name they appear under (PyTorch 1.x and 2.x, every backend).

The rule, stated for the family: with weight w = [K, C/g, *k] (transposed: [C_in, C_out/g, *k]) and
*wide* the activation with w[0] channels (a normal conv's output / grad_output, a transposed conv's
input), forward = dgrad = wgrad = 2·numel(wide)·prod(w[1:]) FLOPs; bias grad = numel(grad_output).
Every expected number below is worked out by hand from the recorded shapes.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from bwdiag.costs import Category, categorize_op, estimate_op
from bwdiag.diagnose.activities import cpu_activities, gpu_activities
from bwdiag.trace import load_traces

from conftest import shared_trace

RESNET = "tracelens/mi300/resnet_act_checkpoint.json.gz"
BF, F32 = "c10::BFloat16", "float"

# The real MI300 event (Ev Idx 252): convolution_backward(grad_out[10,512,7,7], x[10,512,7,7],
# w[512,512,3,3], bias_sizes [0], stride 1, padding 1, dilation 1, not transposed, groups 1,
# output_mask [True, True, False]).
G = X = [10, 512, 7, 7]
W = [512, 512, 3, 3]
ONE = 2 * (10 * 512 * 7 * 7) * (512 * 3 * 3)  # 2·numel(grad_out)·prod(w[1:]) = one dgrad or one wgrad
NG = NX = 10 * 512 * 7 * 7
NW = 512 * 512 * 3 * 3


@pytest.fixture(scope="module")
def resnet():
    traces, _ = load_traces([shared_trace(RESNET)])
    return traces[0], gpu_activities(traces[0])


def test_mi300_convolution_backward_ev252(resnet):
    trace, acts = resnet
    ops = trace.ops
    hits = ops[(ops["name"] == "aten::convolution_backward") & (ops["ext_id"] == 1277)]  # Ev Idx 252
    assert len(hits) == 1
    row = hits.iloc[0]
    assert row["dims"][:3] == [G, X, W] and row["concrete"][10] == "[True, True, False]"
    c = estimate_op(row["name"], row["dims"], row["types"], row["concrete"], row["strides"])
    assert ONE == 2_312_110_080
    assert c.flops == 2 * ONE == 4_624_220_160  # ≈ 4.62 GFLOP: dgrad + wgrad, no bias
    # dgrad reads grad_out and w, writes grad_input; wgrad reads grad_out and x, writes grad_weight (bf16)
    assert c.bytes == ((NG + NW + NX) + (NG + NX + NW)) * 2 == 11_444_224
    assert c.category is Category.CONV and c.tensor
    kernels = acts[acts["op"] == hits.index[0]]
    assert np.nansum(kernels["flops"]) == pytest.approx(2 * ONE, rel=1e-12)
    main = kernels[kernels["flops"] > 0]
    assert set(main["category"]) == {Category.CONV.value}


def test_mi300_every_convolution_backward_follows_the_rule(resnet):
    trace, _ = resnet
    ops = trace.ops
    checked = 0
    for _, row in ops[ops["name"] == "aten::convolution_backward"].iterrows():
        g, x, w = row["dims"][:3]
        mask = json.loads(row["concrete"][10].lower())
        assert row["concrete"][7] == "False" and len(mask) == 3  # not transposed
        one = 2 * math.prod(g) * math.prod(w[1:])
        want = one * mask[0] + one * mask[1] + math.prod(g) * mask[2]
        c = estimate_op(row["name"], row["dims"], row["types"], row["concrete"], row["strides"])
        assert c.flops == want
        checked += 1
    assert checked == 60


# --- CPU traces recorded here with torch 2.13 -------------------------------------------------

def _record(path, make, mkldnn: bool):
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    module, x = make(torch)
    x.requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # oneDNN's TF32 notice on flags()
        with torch.backends.mkldnn.flags(enabled=mkldnn), \
                profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            module(x).sum().backward()
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    return {e["name"]: e for e in events if e.get("cat") == "cpu_op"}, path


def _cost(e):
    a = e["args"]
    return estimate_op(e["name"], a["Input Dims"], a["Input type"], a.get("Concrete Inputs"), a.get("Input Strides"))


def test_cpu_slow_conv2d_forward_and_backward(tmp_path):
    # Conv2d(3, 8, 3, stride 2, padding 1) on x[2,3,9,9] with oneDNN off: thnn_conv2d ->
    # _slow_conv2d_forward, and convolution_backward -> _slow_conv2d_backward(output_mask [T, T, T]).
    ops, _ = _record(tmp_path / "slow.json", lambda t: (t.nn.Conv2d(3, 8, 3, stride=2, padding=1),
                                                        t.randn(2, 3, 9, 9)), mkldnn=False)
    # out spatial (9 + 2 - 3)//2 + 1 = 5 -> y[2,8,5,5] (400 elements); prod(w[1:]) = 3·3·3 = 27
    fwd = 2 * 400 * 27
    assert fwd == 21_600
    fwd_bytes = (2 * 3 * 81 + 8 * 27 + 8 + 400) * 4  # x, w, bias read; y written (fp32)
    for name in ("aten::thnn_conv2d", "aten::_slow_conv2d_forward"):
        c = _cost(ops[name])
        assert (c.flops, c.bytes, c.category) == (fwd, fwd_bytes, Category.CONV), name
    # backward: dgrad 21,600 + wgrad 21,600 + bias 400 (one add per grad_out element)
    bwd = 2 * fwd + 400
    # dgrad: g, w read, grad_input written; wgrad: g, x read, grad_weight written; bias: g read, 8 written
    bwd_bytes = ((400 + 216 + 486) + (400 + 486 + 216) + (400 + 8)) * 4
    for name in ("aten::convolution_backward", "aten::_slow_conv2d_backward"):
        c = _cost(ops[name])
        assert (c.flops, c.bytes, c.category) == (bwd, bwd_bytes, Category.CONV), name


def test_cpu_slow_conv3d_and_depthwise_and_transposed(tmp_path):
    # Conv3d(2, 4, 3, padding 1) on x[1,2,5,5,5]: slow_conv3d -> slow_conv3d_forward; y[1,4,5,5,5]
    ops, _ = _record(tmp_path / "c3.json", lambda t: (t.nn.Conv3d(2, 4, 3, padding=1), t.randn(1, 2, 5, 5, 5)),
                     mkldnn=False)
    for name in ("aten::slow_conv3d", "aten::slow_conv3d_forward"):
        c = _cost(ops[name])
        assert c.flops == 2 * (4 * 125) * (2 * 27) == 54_000 and c.category is Category.CONV, name
    # depthwise Conv2d(4, 8, 3, groups=4) on x[2,4,9,9]: w[8,1,3,3], grad_out[2,8,7,7] (784 elements).
    # wgrad is 2·784·9, not groups (4) times that as torch.utils.flop_counter has it.
    ops, _ = _record(tmp_path / "dw.json", lambda t: (t.nn.Conv2d(4, 8, 3, groups=4), t.randn(2, 4, 9, 9)),
                     mkldnn=True)
    assert _cost(ops["aten::mkldnn_convolution"]).flops == 2 * 784 * 9 == 14_112
    assert _cost(ops["aten::convolution_backward"]).flops == 2 * (2 * 784 * 9) + 784 == 29_008
    # ConvTranspose2d(4, 6, 3, stride 2) on x[2,4,5,5] (200 elements): w[4,6,3,3]; wide = the input
    ops, _ = _record(tmp_path / "ct.json", lambda t: (t.nn.ConvTranspose2d(4, 6, 3, stride=2), t.randn(2, 4, 5, 5)),
                     mkldnn=False)
    c = _cost(ops["aten::slow_conv_transpose2d"])
    assert c.flops == 2 * 200 * (6 * 3 * 3) == 21_600
    # grad_out[2,6,11,11] = 1,452 elements: dgrad + wgrad on the input side, bias on grad_out
    assert _cost(ops["aten::convolution_backward"]).flops == 2 * 21_600 + 1_452


def test_cpu_trace_prices_its_conv_work_once(tmp_path):
    _, path = _record(tmp_path / "slow.json", lambda t: (t.nn.Conv2d(3, 8, 3, stride=2, padding=1),
                                                         t.randn(2, 3, 9, 9)), mkldnn=False)
    traces, _ = load_traces([path])
    acts = cpu_activities(traces[0])
    conv = acts[acts["category"] == Category.CONV.value]
    # the outermost priced op of each pass is the unit of work: conv2d and convolution_backward
    assert sorted(conv["name"]) == ["aten::conv2d", "aten::convolution_backward"]
    assert conv["flops"].sum() == 21_600 + 43_600


# --- PyTorch 1.x op names ----------------------------------------------------------------------
# torch 2.13 cannot produce these ops. The traces below are built from the real MI300 event's args
# (Ev Idx 252 above), renamed to the PyTorch 1.x ops and argument orders (native_functions.yaml of
# 1.8-1.10), and without Concrete Inputs, which 1.x traces do not have.

DGRAD_K = "dgrad2d_grouped_direct_kernel"
WGRAD_K = "wgrad_2d_kernel"
FPROP_K = "implicit_convolve_sgemm"
TRANSPOSE_K = "nchwToNhwcKernel"
S, SL = "Scalar", "ScalarList"


def _op(name, ts, dur, dims, types, ext=None):
    args = {"Input Dims": dims, "Input type": types}
    if ext is not None:
        args["External id"] = ext
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _launch(ev, ext, corr, ts, kernel, kts, kdur):
    ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
               "dur": 2, "args": {"correlation": corr, "External id": ext}})
    ev.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": kts, "dur": kdur,
               "args": {"correlation": corr, "External id": ext, "device": 0, "stream": 7,
                        "grid": [1, 1, 1], "block": [128, 1, 1]}})


def _legacy_trace(path, backward_g=(G,)):
    """cudnn_convolution(x, w) forward, then one cudnn_convolution_backward per grad_out shape in
    ``backward_g``, each calling _backward_input and _backward_weight, each launching its kernel."""
    ev = [_op("aten::cudnn_convolution", 0, 50, [X, W, [], [], [], [], [], [], []],
              [BF, BF, SL, SL, SL, S, S, S, S], ext=1)]
    _launch(ev, 1, 1, 10, FPROP_K, 1000, 100)
    t = 100
    for k, g in enumerate(backward_g):
        ext = 10 + 10 * k
        ev.append(_op("autograd::engine::evaluate_function: CudnnConvolutionBackward", t, 90, [], []))
        ev.append(_op("aten::cudnn_convolution_backward", t + 1, 88,
                      [X, g, W, [], [], [], [], [], [], [], []], [BF, BF, BF, SL, SL, SL, S, S, S, S, SL], ext=ext))
        ev.append(_op("aten::cudnn_convolution_backward_input", t + 2, 40,
                      [[], g, W, [], [], [], [], [], [], []], [SL, BF, BF, SL, SL, SL, S, S, S, S], ext=ext + 1))
        _launch(ev, ext + 1, ext + 1, t + 3, DGRAD_K, 2000 + 1000 * k, 100)
        ev.append(_op("aten::cudnn_convolution_backward_weight", t + 45, 40,
                      [[], g, X, [], [], [], [], [], [], []], [SL, BF, BF, SL, SL, SL, S, S, S, S], ext=ext + 2))
        _launch(ev, ext + 2, ext + 3, t + 46, TRANSPOSE_K, 2200 + 1000 * k, 50)
        _launch(ev, ext + 2, ext + 4, t + 48, WGRAD_K, 2300 + 1000 * k, 100)
        t += 100
    path.write_text(json.dumps({"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}))
    traces, _ = load_traces([path])
    acts = gpu_activities(traces[0])
    return {n: acts[acts["name"] == n] for n in (FPROP_K, DGRAD_K, WGRAD_K, TRANSPOSE_K)}


def test_pytorch1_cudnn_backward_and_forward_from_the_layer(tmp_path):
    k = _legacy_trace(tmp_path / "t.json")
    dgrad, wgrad, fprop, tr = k[DGRAD_K].iloc[0], k[WGRAD_K].iloc[0], k[FPROP_K].iloc[0], k[TRANSPOSE_K].iloc[0]
    # dgrad: 2·numel(grad_out)·prod(w[1:]); it reads grad_out and w and writes grad_input (input
    # shape from the enclosing cudnn_convolution_backward)
    assert dgrad["flops"] == ONE and dgrad["bytes"] == (NG + NW + NX) * 2
    # wgrad: the weight shape (weight_size, an int list) comes from cudnn_convolution_backward
    assert wgrad["flops"] == ONE and wgrad["bytes"] == (NG + NX + NW) * 2
    # forward without stride/padding: its output is that layer's grad_out [10,512,7,7]
    assert fprop["flops"] == ONE and fprop["bytes"] == (NX + NW + NG) * 2
    for row in (dgrad, wgrad, fprop):
        assert row["category"] == Category.CONV.value and row["tensor"]
    # a layout transpose under the wgrad op keeps its own category and takes no FLOPs
    assert tr["category"] == Category.COPY.value and tr["flops"] == 0


def test_pytorch1_forward_stays_unknown_when_layers_disagree(tmp_path):
    # two backward calls on the same input and weight shapes with different grad_out (strides 1 and 2):
    # the forward's output is ambiguous, so no number is made up; the backward ops are still priced
    k = _legacy_trace(tmp_path / "t.json", backward_g=(G, [10, 512, 4, 4]))
    assert k[FPROP_K]["flops"].isna().all() and k[FPROP_K]["category"].iloc[0] == Category.CONV.value
    assert list(k[DGRAD_K]["flops"]) == [ONE, 2 * (10 * 512 * 16) * (512 * 9)]


@pytest.mark.parametrize("name, dims, types, conc, want", [
    # cudnn_convolution_backward_input(self_size, grad_output, weight, ...): no input shape recorded,
    # so FLOPs but no bytes
    ("aten::cudnn_convolution_backward_input", [[], G, W] + [[]] * 7, [SL, BF, BF, SL, SL, SL] + [S] * 4,
     None, (ONE, None)),
    # PyTorch <= 1.7: no allow_tf32, output_mask bool[2] (grad_input, grad_weight) 10th
    ("aten::cudnn_convolution_backward", [X, G, W] + [[]] * 7, [BF] * 3 + [SL] * 3 + [S] * 3 + [SL],
     ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False", "[False, True]"],
     (ONE, (NG + NX + NW) * 2)),
    # miopen_convolution_backward(self, grad_output, weight, padding, stride, dilation, groups,
    # benchmark, deterministic, bool[3] output_mask)
    ("aten::miopen_convolution_backward", [X, G, W] + [[]] * 7, [BF] * 3 + [SL] * 3 + [S] * 3 + [SL],
     ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False", "[True, True, True]"],
     (2 * ONE + NG, ((NG + NW + NX) + (NG + NX + NW) + (NG + 512)) * 2)),
    # miopen_convolution_backward_weight(weight_size, grad_output, self, ...) with weight_size recorded
    ("aten::miopen_convolution_backward_weight", [[], G, X] + [[]] * 6, [SL, BF, BF, SL, SL, SL] + [S] * 3,
     ["[512, 512, 3, 3]", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False"],
     (ONE, (NG + NX + NW) * 2)),
    # ... and without it: unknown, never a guess
    ("aten::miopen_convolution_backward_weight", [[], G, X] + [[]] * 6, [SL, BF, BF, SL, SL, SL] + [S] * 3,
     None, (None, None)),
    # mkldnn_convolution_backward_weights(weight_size, grad_output, self, padding, stride, dilation, groups, bias_defined)
    ("aten::mkldnn_convolution_backward_weights", [[], G, X] + [[]] * 5, [SL, F32, F32, SL, SL, SL, S, S],
     ["[512, 512, 3, 3]", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False"], (ONE, (NG + NX + NW) * 4)),
    # thnn_conv2d_backward(grad_output, self, weight, kernel_size, stride, padding, finput, fgrad_input,
    # output_mask): grad_input only
    ("aten::thnn_conv2d_backward", [G, X, W, [], [], [], [0], [0], []], [F32] * 3 + [SL] * 3 + [F32, F32, SL],
     ["", "", "", "[3, 3]", "[1, 1]", "[1, 1]", "", "", "[True, False, False]"], (ONE, (NG + NW + NX) * 4)),
    # cudnn_convolution_backward_bias(grad_output): one add per element, 512 sums written
    ("aten::cudnn_convolution_backward_bias", [G], [BF], None, (NG, (NG + 512) * 2)),
])
def test_pytorch1_op_names(name, dims, types, conc, want):
    c = estimate_op(name, dims, types, conc)
    assert (c.flops, c.bytes) == want
    assert categorize_op(name) is Category.CONV


def test_wrong_channels_are_refused():
    # grad_out with 256 channels cannot come from a weight with 512 filters
    c = estimate_op("aten::cudnn_convolution_backward_input", [[], [10, 256, 7, 7], W] + [[]] * 7,
                    [SL, BF, BF, SL, SL, SL] + [S] * 4)
    assert c.flops is None and "channels" in c.note


@pytest.mark.parametrize("name", [
    "aten::thnn_conv2d", "aten::thnn_conv2d_forward", "aten::slow_conv3d", "aten::slow_conv3d_forward",
    "aten::_slow_conv2d_backward", "aten::mkldnn_convolution", "aten::mkldnn_convolution_backward_input",
    "aten::miopen_convolution_backward_input", "aten::cudnn_convolution_backward_weight",
    "aten::thnn_conv_depthwise2d_backward", "autograd::engine::evaluate_function: ThnnConv2DBackward",
    "SlowConvDilated2DBackward0", "CudnnConvolutionBackward", "MkldnnConvolutionBackward0",
])
def test_conv_op_names_are_conv(name):
    assert categorize_op(name) is Category.CONV


@pytest.mark.parametrize("name", ["fb::convex_sum", "aten::add", "aten::_conj"])
def test_other_names_are_not_conv(name):
    assert categorize_op(name) is not Category.CONV


def test_rule_matches_torch_flop_counter_for_ungrouped_convs():
    # for groups = 1 the rule is torch.utils.flop_counter's formula, restated without torch
    import torch
    from torch.utils.flop_counter import flop_registry

    fwd = flop_registry[torch.ops.aten.convolution]
    bwd = flop_registry[torch.ops.aten.convolution_backward]
    for x, w, stride, padding, transposed in [
        ((2, 3, 17, 13), (8, 3, 3, 5), [2, 1], [1, 2], False),
        ((1, 16, 8, 8), (16, 4, 4, 4), [2, 2], [1, 1], True),
        ((3, 4, 6, 7, 5), (5, 4, 2, 3, 1), [1, 2, 1], [0, 1, 0], False),
    ]:
        n = len(x) - 2
        dims = [list(x), list(w), [], [], [], [], [], [], []]
        conc = ["", "", "", str(stride), str(padding), str([1] * n), str(transposed), str([0] * n), "1"]
        c = estimate_op("aten::convolution", dims, [F32, F32, ""] + [SL] * 3 + [S, SL, S], conc)
        from bwdiag.costs.shapes import conv_output_shape

        out = conv_output_shape(x, w, stride, padding, 1, transposed, 0, 1)
        assert c.flops == fwd(x, w, None, stride, padding, [1] * n, transposed, out_val=out)
        dims_b = [list(out), list(x), list(w)] + [[]] * 8
        conc_b = ["", "", "", "[0]", str(stride), str(padding), str([1] * n), str(transposed), str([0] * n), "1",
                  "[True, True, False]"]
        cb = estimate_op("aten::convolution_backward", dims_b, [F32] * 3 + [SL] * 4 + [S, SL, S, SL], conc_b)
        assert cb.flops == bwd(out, x, w, None, stride, padding, [1] * n, transposed, [0] * n, 1,
                               [True, True, False], out_val=(x, w, None))


def test_an_unpriced_aten_op_that_runs_its_own_kernel_is_one_unit_of_work(tmp_path):
    """An ATen op with no cost formula is opened up into the ops it calls, unless it runs for over
    OWN_WORK_US with none of them running (its kernel): then it is one unit of work, and its kernel's
    time is not read as dispatch gaps between its children."""
    def ev(name, ts, dur, cat="cpu_op"):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}

    events = [ev("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              # zeroes its buffers, then 240 µs of its own kernel, then re-lays out its outputs
              ev("aten::_made_up_backward", 10, 300), ev("aten::zeros", 12, 8), ev("aten::fill_", 14, 5),
              ev("aten::transpose", 300, 2), ev("aten::as_strided", 300.5, 1),
              # a wrapper whose children follow one another: opened up, its own 30 µs are gaps
              ev("aten::_made_up_wrapper", 400, 100), ev("aten::mul", 410, 30), ev("aten::add", 470, 20),
              # an autograd node runs Python and the engine between ops: opened up whatever its stretches
              ev("autograd::engine::evaluate_function: MadeUpBackward", 600, 300), ev("aten::mul", 820, 30)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    traces, _ = load_traces([path])
    acts = cpu_activities(traces[0])
    assert sorted(acts["name"]) == ["aten::_made_up_backward", "aten::add", "aten::mul", "aten::mul"]
    made_up = acts[acts["name"] == "aten::_made_up_backward"]
    assert made_up["dur"].tolist() == [300] and made_up["flops"].isna().all()  # no estimate, not zero
