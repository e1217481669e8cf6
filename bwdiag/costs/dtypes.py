"""Element types: Kineto ``Input type`` strings, ScalarType codes and bwdiag dtype names.

bwdiag names the dtypes that have their own roofline ceiling: ``fp64 fp32 tf32 bf16 fp16 fp8 int8
int32 int64 bool``. Types without such a ceiling (``short int``, complex, fp4) still have a byte
size, so they count for memory traffic, but :func:`bwdiag_dtype` returns ``None`` for them.
"""

from __future__ import annotations

import re

# Kineto ``Input type`` string -> (element bytes, bwdiag dtype name or None)
_TYPES: dict[str, tuple[int, str | None]] = {
    "double": (8, "fp64"),
    "float": (4, "fp32"),
    "c10::Half": (2, "fp16"),
    "c10::BFloat16": (2, "bf16"),
    "c10::Float8_e4m3fn": (1, "fp8"),
    "c10::Float8_e5m2": (1, "fp8"),
    "c10::Float8_e4m3fnuz": (1, "fp8"),
    "c10::Float8_e5m2fnuz": (1, "fp8"),
    "c10::Float8_e8m0fnu": (1, "fp8"),
    "c10::Float4_e2m1fn_x2": (1, None),  # two fp4 values packed in one byte
    "long int": (8, "int64"),
    "long": (8, "int64"),  # older Kineto spelling
    "int64_t": (8, "int64"),
    "unsigned long": (8, None),
    "int": (4, "int32"),
    "unsigned int": (4, None),
    "short int": (2, None),
    "short": (2, None),
    "unsigned short": (2, None),
    "signed char": (1, "int8"),
    "unsigned char": (1, "int8"),
    "c10::qint8": (1, "int8"),
    "c10::quint8": (1, "int8"),
    "c10::quint4x2": (1, None),
    "c10::qint32": (4, "int32"),
    "bool": (1, "bool"),
    "c10::complex<c10::Half>": (4, None),
    "c10::complex<float>": (8, None),
    "c10::complex<double>": (16, None),
}

#: c10::ScalarType codes as they appear in ``Concrete Inputs`` for ``dtype=`` arguments.
SCALAR_TYPE_CODES: dict[int, str] = {
    0: "unsigned char",
    1: "signed char",
    2: "short int",
    3: "int",
    4: "long int",
    5: "c10::Half",
    6: "float",
    7: "double",
    8: "c10::complex<c10::Half>",
    9: "c10::complex<float>",
    10: "c10::complex<double>",
    11: "bool",
    12: "c10::qint8",
    13: "c10::quint8",
    14: "c10::qint32",
    15: "c10::BFloat16",
    23: "c10::Float8_e5m2",
    24: "c10::Float8_e4m3fn",
    25: "c10::Float8_e5m2fnuz",
    26: "c10::Float8_e4m3fnuz",
}

_BWDIAG_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1,
                 "int8": 1, "int32": 4, "int64": 8, "bool": 1}
_BWDIAG_TO_TYPE = {"fp64": "double", "fp32": "float", "tf32": "float", "bf16": "c10::BFloat16",
                   "fp16": "c10::Half", "fp8": "c10::Float8_e4m3fn", "int8": "signed char",
                   "int32": "int", "int64": "long int", "bool": "bool"}

#: Types that are not tensors of one element type (their ``Input Dims`` entry is not a shape).
NON_TENSOR_TYPES = frozenset({"", "Scalar", "ScalarList", "TensorList", "GenericList", "Device",
                              "Layout", "ScalarType", "MemoryFormat", "None", "String"})

_FLOAT_RANK = {"fp64": 3, "fp32": 2, "bf16": 1, "fp16": 1, "fp8": 0}


def _lookup(type_str: object) -> tuple[int, str | None] | None:
    if not isinstance(type_str, str):
        return None
    t = type_str.strip()
    if t in _TYPES:
        return _TYPES[t]
    if t in _BWDIAG_BYTES:  # already a bwdiag name
        return _BWDIAG_BYTES[t], t
    return None


def dtype_bytes(type_str: object) -> int | None:
    """Bytes per element of a Kineto ``Input type`` string (``"c10::BFloat16"`` -> 2).

    Also accepts bwdiag dtype names (``"bf16"``). ``None`` for non-tensor or unknown types.
    """
    hit = _lookup(type_str)
    return hit[0] if hit else None


def bwdiag_dtype(type_str: object) -> str | None:
    """The bwdiag dtype name of a Kineto ``Input type`` string (``"c10::Half"`` -> ``"fp16"``).

    ``None`` for non-tensor types and for types with no ceiling of their own (int16, complex).
    """
    hit = _lookup(type_str)
    return hit[1] if hit else None


def is_tensor_type(type_str: object) -> bool:
    """True when an ``Input type`` entry names a tensor element type we know the size of."""
    return dtype_bytes(type_str) is not None


def type_from_code(code: object) -> str | None:
    """Kineto type string for a ScalarType code from ``Concrete Inputs`` (``6`` -> ``"float"``)."""
    if isinstance(code, bool) or not isinstance(code, int):
        return None
    return SCALAR_TYPE_CODES.get(code)


def type_from_bwdiag(name: str | None) -> str | None:
    """Kineto type string for a bwdiag dtype name (``"bf16"`` -> ``"c10::BFloat16"``)."""
    return _BWDIAG_TO_TYPE.get(name) if name else None


def _kind(type_str: str) -> int:
    """Type-promotion category: 0 bool, 1 integer, 2 floating, 3 complex."""
    if type_str == "bool":
        return 0
    if "complex" in type_str:
        return 3
    name = bwdiag_dtype(type_str)
    if name in _FLOAT_RANK or type_str.startswith("c10::Float"):
        return 2
    return 1


def promote(dimensioned: list[str], zero_dim: list[str]) -> str | None:
    """Result type of an elementwise op, after torch's promotion rules (approximately).

    ``dimensioned``: types of inputs with at least one dimension; ``zero_dim``: types of 0-dim
    tensors and Python scalars. A 0-dim operand only matters when it is of a higher category
    (bool < integer < floating); it is then taken as a wrapped Python number (default fp32).
    """
    import torch  # local: keep module import cheap

    types = [t for t in dimensioned if is_tensor_type(t)] or [t for t in zero_dim if is_tensor_type(t)]
    if not types:
        return None
    try:
        result = _to_torch(types[0])
        for t in types[1:]:
            result = torch.promote_types(result, _to_torch(t))
    except (KeyError, TypeError, RuntimeError):
        return None
    out = _from_torch(result)
    if dimensioned and out is not None:
        top = max((_kind(t) for t in zero_dim if is_tensor_type(t)), default=-1)
        if top > _kind(out) and top == 2:
            return "float"
    return out


def _to_torch(type_str: str):
    import torch

    table = {
        "double": torch.float64, "float": torch.float32, "c10::Half": torch.float16,
        "c10::BFloat16": torch.bfloat16, "long int": torch.int64, "long": torch.int64,
        "int": torch.int32, "short int": torch.int16, "short": torch.int16,
        "signed char": torch.int8, "unsigned char": torch.uint8, "bool": torch.bool,
        "c10::Float8_e4m3fn": torch.float8_e4m3fn, "c10::Float8_e5m2": torch.float8_e5m2,
        "c10::complex<float>": torch.complex64, "c10::complex<double>": torch.complex128,
    }
    return table[type_str]


def _from_torch(dt) -> str | None:
    import torch

    table = {
        torch.float64: "double", torch.float32: "float", torch.float16: "c10::Half",
        torch.bfloat16: "c10::BFloat16", torch.int64: "long int", torch.int32: "int",
        torch.int16: "short int", torch.int8: "signed char", torch.uint8: "unsigned char",
        torch.bool: "bool", torch.float8_e4m3fn: "c10::Float8_e4m3fn",
        torch.float8_e5m2: "c10::Float8_e5m2", torch.complex64: "c10::complex<float>",
        torch.complex128: "c10::complex<double>",
    }
    return table.get(dt)


_KERNEL_TYPE_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"c10::BFloat16|__nv_bfloat16|cutlass::bfloat16_t|\bbf16\b|_bf16|bfloat16"), "c10::BFloat16"),
    (re.compile(r"c10::Half|cutlass::half_t|\b__half\b|\bfp16\b|_f16_|_fp16|_f16\b"), "c10::Half"),
    (re.compile(r"Float8_e4m3fn|__nv_fp8_e4m3|float_e4m3|\bfp8\b|_e4m3"), "c10::Float8_e4m3fn"),
    (re.compile(r"Float8_e5m2|__nv_fp8_e5m2|float_e5m2|_e5m2"), "c10::Float8_e5m2"),
    (re.compile(r"<float[,>]|\(float\)|<float, |\bfloat32\b|_f32\b|_f32_|\bfloat\b"), "float"),
    (re.compile(r"<double[,>]|\bdouble\b|_f64\b"), "double"),
]
_OPAQUE = re.compile(r"OpaqueType<(\d+)u?>")
_OPAQUE_TYPES = {1: "unsigned char", 2: "c10::Half", 4: "float", 8: "double"}


def element_type_from_kernel(kernel_name: object) -> tuple[str | None, int | None]:
    """Guess the element type a kernel works on from its (demangled) name.

    Returns ``(type string or None, bytes per element or None)``. ``OpaqueType<N>`` (cat, copy
    kernels) gives only the size. Used when an op's args do not say (TensorList arguments).
    """
    if not isinstance(kernel_name, str) or not kernel_name:
        return None, None
    m = _OPAQUE.search(kernel_name)
    if m:
        size = int(m.group(1))
        return None, size if size in _OPAQUE_TYPES else None
    for pattern, type_str in _KERNEL_TYPE_PATTERNS:
        if pattern.search(kernel_name):
            return type_str, dtype_bytes(type_str)
    return None, None
