"""Cost model: FLOPs and bytes per op from recorded shapes and dtypes; op and kernel categories;
memcpy/memset and collective message sizes.

``None`` always means unknown, never zero; ``Cost.note`` says why.
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
