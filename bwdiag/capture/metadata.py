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
from pathlib import Path
from typing import Any

from bwdiag import __version__

#: Where ``bwdiag calibrate`` keeps measured ceilings (one JSON file per device).
CALIBRATION_DIR = Path("~/.cache/bwdiag")


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
    return {"kind": "cpu", "name": _cpu_name(), "cores": os.cpu_count()}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass  # not Linux: platform.processor() below
    return platform.processor() or platform.machine() or "unknown CPU"


def calibrated_ceilings(device_name: str) -> dict[str, Any] | None:
    """Ceilings measured by ``bwdiag calibrate`` on this device, if a calibration file names it."""
    folder = CALIBRATION_DIR.expanduser()
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # unreadable or foreign file in the cache: not a calibration
        if not isinstance(data, dict):
            continue
        name = data.get("device") or data.get("name")
        if isinstance(name, dict):
            name = name.get("name")
        if name == device_name:
            return {"file": path.name, **data}
    return None


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
        "world_size": world,
        "rank": rank,
        "argv": list(argv),
        "schedule": schedule,
        "steps_captured": steps_captured,
        "record_shapes": True,
        "with_stack": with_stack,
        "module_annotations": (
            "record_function 'nn.Module: <path> (<Class>)' per module forward" if with_modules else None
        ),
        "calibrated": calibrated_ceilings(device["name"]),
    }
    if note:
        meta["note"] = note
    return meta
