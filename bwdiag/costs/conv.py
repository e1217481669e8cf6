"""Convolution costs under every op name PyTorch has used for them, forward and backward.

PyTorch 2.x records ``convolution`` -> ``_convolution`` -> a backend op (``cudnn_convolution``,
``miopen_convolution``, ``mkldnn_convolution``, ``_slow_conv2d_forward``, ``slow_conv3d_forward``,
``slow_conv_dilated2d``, ``_conv_depthwise2d`` ...) and one ``convolution_backward``. PyTorch 1.x
had a backward op per backend (``cudnn_convolution_backward`` calling ``..._backward_input`` and
``..._backward_weight``, ``miopen_*``, ``mkldnn_convolution_backward_weights``,
``thnn_conv2d_backward`` ...) that today's torch no longer knows: their argument lists are restated
in ``_LEGACY_ARGS`` (PyTorch 1.x ``native_functions.yaml``) so that a 1.x trace is read by position.

One rule prices the whole family. With the weight ``w = [K, C/g, *k]`` (transposed convolution:
``[C_in, C_out/g, *k]``), call *wide* the activation whose channels are ``w[0]``: the output of a
normal convolution (its grad_output in backward), the input of a transposed one. Then

    forward FLOPs = dgrad FLOPs = wgrad FLOPs = 2 * numel(wide) * prod(w[1:])

and the bias gradient adds each grad_output element once (numel(grad_output) FLOPs). Backward needs
no stride, padding or dilation: grad_output and weight are recorded (these only check consistency
when ``Concrete Inputs`` has them). A normal forward convolution needs them to size its output,
which the trace does not record; ``bwdiag.costs.conv_context`` finds that shape elsewhere.
(``torch.utils.flop_counter`` counts grouped wgrad ``groups`` times over; the rule above does not.)

Bytes: the forward reads x, w (and bias) and writes y. cuDNN and MIOpen run dgrad, wgrad and the bias
reduction as separate kernels, so each reads grad_output: dgrad reads g and w and writes grad_input;
wgrad reads g and x and writes grad_weight; the bias reduction reads g and writes C_out values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .args import OpArgs
from .concrete import parse_concrete
from .dtypes import bwdiag_dtype
from .model import Category, Cost, unknown
from .shapes import Shape, ShapeError, as_shape, conv_output_shape, numel


@dataclass(frozen=True)
class ConvSpec:
    """What a conv op computes: ``forward``, ``backward`` (by ``output_mask``), ``dgrad``, ``wgrad``
    or ``bias``; ``transposed`` None means "read the ``transposed`` argument"; ``depthwise`` ops have
    groups = input channels and no groups argument."""

    kind: str
    transposed: bool | None = False
    depthwise: bool = False
    mask_default: tuple[bool, ...] | None = None  # what a backward op computes when no mask is recorded


_F, _B = "forward", "backward"

CONV_SPECS: dict[str, ConvSpec] = {
    # forward, op names of PyTorch 1.x and 2.x
    **{f"aten::{n}": ConvSpec(_F, None) for n in (
        "convolution", "_convolution", "convolution_overrideable", "_convolution_mode")},
    **{f"aten::{n}": ConvSpec(_F) for n in (
        "conv1d", "conv2d", "conv3d", "cudnn_convolution", "cudnn_convolution_relu",
        "cudnn_convolution_add_relu", "miopen_convolution", "miopen_convolution_relu",
        "miopen_convolution_add_relu", "miopen_depthwise_convolution", "mkldnn_convolution",
        "thnn_conv2d", "thnn_conv2d_forward", "_slow_conv2d_forward", "slow_conv3d",
        "slow_conv3d_forward", "slow_conv_dilated2d", "slow_conv_dilated3d",
        "_nnpack_spatial_convolution")},
    **{f"aten::{n}": ConvSpec(_F, True) for n in (
        "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "cudnn_convolution_transpose",
        "miopen_convolution_transpose", "slow_conv_transpose2d", "slow_conv_transpose3d")},
    **{f"aten::{n}": ConvSpec(_F, False, True) for n in (
        "_conv_depthwise2d", "conv_depthwise3d", "thnn_conv_depthwise2d", "thnn_conv_depthwise2d_forward")},
    # backward with an output mask (which of grad_input, grad_weight[, grad_bias] it computes)
    "aten::convolution_backward": ConvSpec(_B, None),
    "aten::convolution_backward_overrideable": ConvSpec(_B, None),
    **{f"aten::{n}": ConvSpec(_B) for n in (
        "cudnn_convolution_backward", "miopen_convolution_backward", "miopen_depthwise_convolution_backward",
        "mkldnn_convolution_backward", "_slow_conv2d_backward", "thnn_conv2d_backward",
        "slow_conv3d_backward", "slow_conv_dilated2d_backward", "slow_conv_dilated3d_backward")},
    **{f"aten::{n}": ConvSpec(_B, True) for n in (
        "cudnn_convolution_transpose_backward", "miopen_convolution_transpose_backward",
        "slow_conv_transpose2d_backward", "slow_conv_transpose3d_backward")},
    **{f"aten::{n}": ConvSpec(_B, False, True) for n in (
        "_conv_depthwise2d_backward", "thnn_conv_depthwise2d_backward", "conv_depthwise3d_backward")},
    # one gradient each (PyTorch 1.x)
    **{f"aten::{n}_backward_input": ConvSpec("dgrad") for n in (
        "cudnn_convolution", "miopen_convolution", "miopen_depthwise_convolution", "mkldnn_convolution")},
    **{f"aten::{n}_backward_input": ConvSpec("dgrad", True) for n in (
        "cudnn_convolution_transpose", "miopen_convolution_transpose")},
    **{f"aten::{n}": ConvSpec("wgrad") for n in (
        "cudnn_convolution_backward_weight", "miopen_convolution_backward_weight",
        "miopen_depthwise_convolution_backward_weight", "mkldnn_convolution_backward_weights")},
    **{f"aten::{n}_backward_weight": ConvSpec("wgrad", True) for n in (
        "cudnn_convolution_transpose", "miopen_convolution_transpose")},
    "aten::cudnn_convolution_backward_bias": ConvSpec("bias"),
    "aten::miopen_convolution_backward_bias": ConvSpec("bias"),
}

_CUDNN = ("padding", "stride", "dilation", "groups", "benchmark", "deterministic")
_MKL = ("padding", "stride", "dilation", "groups")
_THNN_BWD = ("grad_output", "self", "weight", "kernel_size", "stride", "padding")

# Argument names of ops that PyTorch 2.x dropped, by position, per recorded argument count (PyTorch
# 1.8 added ``allow_tf32`` to the cuDNN ops). Ops today's torch knows are read through its schemas.
_LEGACY_ARGS: dict[str, tuple[tuple[str, ...], ...]] = {
    "aten::cudnn_convolution_backward": (
        ("self", "grad_output", "weight", *_CUDNN, "allow_tf32", "output_mask"),
        ("self", "grad_output", "weight", *_CUDNN, "output_mask")),
    "aten::cudnn_convolution_backward_input": (
        ("self_size", "grad_output", "weight", *_CUDNN, "allow_tf32"), ("self_size", "grad_output", "weight", *_CUDNN)),
    "aten::cudnn_convolution_backward_weight": (
        ("weight_size", "grad_output", "self", *_CUDNN, "allow_tf32"), ("weight_size", "grad_output", "self", *_CUDNN)),
    "aten::cudnn_convolution_transpose_backward": (
        ("self", "grad_output", "weight", "padding", "output_padding", *_CUDNN[1:], "allow_tf32", "output_mask"),
        ("self", "grad_output", "weight", "padding", "output_padding", *_CUDNN[1:], "output_mask")),
    "aten::cudnn_convolution_transpose_backward_input": (
        ("grad_output", "weight", *_CUDNN, "allow_tf32"), ("grad_output", "weight", *_CUDNN)),
    "aten::cudnn_convolution_transpose_backward_weight": (
        ("weight_size", "grad_output", "self", *_CUDNN, "allow_tf32"), ("weight_size", "grad_output", "self", *_CUDNN)),
    "aten::cudnn_convolution_backward_bias": (("grad_output",),),
    "aten::miopen_convolution_backward": (("self", "grad_output", "weight", *_CUDNN, "output_mask"),),
    "aten::miopen_convolution_backward_input": (("self_size", "grad_output", "weight", *_CUDNN),),
    "aten::miopen_convolution_backward_weight": (("weight_size", "grad_output", "self", *_CUDNN),),
    "aten::miopen_convolution_backward_bias": (("grad_output",),),
    "aten::miopen_convolution_transpose_backward": (
        ("self", "grad_output", "weight", "padding", "output_padding", *_CUDNN[1:], "output_mask"),),
    "aten::miopen_convolution_transpose_backward_input": (("grad_output", "weight", *_CUDNN),),
    "aten::miopen_convolution_transpose_backward_weight": (("weight_size", "grad_output", "self", *_CUDNN),),
    "aten::miopen_depthwise_convolution_backward": (("self", "grad_output", "weight", *_CUDNN, "output_mask"),),
    "aten::miopen_depthwise_convolution_backward_input": (("self_size", "grad_output", "weight", *_CUDNN),),
    "aten::miopen_depthwise_convolution_backward_weight": (("weight_size", "grad_output", "self", *_CUDNN),),
    "aten::mkldnn_convolution_backward": (("self", "grad_output", "weight", *_MKL, "output_mask"),),
    "aten::mkldnn_convolution_backward_input": (("self_size", "grad_output", "weight", *_MKL, "bias_defined"),),
    "aten::mkldnn_convolution_backward_weights": (("weight_size", "grad_output", "self", *_MKL, "bias_defined"),),
    "aten::thnn_conv2d_forward": (("self", "weight", "kernel_size", "bias", "stride", "padding"),),
    "aten::thnn_conv2d_backward": ((*_THNN_BWD, "finput", "fgrad_input", "output_mask"),),
    "aten::slow_conv3d_backward": ((*_THNN_BWD, "finput", "fgrad_input", "output_mask"),),
    "aten::thnn_conv_depthwise2d": (("self", "weight", "kernel_size", "bias", "stride", "padding", "dilation"),),
    "aten::thnn_conv_depthwise2d_forward": (("self", "weight", "kernel_size", "bias", "stride", "padding", "dilation"),),
    "aten::thnn_conv_depthwise2d_backward": ((*_THNN_BWD, "dilation", "output_mask"),),
    "aten::_conv_depthwise2d_backward": ((*_THNN_BWD, "dilation", "output_mask"),),
    "aten::conv_depthwise3d_backward": ((*_THNN_BWD, "dilation", "output_mask"),),
    "aten::slow_conv_dilated2d_backward": ((*_THNN_BWD, "dilation", "output_mask"),),
    "aten::slow_conv_dilated3d_backward": ((*_THNN_BWD, "dilation", "output_mask"),),
    "aten::slow_conv_transpose2d_backward": (
        (*_THNN_BWD, "output_padding", "dilation", "columns", "ones", "output_mask"),),
    "aten::slow_conv_transpose3d_backward": (
        (*_THNN_BWD, "output_padding", "dilation", "finput", "fgrad_input", "output_mask"),),
}

CONV_OP_NAMES = frozenset(CONV_SPECS)


class _Args:
    """Argument lookup by name: the installed torch's schema, else the PyTorch 1.x positions."""

    def __init__(self, a: OpArgs) -> None:
        self.a = a
        self.legacy: tuple[str, ...] | None = None
        if a.names() is None and a.name in _LEGACY_ARGS:
            fits = [t for t in _LEGACY_ARGS[a.name] if len(t) == len(a)]
            longer = [t for t in _LEGACY_ARGS[a.name] if len(t) >= len(a)]
            self.legacy = (fits or longer or [None])[0]

    def index(self, *names: str) -> int | None:
        for name in names:
            i = self.a.index(name)
            if i is None and self.legacy is not None and name in self.legacy:
                i = self.legacy.index(name)
            if i is not None and i < len(self.a):
                return i
        return None

    def shape(self, *names: str) -> Shape | None:
        return self.a.shape(self.index(*names))

    def elem(self, *names: str) -> int | None:
        return self.a.elem(self.index(*names))

    def type(self, *names: str) -> str:
        return self.a.type(self.index(*names))

    def value(self, name: str, default: object = None) -> object:
        i = self.index(name)
        if i is None or i >= len(self.a.concrete):
            return default
        v = parse_concrete(self.a.concrete[i])
        return default if v is None else v

    def recorded(self, name: str) -> bool:
        """True when ``Concrete Inputs`` holds a value for argument ``name``."""
        i = self.index(name)
        return i is not None and i < len(self.a.concrete) and parse_concrete(self.a.concrete[i]) is not None

    def size_list(self, name: str) -> Shape | None:
        """An ``int[]`` size argument (``weight_size``, ``self_size``), when recorded."""
        v = self.value(name)
        return as_shape(v) if isinstance(v, list) and v else None


def _int_param(v: object, default: int) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else default


def _groups(spec: ConvSpec, r: _Args, x: Shape | None) -> int | None:
    """Groups: the input channels of a depthwise op, 1 for ops without the argument, else as recorded."""
    if spec.depthwise:
        return x[1] if x else None
    if r.index("groups") is None:
        return 1
    return _int_param(r.value("groups"), 1) if r.recorded("groups") else None


def _transposed(spec: ConvSpec, r: _Args) -> bool | None:
    if spec.transposed is not None:
        return spec.transposed
    v = r.value("transposed")
    return v if isinstance(v, bool) else None


def wide_flops(wide: Shape, w: Shape) -> float:
    """2 * numel(wide) * prod(w[1:]): one multiply-add per weight element per wide activation element."""
    return 2.0 * numel(wide) * math.prod(w[1:])


def _check_channels(x: Shape | None, w: Shape, g: Shape | None, transposed: bool, groups: int | None) -> None:
    """Channel counts of input, weight and grad_output must fit (groups unknown: any divisor)."""
    if len(w) < 3:
        raise ShapeError(f"conv weight {w} has no spatial dims")
    for t in (x, g):
        if t is not None and len(t) != len(w):
            raise ShapeError(f"conv activation {t} and weight {w} ranks do not fit")
    if x is not None and g is not None and x[0] != g[0]:
        raise ShapeError(f"conv batch: input {x} grad_output {g}")
    wide, narrow = (x, g) if transposed else (g, x)
    if wide is not None and wide[1] != w[0]:
        raise ShapeError(f"conv channels: {wide} against weight {w} (transposed={transposed})")
    if narrow is not None:
        if w[1] <= 0 or narrow[1] % w[1] or (groups is not None and narrow[1] != w[1] * groups):
            raise ShapeError(f"conv channels: {narrow} against weight {w}, groups {groups}")


# --- forward ------------------------------------------------------------------------------------

def forward(a: OpArgs, spec: ConvSpec, out: Shape | None = None) -> Cost:
    """A forward convolution; ``out`` is its output shape when known from elsewhere in the trace."""
    r = _Args(a)
    x, w = r.shape("input", "self"), r.shape("weight")
    if not x or not w:
        raise ShapeError("conv shapes")
    e_x, e_w = r.elem("input", "self"), r.elem("weight")
    if e_x is None or e_w is None:
        raise ShapeError("conv element types")
    dtype = bwdiag_dtype(r.type("input", "self"))
    transposed = _transposed(spec, r)
    if transposed is None:
        return unknown(Category.CONV, "conv transposed flag not recorded (no Concrete Inputs)", dtype)
    groups = _groups(spec, r, x)
    if out is None:
        if not r.recorded("stride") and not r.recorded("padding"):
            return unknown(Category.CONV, "conv stride/padding not recorded (no Concrete Inputs)", dtype)
        out = conv_output_shape(x, w, r.value("stride", 1), r.value("padding", 0), r.value("dilation", 1),
                                transposed, r.value("output_padding", 0), groups or 1)
    _check_channels(x, w, out, transposed, groups)
    bias = r.index("bias")
    total = numel(x) * e_x + numel(w) * e_w + numel(out) * e_x
    if a.shape(bias) is not None and a.elem(bias) is not None:
        total += numel(a.shape(bias)) * a.elem(bias)
    flops = wide_flops(x if transposed else out, w)
    return Cost(flops, float(total), dtype, Category.CONV, True, None)


# --- backward -----------------------------------------------------------------------------------

def _mask(spec: ConvSpec, r: _Args) -> tuple[bool, bool, bool] | None:
    if spec.kind == "dgrad":
        return (True, False, False)
    if spec.kind == "wgrad":
        return (False, True, False)
    if spec.kind == "bias":
        return (False, False, True)
    m = r.value("output_mask")
    if isinstance(m, list) and 2 <= len(m) <= 3 and all(isinstance(v, bool) for v in m):
        return (m[0], m[1], len(m) == 3 and m[2])
    return None


def backward(a: OpArgs, spec: ConvSpec, x: Shape | None = None, w: Shape | None = None) -> Cost:
    """A convolution backward op: gradients by ``output_mask`` (or the op's one gradient).

    ``x`` / ``w`` are the input and weight shapes when known from the enclosing backward op
    (PyTorch 1.x ``..._backward_weight`` records ``weight_size`` as a list that only ``Concrete
    Inputs`` holds).
    """
    r = _Args(a)
    g = r.shape("grad_output")
    e_g = r.elem("grad_output")
    dtype = bwdiag_dtype(r.type("grad_output"))
    if g is None or e_g is None:
        raise ShapeError("conv backward grad_output")
    mask = _mask(spec, r)
    if mask is None:
        return unknown(Category.CONV, f"{a.name}: output_mask not recorded (no Concrete Inputs)", dtype)
    if spec.kind == "bias":
        return Cost(float(numel(g)), float(numel(g) * e_g + g[1] * e_g), dtype, Category.REDUCTION, False,
                    "bias gradient: grad_output summed per channel")
    x = r.shape("input", "self") or x or r.size_list("self_size")
    w = r.shape("weight") or w or r.size_list("weight_size")
    e_x = r.elem("input", "self") or e_g  # a grad_input / grad_weight is written in the grad's dtype
    e_w = r.elem("weight") or e_g
    transposed = _transposed(spec, r)
    if transposed is None:
        return unknown(Category.CONV, f"{a.name}: transposed flag not recorded", dtype)
    if w is None:
        return unknown(Category.CONV, f"{a.name}: weight shape not recorded", dtype)
    groups = _groups(spec, r, x)
    _check_channels(x, w, g, transposed, groups)
    if x is not None and r.recorded("stride") and groups is not None:
        expect = conv_output_shape(x, w, r.value("stride", 1), r.value("padding", 0), r.value("dilation", 1),
                                   transposed, r.value("output_padding", 0), groups)
        if expect != g:
            raise ShapeError(f"grad_output {g} does not match conv output {expect}")
    wide = x if transposed else g
    if wide is None:
        return unknown(Category.CONV, f"{a.name}: input shape not recorded (transposed dgrad)", dtype)
    flops = 0.0
    total: float | None = 0.0
    note = None
    if mask[0]:  # dgrad: read g and w, write grad_input
        flops += wide_flops(wide, w)
        if x is None:
            total, note = None, "grad_input shape not recorded: bytes unknown"
        else:
            total += numel(g) * e_g + numel(w) * e_w + numel(x) * e_x
    if mask[1]:  # wgrad: read g and x, write grad_weight
        if x is None:
            return unknown(Category.CONV, f"{a.name}: input shape not recorded", dtype)
        flops += wide_flops(wide, w)
        if total is not None:
            total += numel(g) * e_g + numel(x) * e_x + numel(w) * e_w
    if mask[2]:  # bias: sum grad_output per channel
        flops += numel(g)
        if total is not None:
            total += numel(g) * e_g + g[1] * e_g
    return Cost(flops, total, dtype, Category.CONV, True, note)


def conv_cost(a: OpArgs) -> Cost:
    """The cost of one recorded convolution op, whatever its name (see ``CONV_SPECS``)."""
    spec = CONV_SPECS.get(a.name)
    if spec is None:
        return unknown(Category.CONV, f"no cost formula for {a.name}", bwdiag_dtype(a.type(0)))
    if spec.kind == _F:
        return forward(a, spec)
    return backward(a, spec)
