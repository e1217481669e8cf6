"""Cost formulas on shapes worked by hand: GEMM variants, attention variants, casts, embeddings,
softmax, dropout, scatter, Triton ops, and what older traces (no Concrete Inputs) allow."""

from __future__ import annotations

from bwdiag.costs import Category, estimate_op

from costs_helpers import A100_TRAIN, first_op, op_args

BF, F32 = "c10::BFloat16", "float"


def test_linear_flattens_leading_dims():
    # linear(x[2, 8, 64], w[32, 64], b[32]) bf16: M = 16, K = 64, N = 32
    c = estimate_op("aten::linear", [[2, 8, 64], [32, 64], [32]], [BF, BF, BF])
    assert c.flops == 2 * 16 * 64 * 32
    assert c.bytes == (16 * 64 + 32 * 64 + 32 + 16 * 32) * 2


def test_matmul_batched_broadcast():
    # matmul(a[4, 1, 8, 16], b[3, 16, 5]) -> [4, 3, 8, 5]
    c = estimate_op("aten::matmul", [[4, 1, 8, 16], [3, 16, 5]], [F32, F32])
    assert c.flops == 2 * 12 * 8 * 5 * 16
    assert c.bytes == (4 * 8 * 16 + 3 * 16 * 5 + 4 * 3 * 8 * 5) * 4


def test_scaled_mm_fp8_with_out_dtype():
    # _scaled_mm(a[128, 256] e4m3, b[256, 64] e4m3, scale_a[], scale_b[], bias None, scale_result None,
    #            out_dtype=bf16 (ScalarType 15), use_fast_accum)
    c = estimate_op("aten::_scaled_mm", [[128, 256], [256, 64], [], [], [], [], [], []],
                    ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", F32, F32, "", "", "Scalar", "Scalar"],
                    ["", "", "", "", "", "", "15", "False"])
    assert c.flops == 2 * 128 * 256 * 64
    assert c.bytes == 128 * 256 + 256 * 64 + 128 * 64 * 2  # fp8 inputs, bf16 output; 0-dim scales
    assert c.dtype == "fp8" and c.tensor


def test_sdpa_efficient_backward_and_mask_type():
    q = [2, 4, 128, 64]
    # _scaled_dot_product_efficient_attention_backward(grad_out, q, k, v, attn_bias, out, lse, seed,
    #     offset, dropout_p, grad_input_mask, is_causal, scale)
    dims = [q, q, q, q, [], q, [2, 4, 128], [], [], [], [], [], []]
    types = [BF] * 4 + [""] + [BF, F32, "long int", "long int", "Scalar", "ScalarList", "Scalar", ""]
    conc = [""] * 9 + ["0.", "[True, True, True, False]", "False", ""]
    c = estimate_op("aten::_scaled_dot_product_efficient_attention_backward", dims, types, conc)
    mm = 2 * 2 * 4 * 128 * 128 * 64  # one score-sized matmul
    assert c.flops == 5 * mm  # recompute QK^T, dP, dV, dQ, dK
    n = 2 * 4 * 128 * 64
    # read dO, out, q, k, v; write dq, dk, dv (bf16); read the fp32 logsumexp [2, 4, 128]
    assert c.bytes == (2 * n + 2 * 3 * n) * 2 + 2 * 4 * 128 * 4 == 1_052_672
    conc[11] = "True"
    assert estimate_op("aten::_scaled_dot_product_efficient_attention_backward", dims, types, conc).flops == 5 * mm / 2
    # _efficient_attention_forward uses (B, S, H, D) and custom_mask_type (1 = causal)
    bshd = [2, 128, 4, 64]
    dims = [bshd, bshd, bshd, [], [], [], [], [], [], [], []]
    types = [BF] * 3 + ["", "", "", "", "", "Scalar", "Scalar", "Scalar"]
    c = estimate_op("aten::_efficient_attention_forward", dims, types,
                    ["", "", "", "", "", "", "", "", "0.", "1", "True"])
    assert c.flops == 2 * mm / 2 and c.note.startswith("causal")


def test_gqa_attention_reads_fewer_kv_heads():
    # _scaled_dot_product_flash_attention(q[1, 8, 64, 32], k/v[1, 2, 64, 32], dropout, is_causal, debug, scale)
    q, kv = [1, 8, 64, 32], [1, 2, 64, 32]
    c = estimate_op("aten::_scaled_dot_product_flash_attention", [q, kv, kv, [], [], [], []],
                    [F32, F32, F32, "Scalar", "Scalar", "Scalar", ""], ["", "", "", "0.", "False", "False", ""])
    assert c.flops == 2 * (2 * 8 * 64 * 64 * 32)
    # q and out with 8 heads, k and v with 2 (fp32), + the fp32 logsumexp of 8 heads × 64 rows
    assert c.bytes == (8 * 64 * 32 * 2 + 2 * 64 * 32 * 2) * 4 + 8 * 64 * 4 == 165_888


def test_to_copy_cast_uses_dtype_code():
    # _to_copy(x[1000] fp32, dtype=bf16 (15), layout, device, pin_memory, non_blocking, memory_format)
    c = estimate_op("aten::_to_copy", [[1000], [], [], [], [], [], []],
                    [F32, "Scalar", "", "", "", "Scalar", ""], ["", "15", "", "", "", "False", ""])
    assert c.bytes == 1000 * 4 + 1000 * 2 and c.category is Category.CAST and c.dtype == "bf16"
    c = estimate_op("aten::clone", [[10, 10], []], [BF, ""], ["", ""])
    assert c.bytes == 100 * 2 * 2 and c.category is Category.COPY


def test_to_the_same_dtype_moves_nothing_and_a_real_conversion_does():
    # GPT-2 on a CPU: to(x f32[8, 128, 4096], dtype=float (6), layout, device, pin_memory, non_blocking,
    # copy=False, memory_format) returns x itself (6 µs in the trace for what a copy would make 33.6 MB)
    dims, types = [[8, 128, 4096], [], [], [], [], [], [], []], [F32, "Scalar", "Scalar", "", "", "Scalar", "Scalar", ""]
    c = estimate_op("aten::to", dims, types, ["", "6", "0", "", "", "False", "False", ""])
    assert c.bytes == 0 and c.category is Category.COPY
    # copy=True copies: read and write 8·128·4096 floats; to bf16 (15) casts: 4 bytes read, 2 written
    c = estimate_op("aten::to", dims, types, ["", "6", "0", "", "", "False", "True", ""])
    assert c.bytes == 2 * 8 * 128 * 4096 * 4 and c.category is Category.COPY
    c = estimate_op("aten::to", dims, types, ["", "15", "0", "", "", "False", "False", ""])
    assert c.bytes == 8 * 128 * 4096 * (4 + 2) and c.category is Category.CAST
    # without Concrete Inputs (older traces: rank_non_gpu's .to(device) calls, with _to_copy under them)
    # nothing says it is a no-op: a copy, as before
    c = estimate_op("aten::to", dims, types, [])
    assert c.bytes == 2 * 8 * 128 * 4096 * 4 and c.category is Category.COPY


def test_embedding_forward_and_backward():
    # embedding(weight[50000, 768] fp32, idx[8, 128] int64): read 1024 rows, not the table
    c = estimate_op("aten::embedding", [[50000, 768], [8, 128], [], [], []],
                    [F32, "long int", "Scalar", "Scalar", "Scalar"], ["", "", "-1", "False", "False"])
    assert c.bytes == 1024 * 8 + 2 * 1024 * 768 * 4 and c.category is Category.EMBEDDING
    # embedding_dense_backward(grad[8, 128, 768], idx[8, 128], num_weights=50000, padding_idx, scale)
    c = estimate_op("aten::embedding_dense_backward", [[8, 128, 768], [8, 128], [], [], []],
                    [F32, "long int", "Scalar", "Scalar", "Scalar"], ["", "", "50000", "-1", "False"])
    assert c.bytes == 1024 * 768 * 4 + 1024 * 8 + 50000 * 768 * 4


def test_softmax_dropout_scatter():
    # _softmax(x[4, 16, 128, 128] fp16, dim=-1, half_to_float=True): write fp32
    n = 4 * 16 * 128 * 128
    c = estimate_op("aten::_softmax", [[4, 16, 128, 128], [], []], ["c10::Half", "Scalar", "Scalar"], ["", "-1", "True"])
    assert c.bytes == n * 2 + n * 4 and c.category is Category.SOFTMAX
    # native_dropout(x[1024, 1024] bf16, p, train): read x, write y and a bool mask
    c = estimate_op("aten::native_dropout", [[1024, 1024], [], []], [BF, "Scalar", "Scalar"], ["", "0.1", "True"])
    assert c.bytes == 1024 * 1024 * (2 + 2 + 1) and c.category is Category.RANDOM
    # scatter_add_(self[50] fp32, dim 0, index[62392] int64, src[62392] fp32): read idx, src, self elems; write
    c = estimate_op("aten::scatter_add_", [[50], [], [62392], [62392]], [F32, "Scalar", "long int", F32],
                    ["", "0", "", ""])
    assert c.bytes == 62392 * (8 + 4 + 4 + 4)


def test_triton_op_counts_each_buffer_once():
    c = estimate_op("triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_ge_lt_mul_sub_0",
                    [[888], [888], [888], [], [], [], [], [], []],
                    ["int", "long int", "bool"] + ["Scalar"] * 6, ["", "", "", "0", "25136", "201088", "201088", "0", "888"])
    assert c.bytes == 888 * (4 + 8 + 1) and c.flops is None and c.category is Category.ELEMENTWISE


def test_old_trace_without_concrete_inputs():
    # A100 training trace (no Concrete Inputs, dtype spelled "long"): GEMMs still work ...
    c = estimate_op(*op_args(first_op(A100_TRAIN, "aten::mm", [[4096, 64], [64, 2798]]))[:4])
    assert c.flops == 2 * 4096 * 64 * 2798
    assert c.bytes == (4096 * 64 + 64 * 2798 + 4096 * 2798) * 4 and c.dtype == "fp32"
    assert estimate_op("aten::fill_", [[1], []], ["long", "Scalar"]).bytes == 8
    # ... reductions over unrecorded dims get the input read as a lower bound (tests/test_costs_gaps.py),
    # and convs without stride/padding stay unknown
    c = estimate_op("aten::sum", [[1, 4096], [], [], []], ["double", "", "Scalar", ""])
    assert c.bytes == 4096 * 8 and c.note.startswith("lower bound") and "not recorded" in c.note
    c = estimate_op("aten::convolution", [[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], [], [], []],
                    [F32, F32, "", "", "", "", "Scalar", "", "Scalar"])
    assert c.flops is None and "not recorded" in c.note


def test_unknown_op_says_so():
    c = estimate_op("mylib::frobnicate", [[3, 3]], [F32])
    assert (c.flops, c.bytes) == (None, None) and c.note == "no cost formula for mylib::frobnicate"
    c = estimate_op("aten::empty", [[], [], [], [], [], []], ["ScalarList", "Scalar", "", "", "Scalar", ""],
                    ["[3]", "5", "", "", "False", ""])
    assert (c.flops, c.bytes) == (0.0, 0.0)


def test_corrupt_records_are_refused():
    # sampled_rank-1.json.gz holds an aten::linear with six inputs; no linear schema has more than 3
    c = estimate_op("aten::linear", [[512, 2112], [512], [2048, 512], [2048, 160, 267], [10, 267], [10]], [F32] * 6)
    assert c.flops is None and "more arguments recorded" in c.note


def test_flash_attn_package_op_and_varlen():
    # flash_attn::_flash_attn_forward(q, k, v, dropout_p, softmax_scale, causal, ...) with (B, S, H, D)
    q = [2, 256, 8, 64]
    dims = [q, q, q, [], [], [], [], [], [], [], []]
    types = [BF] * 3 + ["Scalar"] * 6 + ["", "Scalar"]
    conc = ["", "", "", "0.", "0.125", "True", "-1", "-1", "0.", "", "False"]
    c = estimate_op("flash_attn::_flash_attn_forward", dims, types, conc)
    assert c.flops == 4 * 2 * 8 * 256 * 256 * 64 / 2
    assert c.bytes == 4 * (2 * 256 * 8 * 64) * 2 + 2 * 8 * 256 * 4  # q, k, v, out + fp32 softmax_lse
    c = estimate_op("flash_attn::_flash_attn_varlen_forward", [[4096, 8, 64]] * 3, [BF] * 3)
    assert c.flops is None and c.category is Category.ATTENTION


def test_transposed_cudnn_conv():
    # cudnn_convolution_transpose(x[1, 16, 8, 8], w[16, 4, 4, 4], padding [1,1], output_padding [0,0],
    #     stride [2,2], dilation [1,1], groups 2, benchmark, deterministic, allow_tf32)
    # out spatial = (8-1)*2 - 2 + (4-1) + 0 + 1 = 16; C_out = 4 * 2 = 8
    dims = [[1, 16, 8, 8], [16, 4, 4, 4]] + [[]] * 8
    types = [F32, F32] + ["ScalarList"] * 4 + ["Scalar"] * 4
    conc = ["", "", "[1, 1]", "[0, 0]", "[2, 2]", "[1, 1]", "2", "False", "False", "True"]
    c = estimate_op("aten::cudnn_convolution_transpose", dims, types, conc)
    # transposed: every input pixel meets the whole filter: 2 * N * (H*W)_in * C_in * C_out/groups * k*k
    assert c.flops == 2 * 1 * 64 * 16 * 4 * 16
    assert c.bytes == (16 * 64 + 16 * 4 * 16 + 8 * 16 * 16) * 4


def test_cpu_flash_attention_backward_is_priced():
    # as torch 2.13 CPU records it (examples/train_transformer.py, 7 Dec 2026): grad_out, q, k, v, out
    # [8, 4, 64, 32] fp32, logsumexp [8, 4, 64], dropout 0., is_causal True, attn_mask, scale
    x = [8, 4, 64, 32]
    c = estimate_op("aten::_scaled_dot_product_flash_attention_for_cpu_backward", [x] * 5 + [[8, 4, 64], [], [], [], []],
                    [F32] * 6 + ["Scalar", "Scalar", "", ""], ["", "", "", "", "", "", "0.", "True", "", ""])
    # five s × s × d products (the scores recomputed, dV, dP, dQ, dK), half of each under the causal mask
    assert c.flops == 5 * 2 * 8 * 4 * 64 * 64 * 32 / 2 == 20_971_520
    # reads grad_out, q, k, v, out and the fp32 logsumexp; writes dq, dk, dv
    assert c.bytes == (5 * 65_536 + 8 * 4 * 64 + 3 * 65_536) * 4 == 2_105_344
    assert c.category is Category.ATTENTION
