"""Layout and dtype conversions that a consistent layout / dtype would not need.

* layout: ``nchwToNhwc`` / ``nhwcToNchw`` kernels, and copies that materialise a transpose
  (a ``copy_`` under ``aten::contiguous`` / ``clone`` of a non-contiguous tensor);
* cast: dtype round trips — a tensor cast A → B and straight back B → A over the same shape.

Saving = the conversion kernels' time.
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import op_chain, op_column, tensor_sizes
from bwdiag.diagnose.model import FindingKind

_LAYOUT_KERNEL = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|NCHWToNHWC|NHWCToNCHW|convertTensor", re.I)
_MATERIALISE = ("aten::contiguous", "aten::clone", "aten::reshape")


def layout_conversions(ctx: RuleContext) -> list[RuleResult]:
    """Kernels whose only job is to change a tensor's memory layout."""
    time, acts_of, convert, transpose, modules = 0.0, defaultdict(list), 0, 0, []
    for pos, a in enumerate(ctx.analyses):
        acts, ops = a.activities, a.trace.ops
        if acts.empty:
            continue
        names = acts["name"].astype(str)
        # The name test once per distinct kernel name (names can be kilobytes of C++ templates).
        converts = names.map({n: bool(_LAYOUT_KERNEL.search(n)) for n in names.unique()}).to_numpy(bool)
        copies = (acts["category"] == "copy").to_numpy(bool) & (acts["op"].to_numpy() >= 0)
        op_of, module_of = acts["op"].to_numpy(), acts["module"].to_numpy()
        for i in np.flatnonzero(converts | copies):
            op, module = op_of[i], module_of[i]
            hit = bool(converts[i])
            if hit:
                convert += 1
            else:
                chain = op_chain(ops, int(op), 3)
                if chain[0] in _MATERIALISE:  # the op itself is the unit of work (CPU traces)
                    hit = _strided_source(ops, int(op), 0)
                elif chain[0] == "aten::copy_" and any(n in _MATERIALISE for n in chain[1:]):
                    hit = _strided_source(ops, int(op), 1)
                transpose += hit
            if hit:
                time += float(acts["dur"].iat[i])
                acts_of[pos].append(i)
                modules.append(module)
    saving = time / ctx.ranks
    if not ctx.worth_reporting(saving):
        return []
    what = []
    if convert:
        what.append(f"{convert} layout-conversion kernels (nchwToNhwc / nhwcToNchw)")
    if transpose:
        what.append(f"{transpose} copies materialising a transpose/permute (.contiguous() / .clone())")
    evidence = [f"{' and '.join(what)} take {ctx.per_step(saving)}"]
    named = list(dict.fromkeys(m for m in modules if isinstance(m, str)))
    evidence.extend(named[:3])  # module paths on their own: the report links them to the kernel table
    if len(named) > 3:
        evidence.append(f"… and {len(named) - 3} more modules")
    channels_last = ("model = model.to(memory_format=torch.channels_last)\n"
                     "x = x.to(memory_format=torch.channels_last)   # one layout end to end for the convs")
    views = ("q, k, v = (t.view(b, s, h, d).transpose(1, 2) for t in (q, k, v))   # no .contiguous()\n"
             "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
             "# matmul/SDPA take strided views: drop .contiguous() after transpose/permute")
    if convert >= transpose:
        fix = channels_last + "\n# and drop .contiguous() after transpose/permute where the next op takes views"
    else:
        fix = views
    return [ctx.finding(FindingKind.LAYOUT, "Keep one memory layout: drop the conversion copies", saving,
                        evidence, fix, acts=acts_of)]


def _strided_source(ops, op: int, arg: int) -> bool:
    """The copy's source (argument ``arg``) is not contiguous — a transpose/permute being
    materialised. Unknown strides count as strided (a contiguous()/clone() copy either way)."""
    strides = op_column(ops, "strides")[op]
    dims = op_column(ops, "dims")[op]
    if not isinstance(strides, list) or len(strides) <= arg or not isinstance(dims, list) or len(dims) <= arg:
        return True
    shape, stride = dims[arg], strides[arg]
    if not isinstance(shape, list) or not isinstance(stride, list) or len(shape) != len(stride):
        return True
    expect, ok = 1, True
    for n, s in zip(reversed(shape), reversed(stride)):
        if n != 1 and s != expect:
            ok = False
        expect *= n
    return not ok


def dtype_round_trips(ctx: RuleContext) -> list[RuleResult]:
    """A cast A→B followed on the same stream by a cast B→A of the same shape, nothing in between."""
    time, acts_of, pairs, example = 0.0, defaultdict(list), 0, None
    for pos, a in enumerate(ctx.analyses):
        acts = a.activities
        if acts.empty:
            continue
        order = np.lexsort((acts["ts"].to_numpy(float), acts["stream"].map(str).to_numpy()))
        cat, kind, name = acts["category"].to_numpy(), acts["kind"].to_numpy(), acts["name"].astype(str).to_numpy()
        stream, dur, op, dtype = (acts["stream"].map(str).to_numpy(), acts["dur"].to_numpy(float),
                                  acts["op"].to_numpy(), acts["dtype"].to_numpy())
        module = acts["module"].to_numpy()
        prev = None
        for i in order:
            if kind[i] == "cpu_op" and name[i] in ("aten::empty", "aten::empty_strided", "aten::view"):
                continue
            cur = _cast_of(a.trace.ops, int(op[i]), dtype[i]) if cat[i] == "cast" else None
            if cur and prev and prev[2] == stream[i] and prev[0] == (cur[1], cur[0]) and prev[1] == cur[2]:
                time += float(dur[prev[3]] + dur[i])
                acts_of[pos].extend([int(prev[3]), int(i)])
                pairs += 1
                example = example or ((cur[1], cur[0], cur[2]), module[i])
                prev = None
                continue
            prev = ((cur[0], cur[1]), cur[2], stream[i], i) if cur else None
    saving = time / ctx.ranks
    if not pairs or not ctx.worth_reporting(saving):
        return []
    (src, dst, numel), module = example
    evidence = [f"{pairs // ctx.ranks} round trips {src} → {dst} → {src} of the same {numel:,}-element tensor, "
                f"back to back → {ctx.per_step(saving)} of casts"]
    if isinstance(module, str):
        evidence.append(module)
    fix = ("with torch.autocast(\"cuda\", dtype=torch.bfloat16):   # one dtype inside the region\n"
           "    out = model(x)\n"
           "# and drop explicit x.float() / x.to(torch.bfloat16) pairs between layers inside it")
    return [ctx.finding(FindingKind.CAST, f"Remove {src} ↔ {dst} round trips", saving, evidence, fix, acts=acts_of)]


def _cast_of(ops, op: int, dst) -> tuple[str, str, int] | None:
    """(source dtype, destination dtype, numel) of a cast activity of op ``op`` writing ``dst``."""
    if op < 0:
        return None
    sizes = tensor_sizes(ops, op)
    types = op_column(ops, "types")[op]
    if not sizes or not isinstance(types, list):
        return None
    tensor_types = [t for t, d in zip(types, op_column(ops, "dims")[op]) if isinstance(d, list) and d]
    src = _short(tensor_types[-1]) if tensor_types else None
    if not dst or not src or src == dst:
        return None
    return src, dst, max(n for n, _ in sizes)


_NAMES = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16", "double": "fp64"}


def _short(t) -> str | None:
    return _NAMES.get(t)
