"""Which unit and precision a matrix kernel really ran on, from its name.

The op says fp32, but cuBLAS/cuDNN may run it on tensor cores as TF32 (``allow_tf32``): the kernel
name tells (``tf32``, cutlass ``tensorop_s1688gemm``); ``sgemm``/``scudnn`` kernels are plain fp32 on
the vector units. Getting this wrong puts a TF32 GEMM at 250% of the fp32 roof.
"""

from __future__ import annotations

import re

_TF32 = re.compile(r"tf32|tensorop_s\d+|s1688gemm|s16816gemm|_s1688|xmma_.*_f32f32_tf32", re.I)
_FP32_SIMT = re.compile(r"sgemm|scudnn|_sgemv|gemv2T_kernel_val<int, int, float|gemvx?<.*float", re.I)


def matrix_unit(kernel_name: str, dtype: str | None, tensor: bool) -> tuple[str | None, bool]:
    """(roof dtype, on tensor cores) for a GEMM/conv/attention kernel whose op recorded ``dtype``."""
    if dtype == "fp32":
        if _TF32.search(kernel_name):
            return "tf32", True
        return "fp32", False
    return dtype, tensor
