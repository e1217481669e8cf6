"""torch.compile on a CPU-only trace: compiled regions are work, compilation is not.

What Inductor's CPU code leaves in a Kineto trace (torch 2.x, ``record_shapes=True``):

* ``Torch-Compiled Region: 0/0`` (cpu_op) spans one run of a compiled frame. Inside it, leaf ops
  of Dynamo/AOT's wrappers (``Pregraph bytecode``, ``AOTDispatcher Runtime Wrapper Prologue``) and,
  when the frame needs autograd, ``CompiledFunction`` (cpu_op, with the graph inputs' shapes in
  ``Input Dims``). The backward runs inside ``CompiledFunctionBackward`` (shapes of the incoming
  gradients only).
* ``## Call CompiledFxGraph <hash> ##`` (user_annotation) spans the call of the generated module.
  The only ops recorded inside it are the ones Inductor calls out to (``aten::mm``/``addmm`` …);
  its own fused C++ loops record nothing, unless ``torch._inductor.config.cpp.enable_kernel_profile``
  is set (then each is a ``graph_0_cpp_fused_*`` cpu_op with no shapes).

Walking the op tree for leaf work (:func:`bwdiag.diagnose.activities.cpu_activities`) therefore
finds next to nothing in a compiled region, and the fused loops' time read as idle. This module
books the *residual* of each compiled region — its span minus the work ops recorded inside it — as
activity rows of kind ``"compiled"``:

* inside a graph call: ``CompiledFxGraph <hash> (Inductor code)``. When the call recorded no op of
  its own (a fully fused graph) this is the fused loops: category elementwise, and its bytes are the
  graph inputs read once (from the enclosing ``CompiledFunction``'s shapes) — a floor, since outputs
  and tensors saved for backward are not recorded — with FLOPs unknown. Without shapes (inference
  under ``no_grad`` has no ``CompiledFunction``) both stay unknown. When the call also ran ops of its
  own, the residual is wrapper code and unrecorded loops mixed: category other, no estimate.
* outside graph calls but inside a region: ``<region> (Dynamo/AOT wrappers)``, category other.

Compilation inside the window (``dynamo`` / ``entire_frame_compile`` / ``… (dynamo_timed)`` spans
of the first call) is neither: the aten ops it runs are fake-tensor tracing, not the model's work.
They are left out of the activities (so that time is not busy), and measured for a warning.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from bwdiag.costs import Category
from bwdiag.costs.dtypes import bwdiag_dtype, dtype_bytes
from bwdiag.diagnose.model import CompiledFacts
from bwdiag.diagnose.names import name_matches
from bwdiag.diagnose.shapes import format_shapes
from bwdiag.diagnose.timeline import merged_runs

#: cpu_ops that wrap a compiled region's execution: never a unit of work themselves.
CONTAINER = re.compile(r"^(?:Torch-Compiled Region\b|CompiledFunction$|CompiledFunctionBackward$)")
#: The call of Inductor's generated module (a user_annotation).
GRAPH_CALL = re.compile(r"^## Call CompiledFxGraph\s*(\S*?)\s*##$")
#: The outer spans of torch.compile's compilation (first call, recompiles, lazy backward compile).
COMPILE = re.compile(r"^(?:dynamo|entire_frame_compile|compile_attempt_\d+|backend_compile)$|\(dynamo_timed\)$")
#: Ops inside a graph call that do not make it "Inductor calling out": allocations and views.
_NO_WORK = re.compile(
    r"^aten::(?:empty|empty_strided|empty_like|as_strided|view|_reshape_alias|reinterpret_tensor|"
    r"resolve_conj|resolve_neg|alias|detach)$"
)

COMPILED_KIND = "compiled"
#: ``link`` of a residual row: its time is its region's, not a recorded op's.
RESIDUAL_LINK = "region"


def is_container(names: pd.Series) -> np.ndarray:
    return name_matches(names, CONTAINER, anchored=True)


def is_compile(names: pd.Series) -> np.ndarray:
    return name_matches(names, COMPILE, anchored=True)


def residual_rows(ops: pd.DataFrame, roots: list[int], work: dict[int, list[int]],
                  skipped: dict[int, list[int]]) -> list[tuple]:
    """Activity rows (``ACTIVITY_COLUMNS`` order) for the unrecorded time of compiled regions.

    ``roots``: op labels of the outermost compiled spans (containers, or graph calls outside any);
    ``work``: root -> labels of the work ops selected inside it; ``skipped``: root -> labels of
    compile spans inside it (their time is not the region's work either).
    """
    if not roots:
        return []
    graphs = _graph_calls(ops)
    rows: list[tuple] = []
    for root in roots:
        r = ops.loc[root]
        key = (r["pid"], r["tid"])
        g = graphs.get(key)
        inside = g[(g["ts"] >= r["ts"]) & (g["end"] <= r["end"])] if g is not None else graphs_none()
        covered = [int(i) for i in work.get(root, [])] + [int(i) for i in skipped.get(root, [])]
        cover_s = ops.loc[covered, "ts"].to_numpy(float) if covered else np.empty(0)
        cover_e = ops.loc[covered, "end"].to_numpy(float) if covered else np.empty(0)
        free = _subtract(float(r["ts"]), float(r["end"]), cover_s, cover_e)
        work_ops = ops.loc[[int(i) for i in work.get(root, [])]] if work.get(root) else ops.iloc[0:0]
        inputs = _region_inputs(ops, root, r, key)
        # Time inside each graph call, then what is left of the region outside them.
        outside = free
        for gidx, gs, ge in zip(inside.index, inside["ts"].to_numpy(float), inside["end"].to_numpy(float)):
            seg = _clip(outside, gs, ge)
            outside = _cut(outside, gs, ge)
            if not seg:
                continue
            own = work_ops[(work_ops["ts"] >= gs) & (work_ops["end"] <= ge)]
            pure = not (~name_matches(own["name"], _NO_WORK, anchored=True)).any() if len(own) else True
            graph_name = ops.at[gidx, "name"]
            m = GRAPH_CALL.match(graph_name)
            label = f"CompiledFxGraph {(m.group(1) if m else '')[:8]} (Inductor code)".replace("  ", " ")
            category = Category.ELEMENTWISE.value if pure else Category.OTHER.value
            nbytes, dtype, shapes = (inputs if pure else (None, None, None))
            total = sum(e - s for s, e in seg)
            for s, e in seg:
                share = (e - s) / total if total > 0 else 1.0 / len(seg)
                rows.append(_row(label, s, e, r["tid"], gidx, graph_name, shapes, ops.at[gidx, "module"],
                                 category, dtype, np.nan if nbytes is None else nbytes * share))
        label = f"{_region_label(r['name'])} (Dynamo/AOT wrappers)"
        for s, e in outside:
            rows.append(_row(label, s, e, r["tid"], root, r["name"], None, r["module"], Category.OTHER.value,
                             None, np.nan))
    return rows


def compiled_facts(ops: pd.DataFrame, acts: pd.DataFrame) -> CompiledFacts | None:
    """What a CPU rank's compiled regions and compilation amount to (µs), or None without either.

    ``regions``: compiled-region runs; ``residual_us``: their time with no recorded op (booked as
    ``compiled`` rows); ``residual_estimated_us``: the part with a byte estimate; ``compile_us``: the
    union of compilation spans (not work); ``compile_spans``: how many separate ones.
    """
    if ops.empty:
        return None
    cpu = ops[ops["cat"] == "cpu_op"]
    spans = cpu[is_compile(cpu["name"])]
    runs = merged_runs(spans["ts"].to_numpy(float), spans["end"].to_numpy(float))
    resid = acts[acts["link"] == RESIDUAL_LINK] if len(acts) else acts
    containers = cpu[is_container(cpu["name"])]
    regions = int(containers["name"].str.startswith("Torch-Compiled Region").sum()) if len(containers) else 0
    if spans.empty and resid.empty and not regions:
        return None
    fns = cpu[cpu["name"].isin(("CompiledFunction", "CompiledFunctionBackward"))]
    graph_inputs = int(fns["dims"].map(lambda d: isinstance(d, list) and len(d) > 0).sum()) if len(fns) else 0
    return CompiledFacts(
        regions=regions,
        residual_us=float(resid["dur"].sum()) if len(resid) else 0.0,
        residual_estimated_us=float(resid.loc[resid["bytes"].notna(), "dur"].sum()) if len(resid) else 0.0,
        compile_spans=int(len(runs[0])),
        compile_us=float(np.sum(runs[1] - runs[0])) if len(runs[0]) else 0.0,
        graph_inputs=float(graph_inputs),
    )


def graphs_none() -> pd.DataFrame:
    return pd.DataFrame({"ts": [], "end": []})


def _graph_calls(ops: pd.DataFrame) -> dict[tuple, pd.DataFrame]:
    ann = ops[(ops["cat"] == "user_annotation")]
    ann = ann[name_matches(ann["name"], GRAPH_CALL, anchored=True)] if len(ann) else ann
    return {k: g.sort_values("ts") for k, g in ann.groupby(["pid", "tid"], sort=False)} if len(ann) else {}


def _region_inputs(ops: pd.DataFrame, root: int, r: pd.Series, key: tuple) -> tuple:
    """(bytes, dtype, shapes text) of the graph inputs the region records, or Nones.

    The inputs are on the ``CompiledFunction`` / ``CompiledFunctionBackward`` op: the root itself or
    the one directly inside a ``Torch-Compiled Region``.
    """
    cand = ops[(ops["pid"] == key[0]) & (ops["tid"] == key[1]) & (ops["ts"] >= r["ts"]) & (ops["end"] <= r["end"])
               & ops["name"].isin(("CompiledFunction", "CompiledFunctionBackward"))]
    if cand.empty:
        return None, None, None
    c = cand.iloc[0]
    dims, types = c["dims"], c["types"]
    if not isinstance(dims, list) or not isinstance(types, list):
        return None, None, None
    total, dtype, any_tensor = 0.0, None, False
    for d, t in zip(dims, types):
        if not isinstance(d, list) or not d:
            continue  # a scalar or non-tensor argument
        size = dtype_bytes(t)
        if size is None or not all(isinstance(x, (int, np.integer)) and x >= 0 for x in d):
            return None, None, None  # a tensor whose size is not known: no floor either
        total += float(np.prod(d, dtype=float)) * size
        dtype = dtype or bwdiag_dtype(t)
        any_tensor = True
    if not any_tensor:
        return None, None, None
    return total, dtype, format_shapes(dims, types)  # the kernel table's shape text


def _region_label(name: str) -> str:
    return name.replace("Torch-Compiled Region:", "Torch-Compiled Region").strip()


def _subtract(s: float, e: float, cs: np.ndarray, ce: np.ndarray) -> list[tuple[float, float]]:
    """[s, e) minus the union of the intervals (cs, ce)."""
    if e <= s:
        return []
    if len(cs) == 0:
        return [(s, e)]
    rs, re_ = merged_runs(cs, ce)
    out, t = [], s
    for a, b in zip(rs.tolist(), re_.tolist()):
        if b <= t:
            continue
        if a >= e:
            break
        if a > t:
            out.append((t, min(a, e)))
        t = max(t, b)
    if t < e:
        out.append((t, e))
    return out


def _clip(segs: list[tuple[float, float]], s: float, e: float) -> list[tuple[float, float]]:
    return [(max(a, s), min(b, e)) for a, b in segs if min(b, e) > max(a, s)]


def _cut(segs: list[tuple[float, float]], s: float, e: float) -> list[tuple[float, float]]:
    out = []
    for a, b in segs:
        if a < s:
            out.append((a, min(b, s)))
        if b > e:
            out.append((max(a, e), b))
    return [(a, b) for a, b in out if b > a]


def _row(name, s, e, tid, op, op_name, shapes, module, category, dtype, nbytes) -> tuple:
    return (name, COMPILED_KIND, s, e - s, e, tid, None, int(op), op_name, shapes, module, category, dtype,
            False, np.nan, nbytes, False, RESIDUAL_LINK, None, np.nan, np.nan)
