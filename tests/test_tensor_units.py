"""The one fp32 / TF32 pattern set (diagnose/tensor_units.py) on kernel names copied from the shared
traces (``../shared/traces``, the file each came from in the comment)."""

from __future__ import annotations

import pytest

from bwdiag.diagnose.tensor_units import FP32_SIMT, TF32, matrix_unit, on_fp32_vector_units

TF32_NAMES = [
    # hta/critical_path/alexnet
    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1"
    "_g1_tensor16x8x8_alignc4_execute_kernel",
    # hta/call_stack/backward_thread.json
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>",
    # hta/nccl_parser_config
    "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_64x256_32x4_nhwc_align4>"
    "(cutlass_tensorop_s1688dgrad_optimized_tf32_64x256_32x4_nhwc_align4::Params)",
    "void cutlass_cudnn_train::Kernel<cutlass_tensorop_s1688wgrad_optimized_tf32_256x64_16x4_nhwc_align4>",
    # hta/negative_queue_length_values_check
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_tn_align1>"
    "(cutlass_80_tensorop_s1688gemm_256x128_32x3_tn_align1::Params)",
]

FP32_SIMT_NAMES = [
    "ampere_sgemm_128x64_nn",  # hta/negative_queue_length_values_check
    "volta_sgemm_64x32_sliced1x4_tn",  # hta/ns_resolution_trace
    "void sgemm_largek_lds64<true, true, 6, 3, 4, 5, 2, 66>(float*, float const*, float const*, int, int, int, int)",
    "cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",  # hta/ns_resolution_trace
    "cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1",  # hta/critical_path/alexnet
    # tracelens/h100/Qwen (the LM head in fp32)
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
    # cuBLAS fp32 GEMV (hta/timeline_analysis, hta/trace_diff, hta/negative_queue_length_values_check)
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, false, "
    "cublasGemvParams<cublasGemvTensorStridedBatched<float const>",
    "void gemv2N_kernel<int, int, float, float, float, float, 128, 8, 4, 4, 1, false, "
    "cublasGemvParams<cublasGemvTensorStridedBatched<float const>",
    "void gemvNSP_kernel<float, float, float, float, 1, 32, 4, 1024, cublasGemvParams<cublasGemvTensorStridedBatched"
    "<float const>",
    "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, float, false, true, "
    "true, false, 7, cublasGemvParams<cublasGemvTensorStridedBatched<float const>",
    "void gemmk1_kernel<float, 256, 5, false, false, false, false, cublasGemvTensorStridedBatched<float const>",
]

NEITHER = [
    # bf16 tensor-core kernels: 16x8x16 is the 16-bit MMA shape (tracelens/h100/bert, hta/negative_queue…)
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
    "__5x_cublas",  # tracelens/h100/Qwen
    "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT",  # tracelens/b200
    "Cijk_Ailk_Bljk_BBS_BH_MT64x64x64_MI16x16x16x1_SN_1LDSB0_APM1_ABV0",  # tracelens/mi300 (hipBLASLt bf16)
    # an embedding kernel with float template arguments is not a matrix kernel (hta/timeline_analysis)
    "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long, 2ul, 32ul>",
]


@pytest.mark.parametrize("name", TF32_NAMES)
def test_tf32_names(name):
    assert TF32.search(name) and not FP32_SIMT.search(name)
    assert matrix_unit(name, "fp32", False) == ("tf32", True)  # an fp32 op, run as TF32 on tensor cores
    assert not on_fp32_vector_units(name, None, False)


@pytest.mark.parametrize("name", FP32_SIMT_NAMES)
def test_fp32_vector_unit_names(name):
    assert FP32_SIMT.search(name) and not TF32.search(name)
    assert matrix_unit(name, "fp32", False) == ("fp32", False)
    assert on_fp32_vector_units(name, None, False)  # no op to say so: the name does


@pytest.mark.parametrize("name", NEITHER)
def test_other_names(name):
    assert not TF32.search(name) and not FP32_SIMT.search(name)
    assert not on_fp32_vector_units(name, None, False)
    assert matrix_unit(name, "bf16", True) == ("bf16", True)


def test_placed_dtype_wins_over_the_name():
    # The roofline already placed it: fp32 on tensor cores (tensor=True) is not vector work, and a
    # bf16 kernel is never fp32, whatever its name.
    assert not on_fp32_vector_units("ampere_sgemm_128x64_nn", "fp32", True)
    assert on_fp32_vector_units("some_gemm", "fp32", False)
    assert not on_fp32_vector_units("ampere_sgemm_128x64_nn", "bf16", True)
    assert not on_fp32_vector_units("some_gemm", "tf32", True)


def test_missing_dtype_as_nan_is_missing():
    assert on_fp32_vector_units("ampere_sgemm_128x64_nn", float("nan"), False)
    assert not on_fp32_vector_units("some_gemm", float("nan"), False)
