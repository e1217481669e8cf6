"""Join each GPU activity (or, on a CPU-only trace, each leaf CPU op) with its cost estimate.

An op's FLOPs and bytes are spread over the kernels it launched in proportion to their time (a
split-K GEMM's reduction kernel shares the GEMM's cost). Helper kernels of a GEMM, convolution or
attention op — ones whose own name says layout transpose, copy, cast, fill or elementwise (cuDNN
``nchwToNhwcKernel``, MIOpen ``batched_transpose_*``, a ``direct_copy`` under ``aten::addmm``) — keep
their own category and take no share: the op's cost goes wholly to its main-work kernels, and a
copy-like helper gets 0 FLOPs. A layout copy (transpose) under a convolution gets
the bytes of reading and writing the op's first input, the activation it re-lays out, when that
input's shape is recorded. Its bytes stay unknown otherwise, and under GEMM/attention ops, where a
copy's size is not the first input's. When every kernel of an op looks like a helper, they all
share its cost as before. Kernels with no shaped op — torch.compile, Triton, CUDA-graph replays,
launches the trace did not record — keep ``None`` estimates and are
categorised by their name.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from bwdiag.costs import Category, Cost, categorize_kernel, estimate_op, memcpy_cost, memset_cost
from bwdiag.costs.conv_context import complete_conv_costs
from bwdiag.costs.transfers import LaunchOp, has_bytes
from bwdiag.costs.dtypes import dtype_bytes
from bwdiag.diagnose import compiled
from bwdiag.diagnose.shapes import format_shapes
from bwdiag.diagnose.tensor_units import matrix_unit
from bwdiag.trace import RankTrace

ACTIVITY_COLUMNS = [
    "name", "kind", "ts", "dur", "end", "stream", "blocks", "op", "op_name", "shapes", "module",
    "category", "dtype", "tensor", "flops", "bytes", "graph", "link", "args", "launch_ts", "launch_dur",
]

# Ops whose cost is arithmetic done by their main kernels; helper kernels they launch (by their own
# name) take none of it.
#: An ATen op runs no Python between the ops it calls: a stretch of its own time longer than this,
#: with no child op running, is its kernel at work, not dispatch. Such an op with no cost formula is one
#: unit of work; opened up, its kernel's time would read as dispatch gaps —
#: ``aten::_scaled_dot_product_flash_attention_for_cpu_backward`` zeroes its gradient buffers, runs its
#: kernel for ≈ 830 µs with no child op, then calls ``transpose`` (7.5 ms of the bundled transformer's
#: window on 7 Dec 2026 read as host overhead, before the cost model knew that op).
OWN_WORK_US = 50.0

_COMPUTE = frozenset({Category.GEMM.value, Category.CONV.value, Category.ATTENTION.value})
_COPY_LIKE = frozenset({Category.COPY.value, Category.CAST.value, Category.MEMSET.value, Category.MEMCPY.value})
_HELPER = _COPY_LIKE | {Category.ELEMENTWISE.value}


def gpu_activities(trace: RankTrace) -> pd.DataFrame:
    """Kernels, memcpys and memsets of one rank with category, dtype and flops/bytes estimates."""
    gpu = trace.gpu
    ops = trace.ops
    n = len(gpu)
    flops = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    dtype = np.full(n, None, dtype=object)
    tensor = np.zeros(n, dtype=bool)
    names = gpu["name"].to_numpy(dtype=object)
    name_codes, unique_names = pd.factorize(names) if n else (np.zeros(0, dtype=np.int64), np.array([]))
    category = np.array([categorize_kernel(u).value for u in unique_names], dtype=object)[name_codes] \
        if n else np.array([], dtype=object)

    op_idx = gpu["op"].to_numpy()
    kinds = gpu["kind"].to_numpy(dtype=object)
    graph = gpu["graph"].to_numpy()
    costed = (op_idx >= 0) & (kinds == "kernel") & ~graph
    first_kernel = dict(zip(op_idx[costed][::-1], gpu["name"].to_numpy()[costed][::-1]))
    op_costs = _op_costs(ops, np.unique(op_idx[costed]), first_kernel)

    is_costed_kernel = (kinds == "kernel") & ~graph & (op_idx >= 0)
    durs = gpu["dur"].to_numpy()

    # Kernels that inherit their op's cost (one vectorised pass per distinct op).
    rows = np.flatnonzero(is_costed_kernel & (category != Category.COMMUNICATION.value))
    if len(rows):
        ops_here = op_idx[rows]
        costed = np.array([op_costs.get(o) is not None for o in ops_here], dtype=bool)
        rows, ops_here = rows[costed], ops_here[costed]
    helper = np.zeros(len(rows), dtype=bool)
    if len(rows):
        costs = [op_costs[o] for o in ops_here]
        # Helper kernels (by their own name) of compute ops; an op all of whose kernels look like
        # helpers keeps sharing among them all.
        helper = np.array([c.category.value in _COMPUTE for c in costs], dtype=bool) \
            & np.isin(category[rows], list(_HELPER))
        if helper.any():
            main_ops = set(ops_here[~helper].tolist())
            helper &= np.array([o in main_ops for o in ops_here], dtype=bool)
        main = ~helper
        total = pd.Series(durs[rows[main]]).groupby(ops_here[main]).sum().reindex(ops_here).fillna(0.0).to_numpy()
        count = pd.Series(durs[rows[main]]).groupby(ops_here[main]).size().reindex(ops_here).fillna(1).to_numpy()
        # Instant (zero-duration) kernels are legitimate: when all of an op's kernels are instant,
        # they share its cost equally rather than dropping it.
        share = 1.0 / count.astype(float)
        np.divide(durs[rows], total, out=share, where=total > 0)
        share[helper] = 0.0
        own = np.array([c.category is not Category.OTHER for c in costs], dtype=bool) & main
        category[rows[own]] = [c.category.value for c, o in zip(costs, own) if o]
        unit_of: dict[tuple, tuple] = {}
        for k, (i, c) in enumerate(zip(rows, costs)):
            if helper[k]:
                dtype[i] = c.dtype
            elif c.tensor:
                key = (name_codes[i], c.dtype)
                unit = unit_of.get(key)
                if unit is None:
                    unit = unit_of[key] = matrix_unit(names[i], c.dtype, c.tensor)
                dtype[i], tensor[i] = unit
            else:
                dtype[i], tensor[i] = c.dtype, c.tensor
        cf = np.array([np.nan if c.flops is None else c.flops for c in costs], dtype=float)
        cb = np.array([np.nan if c.bytes is None else c.bytes for c in costs], dtype=float)
        flops[rows] = cf * share
        nbytes[rows] = cb * share
        if helper.any():
            flops[rows[helper]] = np.nan
            nbytes[rows[helper]] = np.nan
            first_input = _first_input_bytes(ops, np.unique(ops_here[helper]))
            for i, o in zip(rows[helper], ops_here[helper]):
                if category[i] in _COPY_LIKE:
                    flops[i] = 0.0  # a transpose or copy does no arithmetic
                    b = first_input.get(o) if op_costs[o].category is Category.CONV else None
                    if b is not None and category[i] == Category.COPY.value:
                        nbytes[i] = 2.0 * b  # reads and writes the tensor it re-lays out

    # Copies and fills: their own cost, from their args (or, with no ``bytes`` there, their op's).
    args = gpu["args"].to_numpy(dtype=object)
    transfers = np.flatnonzero((kinds == "memcpy") | (kinds == "memset"))
    launch, share = _transfer_launches(ops, transfers, op_idx, kinds, args, durs)
    for i in transfers:
        o = launch.get(i)
        cost = memcpy_cost(args[i] or {}, names[i], o, share.get(i, 1.0)) if kinds[i] == "memcpy" \
            else memset_cost(args[i] or {}, o, share.get(i, 1.0))
        category[i] = cost.category.value
        dtype[i] = cost.dtype
        if cost.flops is not None:
            flops[i] = cost.flops
        if cost.bytes is not None:
            nbytes[i] = cost.bytes

    op_name = ops["name"].reindex(op_idx).to_numpy(dtype=object) if n else np.array([], dtype=object)
    op_name = np.where(op_idx >= 0, op_name, None)
    module = ops["module"].reindex(op_idx).to_numpy(dtype=object) if n else np.array([], dtype=object)
    module = np.where(op_idx >= 0, module, None)
    uniq_ops, op_codes = np.unique(op_idx, return_inverse=True)
    shapes = np.array(_shapes_of(ops, uniq_ops), dtype=object)[op_codes] if n else np.array([], dtype=object)
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


def _works_itself(cpu: pd.DataFrame, idx: int, kids: list[int]) -> bool:
    """Whether op ``idx`` (an index label of ``cpu``; ``kids`` its children) is an ATen op that runs
    for over ``OWN_WORK_US`` at a stretch with none of its children running."""
    if not str(cpu.at[idx, "name"]).startswith("aten::"):
        return False
    t, stop = float(cpu.at[idx, "ts"]), float(cpu.at[idx, "end"])
    for start, end in sorted((float(cpu.at[k, "ts"]), float(cpu.at[k, "end"])) for k in kids):
        if start - t > OWN_WORK_US:
            return True
        t = max(t, end)
    return stop - t > OWN_WORK_US


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
    container = set(cpu.index[compiled.is_container(cpu["name"])].tolist())
    compiling = set(cpu.index[compiled.is_compile(cpu["name"])].tolist())
    work: list[int] = []
    roots: list[int] = []  # outermost compiled regions
    in_root: dict[int, int] = {}  # work op -> the compiled region it ran in
    skipped: dict[int, list[int]] = {}  # region -> compilation spans inside it
    stack = [(i, -1) for i in reversed(children.get(-1, []))]
    while stack:
        idx, root = stack.pop()
        if idx in compiling:  # torch.compile compiling: fake-tensor tracing, not the model's work
            if root >= 0:
                skipped.setdefault(root, []).append(idx)
            continue
        kids = children.get(idx)
        if idx in container:  # a compiled region is opened up; what it did not record is booked below
            if root < 0:
                root = idx
                roots.append(idx)
            stack.extend((k, root) for k in reversed(kids or []))
            continue
        cost = costs[idx]
        if not kids or cost.flops is not None or cost.bytes is not None or _works_itself(cpu, idx, kids):
            work.append(idx)
            if root >= 0:
                in_root[idx] = root
        else:
            stack.extend((k, root) for k in reversed(kids))
    leaf = cpu.loc[sorted(work)]
    if len(gloo):  # the enqueueing c10d ops would count the same collective twice
        leaf = leaf[~leaf["name"].str.startswith("c10d::")]
    rows = []
    shapes = _shapes_of(ops, leaf.index.to_numpy())
    for idx, name, ts, dur, end, tid, module, shape, args in zip(
            leaf.index, leaf["name"], leaf["ts"], leaf["dur"], leaf["end"], leaf["tid"], leaf["module"], shapes,
            leaf["args"]):
        cost = costs[idx]
        kind, category = "cpu_op", cost.category
        if idx in in_root:  # inside a compiled region (Inductor's extern calls, its profiled kernels)
            kind = compiled.COMPILED_KIND
            if category is Category.OTHER and cost.flops is None and cost.bytes is None:
                category = categorize_kernel(name)  # graph_0_cpp_fused_relu_0 -> elementwise
        rows.append(
            (name, kind, ts, dur, end, tid, None, idx, name,
             shape, module, category.value, cost.dtype, cost.tensor,
             np.nan if cost.flops is None else cost.flops, np.nan if cost.bytes is None else cost.bytes,
             False, "self", args, np.nan, np.nan)
        )
    by_root: dict[int, list[int]] = {}
    for idx, root in in_root.items():
        by_root.setdefault(root, []).append(idx)
    rows.extend(compiled.residual_rows(ops, roots, by_root, skipped))
    for (idx, op), shape in zip(gloo.iterrows(), _shapes_of(ops, gloo.index.to_numpy())):
        rows.append(
            (op["name"], "cpu_op", op["ts"], op["dur"], op["end"], op["tid"], None, idx, op["name"],
             shape, op["module"], Category.COMMUNICATION.value, None, False, np.nan, np.nan,
             False, "self", op["args"], np.nan, np.nan)
        )
    return pd.DataFrame(rows, columns=ACTIVITY_COLUMNS).sort_values("ts", kind="stable").reset_index(drop=True)


def _op_costs(ops: pd.DataFrame, indices, kernel_names: dict | None = None) -> dict[int, Cost]:
    """Cost of each op, computed once per distinct (name, shapes, types, concrete inputs, strides).

    The loader gives every distinct argument signature an id (``sig``), so the cache key is cheap.
    TensorList args record no element type; the op's first kernel name carries it, so it is passed
    (and becomes part of the cache key) for those ops only.
    """
    cache: dict[tuple, Cost] = {}
    out: dict[int, Cost] = {}
    if len(indices) == 0:
        return out
    sel = ops.loc[indices]
    sigs = sel["sig"].to_numpy() if "sig" in sel else None
    for k, (idx, name, dims, types, concrete, strides) in enumerate(
            zip(sel.index, sel["name"], sel["dims"], sel["types"], sel["concrete"], sel["strides"])):
        kernel = None
        if kernel_names and isinstance(types, list) and "TensorList" in types:
            kernel = kernel_names.get(idx)
        key = (name, int(sigs[k]), kernel) if sigs is not None else \
            (name, json.dumps([dims, types, concrete, strides], default=str), kernel)
        cost = cache.get(key)
        if cost is None:
            cost = cache[key] = estimate_op(name, dims, types, concrete, strides, kernel_name=kernel)
        out[idx] = cost
    return complete_conv_costs(ops, out)  # conv shapes an op lacks, from its layer's backward


def _transfer_launches(ops, rows, op_idx, kinds, args, durs) -> tuple[dict, dict]:
    """For memcpy/memset rows without ``bytes`` that have a launching op: that op (``LaunchOp``),
    and each row's share of it — split by duration when one op launched several such transfers."""
    rows = [i for i in rows if op_idx[i] >= 0 and not has_bytes(args[i])]
    launch: dict[int, LaunchOp] = {}
    share: dict[int, float] = {}
    if not rows:
        return launch, share
    sel = ops.loc[np.unique(op_idx[rows]), ["name", "dims", "types", "concrete"]]
    found = {o: LaunchOp(n, d, t, c) for o, n, d, t, c in
             zip(sel.index, sel["name"], sel["dims"], sel["types"], sel["concrete"])}
    groups: dict[tuple, list[int]] = {}
    for i in rows:
        launch[i] = found[op_idx[i]]
        groups.setdefault((op_idx[i], kinds[i]), []).append(i)
    for members in groups.values():
        if len(members) > 1:
            total = float(sum(durs[i] for i in members))
            for i in members:
                share[i] = durs[i] / total if total > 0 else 1.0 / len(members)
    return launch, share


def _first_input_bytes(ops: pd.DataFrame, indices: np.ndarray) -> dict[int, float]:
    """Size in bytes of each op's first tensor input (ops whose first argument has no recorded
    shape or element type are left out)."""
    out: dict[int, float] = {}
    sel = ops.loc[indices, ["dims", "types"]]
    for idx, dims, types in zip(sel.index, sel["dims"], sel["types"]):
        if not isinstance(dims, list) or not dims or not isinstance(dims[0], list) or not dims[0]:
            continue
        size = dtype_bytes(types[0]) if isinstance(types, list) and types else None
        if size is None or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in dims[0]):
            continue
        out[int(idx)] = float(np.prod(dims[0], dtype=float)) * size
    return out


def _shapes_of(ops: pd.DataFrame, indices: np.ndarray) -> list[str | None]:
    """The shapes column text (``f32[4096, 100], …``) of each op label (-1 gives None)."""
    valid = indices[indices >= 0]
    sel = ops.loc[valid, ["dims", "types", "sig"] if "sig" in ops else ["dims", "types"]]
    sigs = sel["sig"].to_numpy() if "sig" in sel else np.arange(len(sel))
    by_sig: dict[int, str | None] = {}  # ops with the same argument signature print the same
    found = {}
    for i, s, d, t in zip(valid, sigs, sel["dims"], sel["types"]):
        if s not in by_sig:
            by_sig[s] = format_shapes(d, t)
        found[i] = by_sig[s]
    return [found.get(i) for i in indices]
