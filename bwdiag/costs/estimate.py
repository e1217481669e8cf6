"""``estimate_op``: the cost of one recorded op call, dispatched by op name to its family formula."""

from __future__ import annotations

from . import custom, flops, indexing, memory, norms, optim
from .args import OpArgs, _overloads
from .categories import CONV_OPS, GEMM_OPS, categorize_op
from .dtypes import bwdiag_dtype, element_type_from_kernel
from .model import Category, Cost, unknown
from .shapes import ShapeError

_UNARY = """abs absolute acos acosh angle asin asinh atan atanh bitwise_not ceil clamp clamp_max clamp_min
clip conj_physical cos cosh deg2rad digamma erf erfc erfinv exp exp2 expm1 fix floor frac gelu hardshrink
hardsigmoid hardswish hardtanh i0 isfinite isinf isnan isneginf isposinf leaky_relu lgamma log log10 log1p
log2 log_sigmoid_forward logical_not logit mish nan_to_num neg negative positive rad2deg reciprocal relu relu6
round rrelu rsqrt selu sgn sigmoid sign signbit silu sin sinc sinh softplus softshrink sqrt square tan tanh
threshold trunc elu celu glu prelu _prelu_kernel polygamma mvlgamma sigmoid_ relu_ gelu_ silu_ tanh_
bitwise_left_shift bitwise_right_shift erfinv_ exp_ log_ sqrt_ rsqrt_ neg_ abs_ reciprocal_ floor_ ceil_ round_
trunc_ sign_ clamp_ clamp_min_ clamp_max_ hardtanh_ leaky_relu_ elu_ hardswish_ hardsigmoid_ mish_ nan_to_num_
threshold_ logical_not_ sin_ cos_ erf_ sigmoid_ tanh_ sgn_ frac_ lerp_ fill_diagonal_""".split()
_BINARY = """add sub rsub mul div true_divide floor_divide remainder fmod pow float_power atan2 hypot copysign
maximum minimum fmax fmin eq ne lt le gt ge logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor
__and__ __or__ __xor__ __lshift__ __rshift__ xlogy special_xlog1py heaviside nextafter ldexp lerp addcmul addcdiv
where masked_fill masked_fill_ add_ sub_ mul_ div_ pow_ remainder_ fmod_ addcmul_ addcdiv_ lerp_ copysign_
maximum_ minimum_ eq_ ne_ lt_ le_ gt_ ge_ logical_and_ logical_or_ bitwise_and_ bitwise_or_ bitwise_xor_
__iand__ __ior__ __ixor__ __ilshift__ __irshift__ clamp_ clamp isclose
threshold_backward gelu_backward silu_backward tanh_backward sigmoid_backward relu_backward hardswish_backward
hardsigmoid_backward hardtanh_backward leaky_relu_backward elu_backward softplus_backward mish_backward
log_sigmoid_backward mse_loss_backward l1_loss_backward smooth_l1_loss_backward huber_loss_backward
native_dropout_backward rrelu_with_noise_backward glu_backward prelu_backward _prelu_kernel_backward
logit_backward binary_cross_entropy_backward binary_cross_entropy_with_logits_backward soft_margin_loss_backward
_masked_scale _conj_physical _neg_view sort_backward""".split()
ELEMENTWISE_OPS = frozenset("aten::" + n for n in _UNARY + _BINARY)

FILL_OPS = frozenset("aten::" + n for n in "fill_ zero_ normal_ uniform_ bernoulli_ random_ exponential_ cauchy_ log_normal_ geometric_".split())
FACTORY_OPS = frozenset("aten::" + n for n in """zeros ones full arange linspace logspace empty empty_like empty_strided
zeros_like ones_like full_like new_zeros new_ones new_full new_empty scalar_tensor""".split())
COPY_OPS = frozenset("aten::" + n for n in "copy_ _copy_from clone contiguous _to_copy to copy".split())
CONCAT_OPS = frozenset({"aten::cat", "aten::_cat", "aten::stack", "aten::concat", "aten::concatenate"})
REDUCTION_OPS = frozenset("aten::" + n for n in """sum mean prod amax amin max min aminmax argmax argmin norm
linalg_vector_norm var std var_mean std_mean all any logsumexp cumsum cumprod cummax cummin logcumsumexp
nansum nanmean count_nonzero cumsum_ mse_loss l1_loss smooth_l1_loss huber_loss""".split())
POOL_OPS = frozenset("aten::" + n for n in """max_pool2d_with_indices max_pool3d_with_indices max_pool1d
max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d _adaptive_avg_pool2d _adaptive_avg_pool3d
adaptive_avg_pool1d adaptive_avg_pool2d adaptive_max_pool2d max_pool2d_with_indices_backward
max_pool3d_with_indices_backward avg_pool2d_backward avg_pool3d_backward _adaptive_avg_pool2d_backward
_adaptive_avg_pool3d_backward adaptive_max_pool2d_backward""".split())
NORM_OPS = frozenset("aten::" + n for n in """native_layer_norm layer_norm native_layer_norm_backward _fused_rms_norm
rms_norm _fused_rms_norm_backward native_batch_norm batch_norm _batch_norm_impl_index cudnn_batch_norm
miopen_batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training _batch_norm_with_update
_batch_norm_no_update native_batch_norm_backward cudnn_batch_norm_backward miopen_batch_norm_backward
batch_norm_backward native_group_norm native_group_norm_backward instance_norm""".split())
SOFTMAX_OPS = frozenset("aten::" + n for n in """softmax _softmax log_softmax _log_softmax _softmax_backward_data
_log_softmax_backward_data _safe_softmax""".split())
EMBEDDING_OPS = frozenset("aten::" + n for n in """embedding embedding_dense_backward embedding_backward
embedding_bag _embedding_bag _embedding_bag_forward_only""".split())
INDEX_OPS = frozenset("aten::" + n for n in """index_select gather scatter scatter_ scatter_add scatter_add_
scatter_reduce scatter_reduce_ index_add index_add_ index_copy index_copy_ index_fill index_fill_
index_reduce index_reduce_""".split())
DROPOUT_OPS = frozenset({"aten::native_dropout", "aten::dropout", "aten::feature_dropout", "aten::_fused_dropout"})
SCALAR_READ_OPS = frozenset({"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero"})
# Ops that only make a new tensor header over the same storage (views, aliases, autograd detach) or
# bookkeep the caching allocator: they move no data and compute nothing, whatever their shapes.
# On CPU traces they are leaf ops with dispatch time of their own; they launch no kernel on a GPU.
_METADATA = """view _reshape_alias as_strided slice select detach detach_ t transpose permute expand expand_as
unsqueeze squeeze unsqueeze_ squeeze_ transpose_ t_ alias _unsafe_view view_as narrow unflatten
split split_with_sizes chunk unbind tensor_split movedim swapaxes swapdims diagonal unfold
record_stream set_ resolve_conj resolve_neg lift_fresh _nested_view_from_buffer as_strided_ real imag
view_as_real view_as_complex numpy_T mT mH _indices _values indices values crow_indices col_indices""".split()
METADATA_OPS = frozenset(["aten::" + n for n in _METADATA] + ["detach"])
FUSED_OPTIMIZER_OPS = frozenset("aten::" + n for n in """_fused_adam_ _fused_adamw_ _fused_adam _fused_adamw
_fused_sgd_ _fused_sgd _fused_adagrad_ _fused_adagrad""".split())

_ERRORS = (ShapeError, ValueError, TypeError, KeyError, IndexError, ZeroDivisionError, OverflowError,
           AttributeError, AssertionError, RuntimeError, RecursionError)


def estimate_op(name: str, dims: list | None, types: list | None, concrete: list | None = None,
                strides: list | None = None, kernel_name: str | None = None) -> Cost:
    """FLOPs, bytes, dtype and category of one op call from its Kineto ``cpu_op`` args.

    ``dims``/``types``/``concrete``/``strides`` are ``Input Dims`` / ``Input type`` /
    ``Concrete Inputs`` / ``Input Strides``. ``kernel_name`` (optional, any kernel the op launched)
    supplies the element type when the args do not record it (TensorList arguments of ``cat`` and
    ``_foreach_*``). Never raises: malformed or unknown input gives ``None`` estimates and a note.
    """
    category = categorize_op(name)
    if not isinstance(name, str) or not name:
        return unknown(Category.OTHER, "no op name")
    try:
        ktype, kelem = element_type_from_kernel(kernel_name)
        a = OpArgs.build(name, dims, types, concrete, strides, ktype, kelem)
        return _dispatch(a, category)
    except _ERRORS as err:
        t = types[0] if isinstance(types, list) and types else None
        return unknown(category, f"cannot estimate {name}: {err}"[:300], bwdiag_dtype(t))


def _dispatch(a: OpArgs, category: Category) -> Cost:
    n = a.name
    if n in custom.CUSTOM:
        return custom.CUSTOM[n](a)
    if n in METADATA_OPS:
        return Cost(0.0, 0.0, bwdiag_dtype(a.type(0)), Category.OTHER, False, "a view or alias: no data moved")
    if not a.dims and n not in FACTORY_OPS:
        return unknown(category, f"{n}: shapes not recorded (record_shapes=False?)")
    schemas = _overloads(n)
    if schemas and len(a.dims) > max(len(s) for s in schemas):
        return unknown(category, f"{n}: more arguments recorded than any schema of the op has",
                       bwdiag_dtype(a.type(0)))
    if n in GEMM_OPS:
        return flops.gemm(a)
    if n in CONV_OPS:
        return flops.conv(a)
    if n in flops._ATTENTION:
        return flops.attention(a)
    if category is Category.ATTENTION:
        return unknown(Category.ATTENTION, f"no cost formula for {n} (KV-cache / sequence lengths not recorded)",
                       bwdiag_dtype(a.type(0)))
    if n.startswith("aten::_foreach_"):
        return optim.foreach(a)
    if n in FUSED_OPTIMIZER_OPS:
        return optim.fused_optimizer(a)
    if n in NORM_OPS:
        return norms.norm(a)
    if n in SOFTMAX_OPS:
        return norms.softmax(a)
    if n in EMBEDDING_OPS:
        return indexing.embedding(a)
    if n in INDEX_OPS:
        return indexing.index(a)
    if n in COPY_OPS:
        return memory.copy(a)
    if n in CONCAT_OPS:
        return memory.concat(a)
    if n in FILL_OPS:
        return memory.fill(a)
    if n in FACTORY_OPS:
        return memory.factory(a)
    if n in REDUCTION_OPS:
        return memory.reduction(a)
    if n in POOL_OPS:
        return memory.pool(a)
    if n in DROPOUT_OPS:
        return _dropout(a)
    if n in SCALAR_READ_OPS:
        e = a.elem(0)
        if e is None:
            raise ShapeError("scalar type")
        return Cost(0.0, float(e), bwdiag_dtype(a.type(0)), Category.MEMCPY, False, "one element copied to host")
    if category is Category.COMMUNICATION:
        x = a.shape(0)
        if x is not None and a.elem(0) is not None and n != "record_param_comms":
            return custom.inplace_all_reduce(a)
        return unknown(Category.COMMUNICATION, "message size: use collective_message on the event args")
    if n.startswith("triton_"):
        return memory.triton_kernel_op(a, category)
    if n in ELEMENTWISE_OPS:
        return memory.elementwise(a, Category.RANDOM if "dropout" in n else Category.ELEMENTWISE)
    return unknown(category, f"no cost formula for {n}", bwdiag_dtype(a.type(0)))


def _dropout(a: OpArgs) -> Cost:
    """native_dropout(input, p, train): read input, write output and a bool mask. ``aten::dropout`` /
    ``feature_dropout`` in eval mode (``train`` False) or with ``p`` 0 return their input: no work
    (``nn.Dropout`` of an inference model, or a config's ``dropout=0.0``)."""
    x = a.shape(0)
    if x is None:
        raise ShapeError("dropout input")
    if a.name in ("aten::dropout", "aten::feature_dropout") and (a.value("train", True) is False
                                                                 or a.value("p", None) in (0, 0.0)):
        return Cost(0.0, 0.0, bwdiag_dtype(a.type(0)), Category.RANDOM, False,
                    "returns its input (eval mode or p = 0): no work")
    t = memory.Traffic()
    t.add(x, a.elem(0))
    t.add(x, a.elem(0), "output")
    if a.name in ("aten::native_dropout", "aten::_fused_dropout") and a.value("train", True) is not False:
        t.add(x, 1, "mask")
    return t.cost(float(memory.numel(x)), bwdiag_dtype(a.type(0)), Category.RANDOM, "1 FLOP per element")
