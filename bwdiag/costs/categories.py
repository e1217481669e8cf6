"""Categories of ops (by aten name) and of kernels (by kernel name, when no shaped op is known)."""

from __future__ import annotations

import re
from functools import lru_cache

from .conv import CONV_OP_NAMES
from .model import Category

# Kernel-name patterns, first match wins; order matters (conv before gemm: cuDNN conv kernels are
# "implicit_gemm"; attention before gemm: fmha kernels are built from gemm tiles).
_KERNEL_RULES: list[tuple[str, Category]] = [
    (r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|alltoall|sendrecv"
     r"|cross_device_reduce|multimem|one_shot_all|two_shot_all|_c10d|gloo", Category.COMMUNICATION),
    (r"^memcpy|^memcpy[ _]|\bmemcpy|copy_page_indices|cudamemcpy|hipmemcpy", Category.MEMCPY),
    (r"^memset|\bmemset|cudamemset|_memset\b", Category.MEMSET),
    (r"reshape_and_cache|_scatter_gather|scatter_gather|index_elementwise|index_put|indexselect"
     r"|indexfunc|gather_kernel|scatter_kernel", Category.INDEX),
    (r"devicescan|devicereduce|devicesegmentedreduce", Category.REDUCTION),
    (r"flash|fmha|attention|attn|mha_|_mha|paged_?attention|unified_attention|xformers"
     r"|cutlassF|cutlassB|sdpa|decode_attn|prefill_attn", Category.ATTENTION),
    (r"convolution|igemm_(fwd|bwd|wrw)|implicit_?gemm|dgrad|wgrad|fprop|scudnn|cudnn_.*(nn|nt|tn)_v\d"
     r"|winograd|miopen.*conv|^conv|_conv|conv_|conv2d|conv3d|conv1d|naive_conv|fft2d|fft_|im2col|col2im|computeoffsetskernel"
     r"|computeboffsets|computewgrad|cutlass_cudnn|cask_cudnn|cudnn_infer|cudnn_train", Category.CONV),
    (r"(?<!fb)gemm|gemv|cutlass|nvjet|xmma|sgemm|hgemm|dgemm|ampere_|volta_|turing_|hopper_|sm\d+_"
     r"|^cijk_|cublas|hipblas|rocblas|tensile|matmul|_mm_|bmm_|mfma|wmma|dot_kernel|splitkreduce"
     r"|scal_kernel|gemmk1|ck_tile.*gemm|epilogue::|batched_gemm|_finalize_matmul", Category.GEMM),
    (r"layer_?norm|layernorm|rms_?norm|rmsnorm|batch_?norm|batchnorm|group_?norm|groupnorm"
     r"|instance_?norm|gammabeta|rowwisemoments|\bbn_|_bn_|welford|norm_kernel|ln_fwd|ln_bwd|normalization", Category.NORM),
    (r"softmax|logsumexp", Category.SOFTMAX),
    (r"multi_tensor_apply|adam|adagrad|_sgd|sgd_|\\blamb\\b|lamb_|_lion|_foreach|fused_optim|optimizer", Category.OPTIMIZER),
    (r"rotary|_rope_|^rope", Category.ELEMENTWISE),
    (r"embedding|embedding_bag|embed", Category.EMBEDDING),
    (r"index|gather|scatter|take_|put_|masked_select|nonzero|bucketize|permute_2d|permute_indices"
     r"|permute_pooled|offsets_range|recat|routing|_sum_bitmatrix|sorted_idx|unique", Category.INDEX),
    (r"sort|topk|radix|argsort|segmented_?sort|cub::|bitonic|select_k", Category.SORT),
    (r"reduce|triton_red_|triton_per_|reduction|sum_kernel|mean_kernel|max_pool|avg_pool|pool"
     r"|cumsum|scan|cumprod|argmax|argmin|norm2|l2norm|amax|histogram", Category.REDUCTION),
    (r"quant|dequant|_to_copy|convert|cast|fp8|float8|to_float|to_half|bfloat16_copy", Category.CAST),
    (r"copy|cat_?array|catarray|concat|transpose|permute|nchwtonhwc|nhwctonchw|nchw2|nhwc2|2nchw"
     r"|2nhwc|layout|to_dense|clone|contiguous|stack|split|pad|reshape|flip|roll|repeat|tile_", Category.COPY),
    (r"philox|curand|randperm|random|rand_|dropout|bernoulli|normal_|uniform|fused_dropout", Category.RANDOM),
    (r"elementwise|triton_poi_|vectorized|unrolled|pointwise|functor|fill|arange|activation|gelu"
     r"|silu|relu|sigmoid|tanh|swiglu|geglu|rotary|rope|where|clamp|mul|add|sub|div|exp|pow"
     r"|sqrt|eltwise|opwith|tensorop|bias|scale|threshold|sin|cos", Category.ELEMENTWISE),
]
_KERNEL_RES = [(re.compile(p, re.IGNORECASE), c) for p, c in _KERNEL_RULES]

# PyTorch's TensorIterator launchers: the op is in the functor (template argument), not the name.
_ELEMENTWISE_HEAD = re.compile(
    r"elementwise_kernel|vectorized_elementwise|unrolled_elementwise|elementwise_kernel_with_index"
    r"|gpu_kernel|launch_legacy_kernel|index_elementwise_kernel", re.IGNORECASE)
_INDEX_HEAD = re.compile(r"scatter|gather|index_elementwise|index_put", re.IGNORECASE)
_FUNCTOR_RULES: list[tuple[re.Pattern[str], Category]] = [
    (re.compile(r"direct_copy|copy_kernel|CopyFunctor", re.IGNORECASE), Category.COPY),
    (re.compile(r"fused_dropout|bernoulli|normal_kernel|uniform_kernel|random_", re.IGNORECASE), Category.RANDOM),
]


_FUSED_SKIP = frozenset({Category.ATTENTION, Category.CONV, Category.GEMM})


def _head(name: str) -> str:
    """The kernel's own function name: template arguments, parameters and return type dropped."""
    text = name.replace("(anonymous namespace)", "anon")
    out, depth = [], 0
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    flat = "".join(out).split("(", 1)[0].strip()
    return flat.split()[-1] if flat.split() else flat


def categorize_kernel(name: object) -> Category:
    """Category of a GPU kernel from its name alone (Triton, torch.compile, CUDA graphs, libraries).

    A fallback for kernels whose launching op is unknown or unshaped; ``Category.OTHER`` when no
    pattern matches. The kernel's own function name is matched first (so a functor or type inside
    the template arguments does not mislead), then the whole name. Kineto memcpy/memset events
    (``"Memcpy HtoD (Pinned -> Device)"``) map to MEMCPY/MEMSET.
    """
    if not isinstance(name, str) or not name:
        return Category.OTHER
    return _categorize_kernel(name)


@lru_cache(maxsize=65536)
def _categorize_kernel(name: str) -> Category:
    head = _head(name)
    if _KERNEL_RES[0][0].search(head):
        return Category.COMMUNICATION
    if _INDEX_HEAD.search(head):
        return Category.INDEX
    if _ELEMENTWISE_HEAD.search(head):
        for pattern, cat in _FUNCTOR_RULES:
            if pattern.search(name):
                return cat
        return Category.ELEMENTWISE
    # Inductor's pointwise/reduction kernels are named after the aten ops fused into them
    # (``triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_0`` only re-lays out
    # attention's output): they do no GEMM, convolution or attention work.
    pointwise = head.startswith(("triton_poi_", "triton_red_", "triton_per_"))
    for text in (head, name):
        for pattern, cat in _KERNEL_RES:
            if pointwise and cat in _FUSED_SKIP:
                continue
            if pattern.search(text):
                return cat
    return Category.OTHER


# --- op names ---------------------------------------------------------------------------------

GEMM_OPS = frozenset({
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
    "aten::_scaled_mm", "aten::addbmm", "aten::addmv", "aten::mv", "aten::dot", "aten::vdot",
    "aten::_addmm_activation", "aten::_int_mm", "aten::einsum", "aten::outer", "aten::ger",
    "aten::_scaled_grouped_mm", "aten::_grouped_mm", "aten::_weight_int4pack_mm", "aten::_weight_int8pack_mm",
})
# Every name a convolution has had, forward and backward, PyTorch 1.x and 2.x (priced in costs.conv).
CONV_OPS = CONV_OP_NAMES | frozenset({"aten::_convolution_double_backward", "aten::conv_tbc",
                                      "aten::conv_tbc_backward"})
_OP_RULES: list[tuple[str, Category]] = [
    (r"^(c10d|nccl|_c10d_functional|c10d_functional|symm_mem|gloo)::|record_param_comms|all_?reduce"
     r"|all_?gather|reduce_?scatter|all_?to_?all|all2all|broadcast_$|::send$|::recv", Category.COMMUNICATION),
    (r"attention|flash_attn|_flash_|_efficient_attention|mha|fmha|sdpa|paged_attention|varlen_attn",
     Category.ATTENTION),
    # conv op names not listed in CONV_OPS, and autograd nodes: ThnnConv2DBackward -> aten::thnn_conv2_d
    (r"convolution|(^|[:_])conv(_transpose|_depthwise|_dilated)?\d(_?d)?($|_)|::conv_tbc", Category.CONV),
    (r"^fbgemm::.*(embedding|lookup)", Category.EMBEDDING),
    (r"^fbgemm::.*quantiz", Category.CAST),
    (r"^fbgemm::.*(permute|bucketize|bounds_check|recat|offsets|sparse)", Category.INDEX),
    (r"^fbgemm::.*cumsum", Category.REDUCTION),
    (r"moe|grouped_mm|(?<!fb)gemm|matmul|::linear$|_mm$|::mm_", Category.GEMM),
    (r"rotary|rope", Category.ELEMENTWISE),
    (r"_foreach_|_fused_adam|_fused_sgd|_fused_adagrad|optim|adam|adagrad|lamb", Category.OPTIMIZER),
    (r"linalg_vector_norm|linalg_norm|aten::norm$|::frobenius_norm|::nuclear_norm", Category.REDUCTION),
    (r"norm(_backward)?$|norm_backward|_norm$|rms_norm|layer_norm|batch_norm|group_norm|instance_norm"
     r"|_batch_norm_impl|norm_fwd|norm_bwd", Category.NORM),
    (r"softmax", Category.SOFTMAX),
    (r"embedding", Category.EMBEDDING),
    (r"dropout|bernoulli|normal_|uniform_|random_|exponential_|cauchy_|log_normal_|geometric_"
     r"|rand|multinomial", Category.RANDOM),
    (r"sort|topk|kthvalue|unique|argsort|msort|median|mode$|searchsorted|bucketize", Category.SORT),
    (r"index|gather|scatter|take|masked_select|masked_scatter|nonzero|put_|_unsafe_index"
     r"|reshape_and_cache|permute_.*sparse|bucketize_sparse|embedding_bag", Category.INDEX),
    (r"_local_scalar_dense|::item$|::is_nonzero$|_copy_from|::pin_memory|_to_cpu", Category.MEMCPY),
    (r"quant|::_to_copy$|::to$|::type_as$", Category.CAST),
    (r"copy|::cat$|::stack$|::clone$|::contiguous$|::_cat$|::hstack|::vstack|::pad|constant_pad"
     r"|reflection_pad|replication_pad|::flip$|::roll$|::repeat|::tile$|::narrow_copy|::unfold"
     r"|::_reshape_copy|::im2col|::col2im|pixel_shuffle|channel_shuffle|::tril$|::triu$", Category.COPY),
    (r"::sum|::mean$|::mean\.|::prod$|::amax$|::amin$|::max$|::min$|::aminmax|::argmax|::argmin"
     r"|::norm$|linalg_vector_norm|::var|::std|::all$|::any$|logsumexp|::cumsum|::cumprod|::cummax"
     r"|::cummin|::logcumsumexp|::count_nonzero|pool|::nansum|::nanmean|::_weight_norm"
     r"|mse_loss$|nll_loss|cross_entropy|binary_cross_entropy$|::l1_loss$|::smooth_l1_loss$"
     r"|::dist$|::trace$|::histc|::bincount|::max\.", Category.REDUCTION),
    (r"::fill_$|::zero_$|::zeros|::ones|::full|::empty|::new_zeros|::new_ones|::new_full"
     r"|::arange|::linspace|::logspace|::eye$|::scalar_tensor", Category.ELEMENTWISE),
    (r"^aten::|^triton_poi|rotary", Category.ELEMENTWISE),
]
_OP_RES = [(re.compile(p, re.IGNORECASE), c) for p, c in _OP_RULES]


_AUTOGRAD_PREFIX = "autograd::engine::evaluate_function: "
_BACKWARD_NODE = re.compile(r"^([A-Z][A-Za-z0-9]*?)Backward\d*$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _autograd_to_aten(name: str) -> str:
    """``"autograd::engine::evaluate_function: AddmmBackward0"`` -> ``"aten::addmm"`` (the forward op
    whose backward the node runs); other names unchanged."""
    if name.startswith(_AUTOGRAD_PREFIX):
        name = name[len(_AUTOGRAD_PREFIX):]
    m = _BACKWARD_NODE.match(name)
    if m:
        return "aten::" + _CAMEL.sub("_", m.group(1)).lower()
    return name


def categorize_op(name: object) -> Category:
    """Category of an op from its name (``"aten::addmm"`` -> GEMM). Unknown names -> OTHER.

    Remaining ``aten::`` names default to ELEMENTWISE: most aten ops that launch kernels and are
    not matched above are pointwise. The cost formulas decide whether a copy is a CAST.
    """
    if not isinstance(name, str) or not name:
        return Category.OTHER
    return _categorize_op(name)


@lru_cache(maxsize=65536)
def _categorize_op(name: str) -> Category:
    name = _autograd_to_aten(name)
    if name in GEMM_OPS:
        return Category.GEMM
    if name in CONV_OPS:
        return Category.CONV
    for pattern, cat in _OP_RES:
        if pattern.search(name):
            return cat
    if name.startswith("triton_red_") or name.startswith("triton_per_"):
        return Category.REDUCTION
    kc = categorize_kernel(name)
    return kc
