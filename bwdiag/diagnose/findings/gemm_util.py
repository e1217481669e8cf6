"""Helpers for the GEMM-level rules: kernel groups of one category, their rows, their devices' roofs."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from bwdiag.costs.dtypes import dtype_bytes
from bwdiag.diagnose.findings.base import RuleContext, op_column

MATRIX = ("gemm", "conv")

#: fp32 kernels that run on the vector units (CUDA cores): sgemm / scudnn / cutlass simt.
FP32_SIMT = re.compile(r"sgemm|scudnn|_simt_s|simt_sgemm|gemv2T_kernel_val<int, int, float|gemvx?<.*float", re.I)
TF32 = re.compile(r"tf32|tensorop_s\d+|s1688gemm|s16816gemm|_s1688|xmma_.*_f32f32_tf32", re.I)

#: Ops whose second matrix argument is a weight (a Linear / mm against a parameter).
WEIGHT_ARG = {"aten::mm": 1, "aten::addmm": 2, "aten::linear": 1, "aten::matmul": 1}


def groups_of(ctx: RuleContext):
    """(rank position, analysis, groups) for every rank with placed groups."""
    for pos, a in enumerate(ctx.analyses):
        if len(a.groups) and "category" in a.groups.columns:
            yield pos, a, a.groups


def rows_of(a, gid) -> np.ndarray:
    """Row positions in ``a.activities`` of kernel group ``gid``."""
    return np.flatnonzero(a.activities["group"].to_numpy() == gid)


def share_of_roof(g) -> float | None:
    """The group's achieved share of its roof (0-1), from the roofline placement."""
    pct = g.pct_of_ceiling
    if pct is None or pd.isna(pct) or pct <= 0:
        return None
    return min(1.0, float(pct) / 100.0)


def weight_bytes(a, g) -> float | None:
    """Bytes of the weight matrix of a Linear-style GEMM group (per call), from the op's shapes."""
    arg = WEIGHT_ARG.get(g.op_name)
    if arg is None:
        return None
    op = int(a.activities.loc[a.activities["group"] == g.Index, "op"].iloc[0])
    dims, types = op_column(a.trace.ops, "dims")[op], op_column(a.trace.ops, "types")[op]
    if not isinstance(dims, list) or len(dims) <= arg or not isinstance(dims[arg], list) or len(dims[arg]) != 2:
        return None
    elem = dtype_bytes(types[arg]) if isinstance(types, list) and len(types) > arg else None
    return float(np.prod(dims[arg]) * elem) if elem else None
