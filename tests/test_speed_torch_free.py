"""The torch-free tables and formulas say exactly what torch says; analysis need not import torch.

``bwdiag/costs/torch_tables.json`` is generated from torch by ``scripts/gen_torch_tables.py``; if a
torch upgrade changes a schema or a promotion, these tests fail and name the entry to regenerate.
"""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import flop_registry

from bwdiag.costs import args as costs_args
from bwdiag.costs import dtypes, torch_free
from tests.conftest import A100_TRAIN, REPO, shared_trace


def test_schema_table_matches_torch():
    table = torch_free._tables()["schemas"]
    assert len(table) > 1500
    for name in ("aten::mm", "aten::sum", "aten::add_", "aten::native_layer_norm", "aten::convolution"):
        assert name in table
    wrong = [n for n in table if torch_free.overloads(n) != costs_args._torch_overloads(n)]
    assert not wrong, f"regenerate with scripts/gen_torch_tables.py: {wrong[:5]}"


def test_sum_schema_names_dim_and_keepdim():
    """The table answers the lookups the reduction formula makes (checked by hand against the schema)."""
    names = costs_args.schema_args("aten::sum", ("float", "ScalarList", "Scalar", ""))
    assert [n for n, _ in names] == ["self", "dim", "keepdim", "dtype"]


def test_promotion_table_matches_torch():
    types = dtypes._TORCH_TYPE_NAMES
    for a, b in itertools.product(types, types):
        try:
            expected = dtypes._from_torch(torch.promote_types(dtypes._to_torch(a), dtypes._to_torch(b)))
        except RuntimeError:
            expected = None
        assert torch_free.promote_types([a, b]) == expected, (a, b)
    assert torch_free.promote_types(["c10::Half", "float", "c10::BFloat16"]) == "float"
    assert torch_free.promote_types(["long"]) == "long int"  # spelling normalised, as torch does
    assert torch_free.promote_types(["TensorList", "float"]) is None  # not a dtype: refused like torch


@pytest.mark.parametrize("op,shapes", [
    ("mm", [(128, 64), (64, 32)]),
    ("addmm", [(32,), (128, 64), (64, 32)]),
    ("bmm", [(4, 128, 64), (4, 64, 32)]),
    ("baddbmm", [(4, 128, 32), (4, 128, 64), (4, 64, 32)]),
    ("_scaled_mm", [(128, 64), (64, 32), (), ()]),
])
def test_gemm_flops_equal_torch_registry(op, shapes):
    ours = torch_free.FLOP_FORMULAS[op](*shapes, out_val=None)
    theirs = flop_registry[getattr(torch.ops.aten, op)](*shapes, out_val=None)
    assert ours == theirs
    assert ours == 2 * 128 * 64 * 32 * (4 if "bmm" in op else 1)  # 2·M·N·K (·batch)


def test_mismatched_gemm_raises_like_torch():
    with pytest.raises(AssertionError):
        torch_free.mm_flop((4, 5), (6, 7))
    with pytest.raises(AssertionError):
        torch_free.bmm_flop((2, 4, 5), (3, 5, 7))


def test_analyze_does_not_import_torch():
    """A GEMM-and-elementwise training trace is analysed without the 2-4 s torch import."""
    path = shared_trace(A100_TRAIN)
    code = ("import sys; from bwdiag.pipeline import analyze; d = analyze([sys.argv[1]]); "
            "assert d.kernels; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
