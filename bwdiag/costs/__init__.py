"""Cost model: FLOPs and bytes per op from recorded shapes and dtypes; op and kernel categories;
memcpy/memset and collective message sizes.

- ``estimate_op(name, dims, types, concrete, strides, kernel_name=None) -> Cost`` for one Kineto
  ``cpu_op`` (the innermost op that launched the kernels; the cost covers all its kernels).
- ``categorize_kernel(name)`` for kernels with no shaped op (Triton, CUDA graphs, libraries).
- ``memcpy_cost(args, name)``, ``memset_cost(args)``, ``collective_message(args)`` for
  ``gpu_memcpy`` / ``gpu_memset`` events and NCCL kernels / ``record_param_comms``.

Conventions: ``bytes`` is minimum DRAM traffic (inputs read once, outputs written once; 0-dim
inputs and Scalars count 0; an input read whole counts its distinct elements: a dimension whose
recorded ``Input Strides`` entry is 0 — an ``expand``, a broadcast view — counts once). GEMM/conv/attention FLOPs come from ``torch.utils.flop_counter``
(2 per MAC); causal attention counts half. Elementwise ops count 1 FLOP per output element,
reductions 1 per input element, data movement 0; norms/softmax/fused optimizers leave FLOPs
``None``. ``None`` always means unknown, never zero; ``Cost.note`` says why.
"""

from .categories import categorize_kernel, categorize_op
from .dtypes import bwdiag_dtype, dtype_bytes, element_type_from_kernel
from .estimate import estimate_op
from .model import Category, Cost
from .transfers import CollectiveMessage, collective_message, memcpy_cost, memcpy_kind, memset_cost

__all__ = [
    "Category", "CollectiveMessage", "Cost", "bwdiag_dtype", "categorize_kernel", "categorize_op",
    "collective_message", "dtype_bytes", "element_type_from_kernel", "estimate_op", "memcpy_cost",
    "memcpy_kind", "memset_cost",
]
