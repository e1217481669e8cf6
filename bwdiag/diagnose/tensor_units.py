"""Which unit and precision a matrix kernel really ran on, from its name: the one set of patterns.

The op says fp32, but cuBLAS/cuDNN may run it on tensor cores as TF32 (``allow_tf32``): the kernel
name tells (``tf32``, cutlass ``tensorop_s1688gemm``); ``sgemm``/``scudnn`` kernels are plain fp32 on
the vector units. Getting this wrong puts a TF32 GEMM at 250% of the fp32 roof. The roofline
placement (:func:`matrix_unit`) and the precision finding (:func:`on_fp32_vector_units`) both read
these patterns, so they cannot disagree about a kernel.

Checked against every kernel name in the shared traces (A100/V100 cuBLAS, cuDNN and cutlass, H100,
B200, MI300X). Real spellings matched:

* TF32: ``sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_…``,
  ``cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4``,
  ``cutlass_tensorop_s1688dgrad_optimized_tf32_64x256_…`` (``tensorop_s<mma shape>``: fp32 data on
  tensor cores; under an fp32 op that is TF32);
* fp32 on the vector units: ``ampere_sgemm_128x64_nn``, ``volta_sgemm_64x64_nn``,
  ``sgemm_largek_lds64<…>``, ``cutlass_80_simt_sgemm_128x32_8x5_nn_align1``,
  ``cudnn_infer_volta_scudnn_128x64_relu_…``, and cuBLAS's fp32 GEMV kernels
  ``gemv2T_kernel_val<int, int, float, …>``, ``gemv2N_kernel<int, int, float, …>``,
  ``gemvNSP_kernel<float, …>``, ``internal::gemvx::kernel<int, int, float, …>``,
  ``gemmk1_kernel<float, …>``.

Two sets had drifted apart (the roofline's and the precision rule's). Neither caught the real GEMV
spellings (``gemvx?<.*float`` expects ``gemvx<``, but cuBLAS writes ``gemvx::kernel<``; it matched
``gemmk1_kernel`` only through its ``cublasGemvTensorStridedBatched<float`` argument); ``_sgemv``
matched nothing. ``s16816gemm`` left the TF32 set: 16×8×16 is the bf16/fp16 MMA shape, and every
real name carrying it is a bf16 kernel (``cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_…``).
"""

from __future__ import annotations

import re

#: fp32 data on tensor cores (TF32).
TF32 = re.compile(r"tf32|tensorop_s\d+|_s1688", re.I)

#: fp32 kernels on the vector units (CUDA cores): cuBLAS sgemm / gemv, cuDNN scudnn, cutlass simt.
FP32_SIMT = re.compile(
    r"sgemm|scudnn|_simt_s|(?<![a-z])gemv\w*(?:::kernel)?<(?:int, int, )?float\b|gemmk1_kernel<float\b", re.I)


def matrix_unit(kernel_name: str, dtype: str | None, tensor: bool) -> tuple[str | None, bool]:
    """(roof dtype, on tensor cores) for a GEMM/conv/attention kernel whose op recorded ``dtype``."""
    if dtype == "fp32":
        if TF32.search(kernel_name):
            return "tf32", True
        return "fp32", False
    return dtype, tensor


def on_fp32_vector_units(kernel_name: str, dtype: str | float | None, tensor: bool) -> bool:
    """Whether a matrix kernel ran fp32 math on the vector units: its placed ``dtype`` says so (fp32
    not on tensor cores), or, without one (no shaped op), its name does. A missing dtype may arrive
    as NaN (a pandas str column holding known dtypes beside missing ones), not only None."""
    if not isinstance(dtype, str):
        dtype = None
    if dtype == "tf32" or TF32.search(kernel_name):
        return False
    if dtype == "fp32":
        return not tensor
    return dtype is None and bool(FP32_SIMT.search(kernel_name))
