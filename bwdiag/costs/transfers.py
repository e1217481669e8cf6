"""Memcpy / memset events and collective message sizes, from Kineto event args."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .args import OpArgs
from .memory import transfer_payload
from .model import Category, Cost

_MEMCPY_KIND = re.compile(r"Memcpy\s+(\w+)", re.IGNORECASE)

# c10::ScalarType names as record_param_comms / NCCL kernels spell ``dtype``
_COMM_DTYPES: dict[str, tuple[int, str | None]] = {
    "Float": (4, "fp32"), "Double": (8, "fp64"), "Half": (2, "fp16"), "BFloat16": (2, "bf16"),
    "Long": (8, "int64"), "Int": (4, "int32"), "Short": (2, None), "Char": (1, "int8"),
    "Byte": (1, "int8"), "Bool": (1, "bool"), "Float8_e4m3fn": (1, "fp8"), "Float8_e5m2": (1, "fp8"),
    "Float8_e4m3fnuz": (1, "fp8"), "Float8_e5m2fnuz": (1, "fp8"), "ComplexFloat": (8, None),
    "ComplexDouble": (16, None), "UInt32": (4, None), "UInt64": (8, None), "UInt16": (2, None),
}


def _num(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v == float("inf"):
        return None
    return float(v)


def memcpy_kind(name: object) -> str | None:
    """``"HtoD"``, ``"DtoH"``, ``"DtoD"``, ``"PtoP"``, ``"HtoH"`` from a Kineto memcpy event name."""
    if not isinstance(name, str):
        return None
    m = _MEMCPY_KIND.search(name)
    return m.group(1) if m else None


def memcpy_cost(args: dict, name: str | None = None, launch: LaunchOp | None = None,
                share: float = 1.0) -> Cost:
    """Cost of a Kineto ``gpu_memcpy`` event: ``bytes`` = the copied bytes (``args["bytes"]``).

    Decision: ``bytes`` is the payload, as Kineto reports it and as its ``memory bandwidth (GB/s)``
    divides by, for every kind. A device-to-device copy moves twice that through HBM (read +
    write); pass ``name`` (``"Memcpy DtoD (Device -> Device)"``) and a DtoD copy counts 2x so that
    it can be placed against the HBM ceiling like any other kernel. Host transfers (HtoD, DtoH)
    are bounded by the host link, so they keep the payload.

    Where the event carries no ``bytes`` (ROCm/roctracer traces), ``launch`` — the op that
    launched it — supplies the payload (:func:`~bwdiag.costs.memory.transfer_payload`: the source
    tensor of ``aten::copy_`` and the other copy ops), times ``share`` when the op launched several
    such copies (the caller splits it by their durations).
    """
    if not isinstance(args, dict):
        args = {}
    b = _num(args.get("bytes"))
    basis = None
    if b is None:
        b, basis = _from_launch(launch, "memcpy", share)
        if b is None:
            return Cost(None, None, None, Category.MEMCPY, False, f"memcpy bytes not recorded ({basis})")
    kind = memcpy_kind(name)
    if kind == "DtoD":
        note = "device-to-device: read + write = 2x payload"
        return Cost(0.0, 2 * b, None, Category.MEMCPY, False, f"{note}; payload from {basis}" if basis else note)
    note = f"{kind} payload" if kind else "payload"
    return Cost(0.0, b, None, Category.MEMCPY, False, f"{note} from {basis}" if basis else note)


def memset_cost(args: dict, launch: LaunchOp | None = None, share: float = 1.0) -> Cost:
    """Cost of a Kineto ``gpu_memset`` event: ``bytes`` = bytes written (``args["bytes"]``).

    Without ``bytes`` (ROCm), the launching ``aten::fill_``/``aten::zero_`` gives the size of the
    tensor it fills (times ``share``, as for :func:`memcpy_cost`).
    """
    if not isinstance(args, dict):
        args = {}
    b = _num(args.get("bytes"))
    if b is not None:
        return Cost(0.0, b, None, Category.MEMSET, False, None)
    b, basis = _from_launch(launch, "memset", share)
    if b is None:
        return Cost(None, None, None, Category.MEMSET, False, f"memset bytes not recorded ({basis})")
    return Cost(0.0, b, None, Category.MEMSET, False, f"bytes from {basis}")


@dataclass(frozen=True)
class LaunchOp:
    """The recorded op that launched a memcpy/memset: name, ``Input Dims``, ``Input type`` and
    ``Concrete Inputs`` as in its Kineto ``cpu_op`` args."""

    name: str
    dims: list | None
    types: list | None
    concrete: list | None = None


def has_bytes(args: object) -> bool:
    """Whether a memcpy/memset event records its size (``args["bytes"]``, a finite number >= 0)."""
    return isinstance(args, dict) and _num(args.get("bytes")) is not None


def _from_launch(launch: LaunchOp | None, kind: str, share: float) -> tuple[float | None, str]:
    if launch is None or not isinstance(launch.name, str):
        return None, "no launching op"
    a = OpArgs.build(launch.name, launch.dims, launch.types, launch.concrete)
    b, basis = transfer_payload(a, kind)
    if b is None:
        return None, basis
    return b * share, f"launching {basis}" + (f", x{share:.3g} share" if share != 1.0 else "")


@dataclass(frozen=True)
class CollectiveMessage:
    """One collective call as record_param_comms / the NCCL kernel describe it.

    ``bytes``: the nccl-tests "size" of the operation, the larger of the input and output buffers
    (all_reduce: the buffer; all_gather: the gathered output; reduce_scatter: the full input).
    ``None`` fields are not recorded.
    """

    bytes: float | None
    dtype: str | None
    group_size: int | None
    collective: str | None
    in_bytes: float | None = None
    out_bytes: float | None = None


_COLLECTIVE_NAMES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "all_gather_into_tensor": "all_gather",
    "allgather_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall": "all_to_all", "alltoall_base": "all_to_all", "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all", "broadcast": "broadcast", "reduce": "reduce",
    "send": "send", "recv": "recv", "barrier": "barrier", "wait": "wait", "gather": "gather",
    "scatter": "scatter", "sendrecv": "sendrecv",
}


def normalize_collective(name: object) -> str | None:
    """``"_allgather_base"`` -> ``"all_gather"``; unknown names are returned lower-cased."""
    if not isinstance(name, str) or not name.strip():
        return None
    key = name.strip().lower().lstrip("_")
    return _COLLECTIVE_NAMES.get(key, key)


def collective_message(args: dict) -> CollectiveMessage:
    """Message size, dtype, group size and collective name from kernel / record_param_comms args
    (``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``Group size``, ``dtype``)."""
    if not isinstance(args, dict):
        return CollectiveMessage(None, None, None, None)
    dt = args.get("dtype")
    elem, name = _COMM_DTYPES.get(dt, (None, None)) if isinstance(dt, str) else (None, None)
    n_in, n_out = _num(args.get("In msg nelems")), _num(args.get("Out msg nelems"))
    in_b = n_in * elem if n_in is not None and elem else None
    out_b = n_out * elem if n_out is not None and elem else None
    sizes = [b for b in (in_b, out_b) if b is not None]
    g = args.get("Group size")
    group = g if isinstance(g, int) and not isinstance(g, bool) and g > 0 else None
    return CollectiveMessage(max(sizes) if sizes else None, name, group,
                             normalize_collective(args.get("Collective name")), in_b, out_b)
