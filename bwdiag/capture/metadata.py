"""Who captured the trace: rank and world size, device, versions, command line and schedule.

The result goes into each trace as the top-level key ``"bwdiag"`` through
``torch.profiler.profile.add_metadata_json`` just before the trace is finished, so the exported
Kineto JSON carries it with no post-processing. Environment variables are never written.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from typing import Any

from bwdiag._version import __version__
from bwdiag.hardware.calibrate import CACHE_SCHEMA, cache_path, device_identity
from bwdiag.hardware.host import cpu_name, host_record

#: How module forwards are marked in the trace (see bwdiag.capture.annotate).
MODULE_ANNOTATIONS = (
    "user_annotation 'nn.Module: <name>' per module forward; "
    "the names of nested spans joined with dots give the module path"
)


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size: torch.distributed when initialised, else the
    ``RANK``/``WORLD_SIZE`` variables torchrun sets, else a single process (0, 1)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def device_description() -> dict[str, Any]:
    """The accelerator in use (CUDA or ROCm) or the CPU, without initialising CUDA if unused."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        return {
            "kind": "rocm" if getattr(torch.version, "hip", None) else "cuda",
            "name": props.name,
            "index": index,
            "count": torch.cuda.device_count(),
            "memory_bytes": int(props.total_memory),
            "multiprocessors": int(props.multi_processor_count),
        }
    return {"kind": "cpu", "name": cpu_name(), "cores": os.cpu_count()}


def calibrated_ceilings(device: dict[str, Any]) -> dict[str, Any] | None:
    """Ceilings ``bwdiag calibrate`` measured on this device and cached (``~/.cache/bwdiag``, or
    ``$XDG_CACHE_HOME/bwdiag``), as stored there: ``{"file", "created", "quick", "entry", ...}``.

    None when there is no calibration of this device, or its file cannot be read (a capture never
    fails over a cache file; ``bwdiag analyze`` reports an unusable one).
    """
    spec = "cpu" if device["kind"] == "cpu" else f"cuda:{device.get('index', 0)}"
    try:
        identity = device_identity(spec)
        path = cache_path(identity)
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no calibration cached (the usual case) or unreadable
        return None
    if not isinstance(record, dict) or record.get("schema") != CACHE_SCHEMA:
        return None
    if record.get("device_key") != identity.key:
        return None
    keep = ("created", "torch_version", "quick", "host", "entry")
    return {"file": str(path), **{k: record[k] for k in keep if k in record}}


def host_load() -> dict[str, Any] | None:
    """The host's 1-minute load average and the cores this process may use, when the OS says: a
    load above the cores means the recorded times include waiting for a CPU."""
    try:
        load1 = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on this OS
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
    return {"load1": round(float(load1), 2), "cores": cores}


#: Training frameworks whose loop the user does not write: the advice names their own switches.
#: (``transformers.trainer`` is imported only by scripts that use the Trainer.)
FRAMEWORKS = {"lightning": ("lightning.pytorch", "pytorch_lightning"), "hf_trainer": ("transformers.trainer",)}


def frameworks_in_use() -> list[str]:
    """The :data:`FRAMEWORKS` whose modules the script has imported by now."""
    return sorted(name for name, modules in FRAMEWORKS.items() if any(m in sys.modules for m in modules))


def capture_metadata(
    *,
    argv: list[str],
    schedule: dict[str, object],
    steps_captured: int,
    with_stack: bool,
    with_modules: bool,
    note: str | None = None,
) -> dict[str, Any]:
    """The ``"bwdiag"`` object written into a trace."""
    torch = sys.modules.get("torch")
    rank, world = rank_and_world()
    device = device_description()
    meta: dict[str, Any] = {
        "bwdiag_version": __version__,
        "torch_version": getattr(torch, "__version__", None),
        "python_version": platform.python_version(),
        "device": device,
        "device_name": device["name"],
        # Which machine recorded this: an analysis elsewhere must not use its own calibration.
        "host": host_record(),
        "world_size": world,
        "rank": rank,
        "argv": list(argv),
        "schedule": schedule,
        "steps_captured": steps_captured,
        "record_shapes": True,
        "with_stack": with_stack,
        "module_annotations": MODULE_ANNOTATIONS if with_modules else None,
        "calibrated": calibrated_ceilings(device),
        "host_load": host_load(),
        # intra-op threads the script runs with (a CPU loop's time depends on them)
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "frameworks": frameworks_in_use(),
    }
    if note:
        meta["note"] = note
    return meta
