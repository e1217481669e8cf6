"""Regenerate ``bwdiag/costs/torch_tables.json``: what the cost model would otherwise import torch for.

Importing torch takes 2-4 s and ~190 MB, more than bwdiag needs to analyse a 100k-event trace. The
cost model uses torch for three things that are pure data: operator schemas (argument names, to read
``Concrete Inputs`` by name), dtype promotion between the Kineto type strings, and the GEMM FLOP
formulas (kept as code in :mod:`bwdiag.costs.torch_free`). This script dumps the first two from the
installed torch; ``tests/test_speed_torch_free.py`` checks the file still matches torch.

    python scripts/gen_torch_tables.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bwdiag.costs import args as costs_args  # noqa: E402
from bwdiag.costs import dtypes  # noqa: E402
from bwdiag.costs.torch_free import TABLE_PATH, promotion_key  # noqa: E402


def schemas() -> dict[str, list]:
    names = sorted({s.name for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")})
    out = {}
    for name in names:
        costs_args._overloads.cache_clear()
        out[name] = [list(map(list, ov)) for ov in costs_args._torch_overloads(name)]
    return out


def promotions() -> dict[str, str | None]:
    """Pairwise promotion of every Kineto type string bwdiag maps to a torch dtype."""
    types = sorted(dtypes._TORCH_TYPE_NAMES)
    out = {}
    for a in types:
        for b in types:
            try:
                res = dtypes._from_torch(torch.promote_types(dtypes._to_torch(a), dtypes._to_torch(b)))
                res = "?" if res is None else res  # a dtype bwdiag has no name for: ask torch
            except (RuntimeError, TypeError):
                res = None
            out[promotion_key(a, b)] = res
    return out


def main() -> int:
    import json

    table = {"torch_version": torch.__version__, "promotions": promotions(), "schemas": schemas()}
    lines = ["{", f'"torch_version": {json.dumps(table["torch_version"])},',
             f'"promotions": {json.dumps(table["promotions"], sort_keys=True)},', '"schemas": {']
    items = list(table["schemas"].items())
    for i, (name, ovs) in enumerate(items):
        lines.append(f"{json.dumps(name)}: {json.dumps(ovs, separators=(',', ':'))}" + ("," if i < len(items) - 1 else ""))
    lines += ["}", "}"]
    TABLE_PATH.write_text("\n".join(lines) + "\n")
    print(f"{TABLE_PATH}: {len(items)} ops, {len(table['promotions'])} promotions (torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
