"""Cost formulas checked against ops pulled out of real traces; expected numbers worked by hand."""

from __future__ import annotations

from bwdiag.costs import Category, estimate_op

from costs_helpers import BERT, NORMS, QWEN, RESNET, B200, first_op, op_args


def est(rel, name, dims=None, kernel_name=None):
    n, d, t, c, s = op_args(first_op(rel, name, dims))
    return estimate_op(n, d, t, c, s, kernel_name=kernel_name)


def test_qwen_mm_bf16():
    # aten::mm [8944, 1024] x [1024, 1024], bf16
    c = est(QWEN, "aten::mm", [[8944, 1024], [1024, 1024]])
    assert c.flops == 2 * 8944 * 1024 * 1024 == 18_756_927_488
    assert c.bytes == (8944 * 1024 + 1024 * 1024 + 8944 * 1024) * 2 == 38_731_776
    assert (c.dtype, c.category, c.tensor) == ("bf16", Category.GEMM, True)


def test_qwen_addmm_counts_bias():
    # addmm(bias[1024], x[8944, 1024], w[1024, 1024])
    c = est(QWEN, "aten::addmm", [[1024], [8944, 1024], [1024, 1024], [], []])
    assert c.flops == 2 * 8944 * 1024 * 1024
    assert c.bytes == (1024 + 8944 * 1024 + 1024 * 1024 + 8944 * 1024) * 2 == 38_733_824


def test_qwen_flash_attention_causal_halves_flops():
    # _flash_attention_forward q/k/v [B=16, S=559, H=16, D=64] bf16, is_causal="True"
    name, dims, types, conc, strides = op_args(first_op(QWEN, "aten::_flash_attention_forward"))
    assert conc[8] == "True"
    full = 4 * 16 * 16 * 559 * 559 * 64  # QK^T and PV, 2 FLOPs per MAC each
    c = estimate_op(name, dims, types, conc)
    assert c.flops == full / 2 == 10_239_377_408
    # q, k, v read + out written (bf16) + the fp32 logsumexp flash always keeps (B·H·S values)
    assert c.bytes == 4 * (16 * 559 * 16 * 64) * 2 + 16 * 16 * 559 * 4 == 73_841_664
    assert c.category is Category.ATTENTION and c.tensor
    not_causal = list(conc)
    not_causal[8] = "False"
    assert estimate_op(name, dims, types, not_causal).flops == full


def test_qwen_elementwise_mean_and_cat():
    # aten::mean(x[16, 559, 1024] fp32, dim=[-1], keepdim=True): read x, write [16, 559, 1]
    c = est(QWEN, "aten::mean", [[16, 559, 1024], [], [], []])
    assert c.bytes == 16 * 559 * 1024 * 4 + 16 * 559 * 4 == 36_670_400
    assert c.category is Category.REDUCTION
    # aten::add(x[16, 559, 1] fp32, 0-dim double, alpha): read x, write x-sized fp32
    assert est(QWEN, "aten::add", [[16, 559, 1], [], []]).bytes == 16 * 559 * 4 * 2
    # copy_(dst fp32 [1,1,559], src int64) is a cast: 559*8 read + 559*4 written
    c = est(QWEN, "aten::copy_", [[1, 1, 559], [1, 1, 559], []])
    assert c.bytes == 559 * 8 + 559 * 4 and c.category is Category.CAST
    # cat of two fp32 [1, 559, 32]: the element size only comes from the kernel (OpaqueType<4u>)
    kernel = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<4u>, unsigned int, 3, 64, 64>(...)"
    c = est(QWEN, "aten::cat", [[[1, 559, 32], [1, 559, 32]], []], kernel_name=kernel)
    assert c.bytes == 2 * (2 * 559 * 32) * 4
    assert est(QWEN, "aten::cat", [[[1, 559, 32], [1, 559, 32]], []]).bytes is None


def test_qwen_index_select_reads_only_gathered_rows():
    # index_select(table[151936, 1024] bf16, dim 0, idx[8944] int64)
    c = est(QWEN, "aten::index_select")
    assert c.bytes == 8944 * 8 + 2 * 8944 * 1024 * 2 == 36_706_176
    assert c.category is Category.INDEX


def test_bert_layer_norm():
    # native_layer_norm(x[1, 141, 512] bf16, [512], w[512], b[512]): x, w, b read; y written;
    # fp32 mean and rstd per row (141 rows)
    c = est(BERT, "aten::native_layer_norm", [[1, 141, 512], [], [512], [512], []])
    assert c.bytes == 141 * 512 * 2 * 2 + 512 * 2 * 2 + 141 * 4 * 2 == 291_944
    assert c.category is Category.NORM and c.flops is None


def test_resnet_stem_conv_stride_padding():
    # miopen_convolution(x[10,3,224,224], w[64,3,7,7], padding [3,3], stride [2,2]) -> [10,64,112,112]
    c = est(RESNET, "aten::miopen_convolution", [[10, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], [], [], []])
    assert c.flops == 2 * 10 * 64 * 112 * 112 * 3 * 7 * 7 == 2_360_279_040
    assert c.bytes == (10 * 3 * 224 * 224 + 64 * 3 * 7 * 7 + 10 * 64 * 112 * 112) * 2
    assert c.category is Category.CONV and c.tensor and c.dtype == "bf16"


def test_resnet_conv_backward_output_mask():
    # grad_out = x = [10,512,7,7], w [512,512,3,3], pad 1, mask [True, True, False]
    name, dims, types, conc, _ = op_args(first_op(RESNET, "aten::convolution_backward",
                                                  [[10, 512, 7, 7], [10, 512, 7, 7], [512, 512, 3, 3]] + [[]] * 8))
    one = 2 * 10 * 512 * 512 * 9 * 49  # one conv-sized GEMM
    c = estimate_op(name, dims, types, conc)
    assert c.flops == 2 * one
    x, w = 10 * 512 * 49, 512 * 512 * 9
    # dgrad and wgrad run as separate kernels and each reads grad_out (g = x here):
    # dgrad reads g, w and writes grad_input; wgrad reads g, x and writes grad_weight
    assert c.bytes == ((x + w + x) + (x + x + w)) * 2
    only_input = list(conc)
    only_input[10] = "[True, False, False]"
    c = estimate_op(name, dims, types, only_input)
    assert c.flops == one and c.bytes == (x + w + x) * 2


def test_resnet_batch_norm_and_maxpool():
    c = est(RESNET, "aten::native_batch_norm", [[10, 64, 112, 112], [64], [64], [64], [64], [], [], []])
    n = 10 * 64 * 112 * 112
    # x read + y written (bf16), 4 params read (bf16), fp32 save_mean/invstd, bf16 running stats updated
    assert c.bytes == n * 2 * 2 + 4 * 64 * 2 + 2 * 64 * 4 + 2 * 64 * 2
    c = est(RESNET, "aten::max_pool2d_with_indices")
    # 3x3 stride 2 pad 1 on 112 -> 56; values bf16 + int64 indices
    assert c.bytes == n * 2 + 10 * 64 * 56 * 56 * (2 + 8)


def test_norm_trace_group_norm_and_rms_norm():
    # native_group_norm(x[8,16,32,32] fp32, w[16], b[16], N=8, C=16, HxW=1024, group=4)
    c = est(NORMS, "aten::native_group_norm", [[8, 16, 32, 32], [16], [16], [], [], [], [], []])
    assert c.bytes == 8 * 16 * 1024 * 4 * 2 + 16 * 4 * 2 + 8 * 4 * 4 * 2
    # _fused_rms_norm(x[8,16,32,32], [32, 32], w[32,32]): 128 rows of fp32 rstd
    c = est(NORMS, "aten::_fused_rms_norm", [[8, 16, 32, 32], [], [32, 32], []])
    assert c.bytes == 8 * 16 * 1024 * 4 * 2 + 32 * 32 * 4 + 128 * 4


def test_b200_vllm_ops():
    c = est(B200, "symm_mem::multimem_all_reduce_", [[2557440], [], []])
    assert c.bytes == 2557440 * 2 and c.category is Category.COMMUNICATION
    c = est(B200, "_C::static_scaled_fp8_quant")
    # read bf16 input, write fp8 output; the 0-dim fp32 scale counts 0 bytes (broadcast scalar)
    assert c.bytes == 888 * 512 * 2 + 888 * 512 * 1 and c.category is Category.CAST
    c = est(B200, "vllm::moe_forward")
    assert c.flops is None and c.bytes is None and "no cost formula" in c.note
