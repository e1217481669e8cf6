"""Which kernels of an op get its FLOPs: helper kernels (layout transposes, copies, casts, fills) of a
GEMM/conv/attention op get none; the op's cost goes wholly to its main-work kernels."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bwdiag.costs import Category, categorize_kernel, estimate_op
from bwdiag.diagnose.activities import gpu_activities
from bwdiag.trace import load_traces

from conftest import shared_trace

RESNET = "tracelens/mi300/resnet_act_checkpoint.json.gz"


@pytest.fixture(scope="module")
def resnet():
    traces, _ = load_traces([shared_trace(RESNET)])
    trace = traces[0]
    return trace, gpu_activities(trace)


def _op_cost(trace, op):
    row = trace.ops.loc[op]
    return estimate_op(row["name"], row["dims"], row["types"], row["concrete"], row["strides"])


def test_miopen_transposes_under_convolutions_take_no_flops(resnet):
    _, acts = resnet
    conv_ops = acts["op_name"].isin(["aten::miopen_convolution", "aten::convolution_backward"])
    transposes = acts[conv_ops & acts["name"].str.contains("transpose", case=False)]
    assert len(transposes) > 500  # batched_transpose_* and transpose_NCHW2CNHW_* under convs
    assert set(transposes["category"]) == {Category.COPY.value}
    assert (transposes["flops"].fillna(0) == 0).all()
    assert not transposes["tensor"].any()
    # Before the fix they carried ~178 GFLOP of the convolutions' work (time-proportional share).
    helpers = acts[conv_ops & acts["name"].str.startswith(("SubTensorOp", "batched_transpose", "transpose_"))]
    assert (helpers["flops"].fillna(0) == 0).all()
    assert set(helpers["category"]) <= {Category.COPY.value, Category.CAST.value, Category.ELEMENTWISE.value}


def test_conv_flops_go_wholly_to_its_conv_kernel(resnet):
    trace, acts = resnet
    # miopen_convolution(x[10,256,14,14], w[512,256,3,3], padding [1,1], stride [2,2]) -> [10,512,7,7]:
    # MIOpen runs it as SubTensorOp, two batched_transpose (to NHWC), igemm_fwd, a cast and a transpose back.
    conv = acts[acts["op_name"] == "aten::miopen_convolution"]
    want = 2 * 10 * 512 * 256 * 3 * 3 * 7 * 7  # 2·N·K·C·R·S·P·Q
    found = 0
    for op, kernels in conv.groupby("op"):
        if trace.ops.loc[op, "dims"][:2] != [[10, 256, 14, 14], [512, 256, 3, 3]]:
            continue
        if trace.ops.loc[op, "concrete"][4] != "[2, 2]":
            continue
        found += 1
        cost = _op_cost(trace, op)
        assert cost.flops == want == 1_156_055_040
        assert np.nansum(kernels["flops"]) == pytest.approx(cost.flops, rel=1e-12)
        main = kernels[kernels["name"].str.startswith("igemm_fwd")]
        assert len(main) == 1 and main["flops"].iloc[0] == pytest.approx(want, rel=1e-12)
        assert main["category"].iloc[0] == Category.CONV.value and main["tensor"].iloc[0]
        assert np.nansum(main["bytes"]) == pytest.approx(cost.bytes, rel=1e-12)
        t = kernels[kernels["name"].str.startswith("batched_transpose")]
        assert len(t) >= 2
        # a layout transpose reads and writes a tensor: the op's input, 10·256·14·14 bf16, twice
        assert (t["bytes"] == 2 * 10 * 256 * 14 * 14 * 2).all()
    assert found >= 1


def test_every_costed_conv_op_keeps_its_flops(resnet):
    trace, acts = resnet
    conv = acts[acts["op_name"].isin(["aten::miopen_convolution", "aten::convolution_backward"])]
    checked = 0
    for op, kernels in conv.groupby("op"):
        cost = _op_cost(trace, op)
        if cost.flops is None:
            continue
        assert np.nansum(kernels["flops"]) == pytest.approx(cost.flops, rel=1e-9)
        checked += 1
    assert checked > 50


@pytest.mark.parametrize("name, cat", [
    ("batched_transpose_32x32_half", Category.COPY),
    ("transpose_NCHW2CNHW_V2_2D_WG_off64", Category.COPY),
    ("void cudnn::ops::nhwcToNchwKernel<__nv_bfloat16, __nv_bfloat16, float, true, false>(cudnn::ops::nhwc2nchw_params_t<float>)", Category.COPY),
    ("triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_0", Category.COPY),
    ("triton_poi_fused_convolution_relu_3", Category.ELEMENTWISE),
    ("triton_red_fused_addmm_sum_1", Category.REDUCTION),
    # split-K GEMM's reduction stays a GEMM kernel, so it keeps sharing the GEMM's cost
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>(cublasLt::cublasSplitKParams<float>, __nv_bfloat16 const*)", Category.GEMM),
])
def test_helper_kernel_names(name, cat):
    assert categorize_kernel(name) is cat


def _tiny_trace(path, kernels):
    """One aten::addmm(bias[64], x[128, 32], w[32, 64]) fp32 launching ``kernels`` (name, dur)."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 0, "dur": 100,
           "args": {"External id": 1, "Input Dims": [[64], [128, 32], [32, 64], [], []],
                    "Input type": ["float", "float", "float", "Scalar", "Scalar"],
                    "Concrete Inputs": ["", "", "", "1", "1"]}}]
    ts = 200
    for i, (name, dur) in enumerate(kernels):
        corr = 10 + i
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                   "ts": 10 + 10 * i, "dur": 5, "args": {"correlation": corr, "External id": 1}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                   "args": {"correlation": corr, "External id": 1, "device": 0, "stream": 7,
                            "grid": [1, 1, 1], "block": [128, 1, 1]}})
        ts += dur + 1
    path.write_text(json.dumps({"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}))
    traces, _ = load_traces([path])
    return gpu_activities(traces[0])


GEMM_K = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
COPY_K = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
          "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(int)")
SPLITK_K = "void cublasLt::splitKreduce_kernel<32, 16, int, float, float>(cublasLt::cublasSplitKParams<float>, float const*)"


def test_copy_under_addmm_gets_no_flops(tmp_path):
    acts = _tiny_trace(tmp_path / "t.json", [(COPY_K, 30.0), (GEMM_K, 10.0), (SPLITK_K, 10.0)])
    flops = 2 * 128 * 32 * 64  # 2·M·K·N
    by = dict(zip(acts["name"], zip(acts["category"], acts["flops"], acts["bytes"])))
    assert by[COPY_K][0] == Category.COPY.value and by[COPY_K][1] == 0
    assert np.isnan(by[COPY_K][2])  # it broadcasts the bias into the output: size not the first input's
    # the GEMM and its split-K reduction share the op's cost by time, 10 µs each
    assert by[GEMM_K][0] == by[SPLITK_K][0] == Category.GEMM.value
    assert by[GEMM_K][1] == pytest.approx(flops / 2) and by[SPLITK_K][1] == pytest.approx(flops / 2)


def test_op_whose_kernels_all_look_like_helpers_still_shares(tmp_path):
    acts = _tiny_trace(tmp_path / "t.json", [(COPY_K, 30.0), (COPY_K, 10.0)])
    assert np.nansum(acts["flops"]) == pytest.approx(2 * 128 * 32 * 64)
