"""The run's own clock on the steps before the profiler starts: what a step takes unprofiled.

The profiler lengthens what it records (a CUPTI callback per launch, an event per op; on an H200 VM
the bundled transformer's steps took 7.9 ms recorded against 4.4 ms plain), so a step time read off
the trace alone overstates the step the user runs. The skipped steps before the capture window
(``--wait``) run with no profiler at all: :class:`StepClock` notes ``time.perf_counter()`` at each of
their boundaries and, when CUDA is in use, records a CUDA event on the current stream there (a few
microseconds, no synchronisation). When the window closes — several steps later, so those events have
long completed — the step times are read back (``torch.cuda.Event.elapsed_time``; an event not yet
complete is never waited on: the device times are then left out) and written into the trace's
``bwdiag`` metadata as ``unprofiled_steps``:

    {"ids": [1, 2, 3, 4], "host_us": [...], "device_us": [...] or null}

Step ``k``'s time is from its boundary to the next one; step 0 has no starting boundary and is not
timed. The same clock runs for ``AFTER_WINDOW_STEPS`` steps after the window (the profiler stopped,
the run past its warm-up and any DataLoader prefetch), written at the end of the run beside the trace
as ``rank<k>.clock.json`` (``{"after_window": {...}}``); the analysis prefers those steady steps and
falls back on the last few before the window (:func:`bwdiag.diagnose.steps.unprofiled_step`).
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any


class StepClock:
    """Boundaries of the steps before the capture window, on the host clock and the device's."""

    def __init__(self, torch: ModuleType) -> None:
        self._torch = torch
        self._ids: list[int] = []
        self._host: list[float] = []
        self._events: list[Any] = []

    def tick(self, step: int) -> None:
        """The boundary that starts step ``step``."""
        self._ids.append(step)
        self._host.append(time.perf_counter())
        self._events.append(self._event())

    def _event(self) -> Any:
        cuda = getattr(self._torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return None
        event = cuda.Event(enable_timing=True)
        event.record()
        return event

    @property
    def ticks(self) -> int:
        return len(self._ids)

    def record(self, wait: bool = False) -> dict[str, Any] | None:
        """The timed steps (see the module docstring), or None with fewer than two boundaries.
        ``wait``: wait for the device to reach the last boundary (at the end of the run only)."""
        if len(self._ids) < 2:
            return None
        ids = self._ids[:-1]
        host = [(b - a) * 1e6 for a, b in zip(self._host, self._host[1:])]
        device = self._device_us(wait)
        return {"ids": ids, "host_us": host, "device_us": device}

    def _device_us(self, wait: bool = False) -> list[float] | None:
        events = self._events
        if any(e is None for e in events):
            return None  # CUDA started mid-way
        if wait:
            events[-1].synchronize()
        if not all(e.query() for e in events):
            return None  # the device has not reached the last boundary: never waited on mid-run
        return [a.elapsed_time(b) * 1e3 for a, b in zip(events, events[1:])]
