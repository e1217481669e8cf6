"""Join each GPU activity (or, on a CPU-only trace, each leaf CPU op) with its cost estimate.

An op's FLOPs and bytes are spread over the kernels it launched in proportion to their time (a
split-K GEMM's reduction kernel shares the GEMM's cost). Kernels with no shaped op — torch.compile,
Triton, CUDA-graph replays, launches the trace did not record — keep ``None`` estimates and are
categorised by their name.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from bwdiag.costs import Category, Cost, categorize_kernel, estimate_op, memcpy_cost, memset_cost
from bwdiag.diagnose.tensor_units import matrix_unit
from bwdiag.trace import RankTrace

ACTIVITY_COLUMNS = [
    "name", "kind", "ts", "dur", "end", "stream", "blocks", "op", "op_name", "shapes", "module",
    "category", "dtype", "tensor", "flops", "bytes", "graph", "link", "args", "launch_ts", "launch_dur",
]


def gpu_activities(trace: RankTrace) -> pd.DataFrame:
    """Kernels, memcpys and memsets of one rank with category, dtype and flops/bytes estimates."""
    gpu = trace.gpu
    ops = trace.ops
    n = len(gpu)
    flops = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    dtype = np.full(n, None, dtype=object)
    tensor = np.zeros(n, dtype=bool)
    category = np.array([categorize_kernel(name).value for name in gpu["name"]], dtype=object) if n else np.array([], dtype=object)

    op_idx = gpu["op"].to_numpy()
    kinds = gpu["kind"].to_numpy()
    graph = gpu["graph"].to_numpy()
    costed = (op_idx >= 0) & (kinds == "kernel") & ~graph
    first_kernel = dict(zip(op_idx[costed][::-1], gpu["name"].to_numpy()[costed][::-1]))
    op_costs = _op_costs(ops, np.unique(op_idx[costed]), first_kernel)

    # Kernel time per op, to share the op's cost among its kernels.
    is_costed_kernel = (kinds == "kernel") & ~graph & (op_idx >= 0)
    durs = gpu["dur"].to_numpy()
    op_time = pd.Series(durs[is_costed_kernel]).groupby(op_idx[is_costed_kernel]).sum()
    op_kernels = pd.Series(durs[is_costed_kernel]).groupby(op_idx[is_costed_kernel]).size()

    names = gpu["name"].to_numpy()
    args = gpu["args"].to_numpy()
    for i in range(n):
        if kinds[i] == "memcpy":
            cost = memcpy_cost(args[i] or {}, names[i])
        elif kinds[i] == "memset":
            cost = memset_cost(args[i] or {})
        elif is_costed_kernel[i] and category[i] != Category.COMMUNICATION.value:
            cost = op_costs.get(op_idx[i])
            if cost is None:
                continue
            total = op_time.get(op_idx[i], 0.0)
            # Instant (zero-duration) kernels are legitimate: when all of an op's kernels are instant,
            # they share its cost equally rather than dropping it.
            share = durs[i] / total if total > 0 else 1.0 / op_kernels.get(op_idx[i], 1)
            if cost.category is not Category.OTHER:
                category[i] = cost.category.value
            dtype[i], tensor[i] = cost.dtype, cost.tensor
            if cost.tensor:
                dtype[i], tensor[i] = matrix_unit(names[i], cost.dtype, cost.tensor)
            if cost.flops is not None:
                flops[i] = cost.flops * share
            if cost.bytes is not None:
                nbytes[i] = cost.bytes * share
            continue
        else:
            continue
        category[i] = cost.category.value
        dtype[i] = cost.dtype
        if cost.flops is not None:
            flops[i] = cost.flops
        if cost.bytes is not None:
            nbytes[i] = cost.bytes

    op_name = ops["name"].reindex(op_idx).to_numpy() if n else np.array([], dtype=object)
    op_name = np.where(op_idx >= 0, op_name, None)
    module = ops["module"].reindex(op_idx).to_numpy() if n else np.array([], dtype=object)
    module = np.where(op_idx >= 0, module, None)
    shape_of = {i: _shapes_str(ops, i) for i in np.unique(op_idx)}
    shapes = np.array([shape_of[i] for i in op_idx], dtype=object)
    out = pd.DataFrame(
        {
            "name": gpu["name"], "kind": gpu["kind"], "ts": gpu["ts"], "dur": gpu["dur"], "end": gpu["end"],
            "stream": gpu["stream"], "blocks": gpu["blocks"], "op": op_idx, "op_name": op_name,
            "shapes": shapes, "module": module, "category": category, "dtype": dtype, "tensor": tensor,
            "flops": flops, "bytes": nbytes, "graph": graph, "link": gpu["link"], "args": gpu["args"],
            "launch_ts": gpu["launch_ts"], "launch_dur": gpu["launch_dur"],
        }
    )
    return out


def cpu_activities(trace: RankTrace) -> pd.DataFrame:
    """The CPU ops of a CPU-only trace that do the work, with their cost estimates.

    Walking each thread's op tree from the top, an op is taken as one unit of work when the cost
    model knows it (``aten::mul`` — not the scalar ``copy_`` it calls inside) or when it calls no
    other op; wrappers with no cost formula (autograd nodes, ``aten::linear``'s callers …) are
    opened up. gloo runs collectives on its own thread and records them as ``gloo:<collective>``
    annotations: those spans are the communication (the issuing ``c10d::`` op only enqueues it).
    """
    ops = trace.ops
    cpu = ops[(ops["cat"] == "cpu_op") & (ops["dur"] > 0)]
    gloo = ops[(ops["cat"] == "user_annotation") & ops["name"].str.startswith("gloo:") & (ops["dur"] > 0)]
    costs = _op_costs(ops, cpu.index.to_numpy())
    children: dict[int, list[int]] = {}
    for idx, parent in zip(cpu.index, cpu["parent"]):
        children.setdefault(int(parent), []).append(idx)
    work: list[int] = []
    stack = list(reversed(children.get(-1, [])))
    while stack:
        idx = stack.pop()
        kids = children.get(idx)
        cost = costs[idx]
        if not kids or cost.flops is not None or cost.bytes is not None:
            work.append(idx)
        else:
            stack.extend(reversed(kids))
    leaf = cpu.loc[sorted(work)]
    if len(gloo):  # the enqueueing c10d ops would count the same collective twice
        leaf = leaf[~leaf["name"].str.startswith("c10d::")]
    rows = []
    for idx, op in leaf.iterrows():
        cost = costs[idx]
        rows.append(
            (op["name"], "cpu_op", op["ts"], op["dur"], op["end"], op["tid"], None, idx, op["name"],
             _shapes_str(ops, idx), op["module"], cost.category.value, cost.dtype, cost.tensor,
             np.nan if cost.flops is None else cost.flops, np.nan if cost.bytes is None else cost.bytes,
             False, "self", op["args"], np.nan, np.nan)
        )
    for idx, op in gloo.iterrows():
        rows.append(
            (op["name"], "cpu_op", op["ts"], op["dur"], op["end"], op["tid"], None, idx, op["name"],
             _shapes_str(ops, idx), op["module"], Category.COMMUNICATION.value, None, False, np.nan, np.nan,
             False, "self", op["args"], np.nan, np.nan)
        )
    return pd.DataFrame(rows, columns=ACTIVITY_COLUMNS).sort_values("ts", kind="stable").reset_index(drop=True)


def _op_costs(ops: pd.DataFrame, indices, kernel_names: dict | None = None) -> dict[int, Cost]:
    """Cost of each op, computed once per distinct (name, shapes, types, concrete inputs).

    TensorList args record no element type; the op's first kernel name carries it, so it is passed
    (and becomes part of the cache key) for those ops only.
    """
    cache: dict[str, Cost] = {}
    out: dict[int, Cost] = {}
    for idx in indices:
        row = ops.loc[idx]
        types = row["types"]
        kernel = None
        if kernel_names and isinstance(types, list) and "TensorList" in types:
            kernel = kernel_names.get(idx)
        key = json.dumps([row["name"], row["dims"], types, row["concrete"], kernel], default=str)
        cost = cache.get(key)
        if cost is None:
            cost = cache[key] = estimate_op(row["name"], row["dims"], types, row["concrete"], row["strides"],
                                            kernel_name=kernel)
        out[idx] = cost
    return out


def _shapes_str(ops: pd.DataFrame, idx: int) -> str | None:
    if idx < 0:
        return None
    dims, types = ops.at[idx, "dims"], ops.at[idx, "types"]
    if not isinstance(dims, list):
        return None
    parts = []
    for i, d in enumerate(dims):
        if isinstance(d, list) and d:
            t = types[i] if isinstance(types, list) and i < len(types) else ""
            parts.append(f"{_short_type(t)}{d}")
    return ", ".join(parts) if parts else None


_SHORT = {"float": "f32", "c10::Half": "f16", "c10::BFloat16": "bf16", "double": "f64", "long int": "i64",
          "int": "i32", "bool": "b"}


def _short_type(t) -> str:
    return _SHORT.get(t, str(t).replace("c10::", "")) if t else ""
