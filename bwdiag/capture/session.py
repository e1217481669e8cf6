"""One capture: count steps, start torch.profiler when the window opens, write the trace when it
closes, and stop profiling so the rest of the run pays nothing.

Used by both ``bwdiag run`` (steps found by :mod:`bwdiag.capture.markers`) and
``bwdiag.profile(...)`` (steps from ``prof.step()``). Nothing here imports torch before the caller
hands it over in :meth:`CaptureSession.attach`.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import ModuleType
from typing import Any

from bwdiag.capture.annotate import ModuleAnnotator, compiled_graphs_present
from bwdiag.capture.clock import StepClock
from bwdiag.capture.folder import (
    rank_trace_name,
    write_clock_file,
    say_line,
    temp_trace_path,
    write_done_marker,
)
from bwdiag.capture.markers import StepMarkers
from bwdiag.capture.metadata import capture_metadata, device_description, rank_and_world
from bwdiag.capture.options import CaptureOptions, StepOn
from bwdiag.capture.quiet import profiler_output_filtered


#: Steps timed after the window (the unprofiled steady state: past compilation, allocator growth and a
#: DataLoader's prefetched batches, which make the steps before the window faster than the run's). The
#: clock costs a ``perf_counter`` per step boundary, so more steps cost the run nothing, and a CPU step
#: varies by ±10 % from one step to the next: the bundled transformer's 10 steps after its window had a
#: median of 13.98 ms where its 30 steps after them took 12.94 ms (the script's own ``perf_counter``;
#: the plain script's 13.16 ms), and the host-overhead saving, which subtracts the profiled step's
#: excess over this one, came out 2.6× the realised saving.
AFTER_WINDOW_STEPS = 30

#: Kineto's switch for releasing CUPTI when the profiler stops (see ``CaptureSession._start``).
CUDA_TEARDOWN_ENV = "TEARDOWN_CUPTI"


def release_cupti_on_stop(torch: ModuleType, environ) -> bool:
    """Ask Kineto to release CUPTI when the profiler stops (``TEARDOWN_CUPTI=1``, read at that moment);
    True when it was set here.

    Without it CUPTI stays attached and every later launch keeps paying a callback: on an H200
    (torch 2.11) the training example's steps after the window took 5.6–6.6 ms under ``bwdiag run``
    against 3.7–4.3 ms plain, and 4.4–5.2 ms with this set (benchmarks/README.md). A user's own
    setting wins, CPU-only runs are left alone, and Inductor sets 0 itself when it uses CUDA graphs
    (CUPTI's re-initialisation after a teardown crashed with CUDA graphs before CUDA 12.6)."""
    if CUDA_TEARDOWN_ENV in environ or not torch.cuda.is_available():
        return False
    environ[CUDA_TEARDOWN_ENV] = "1"
    return True


class Phase(str, Enum):
    """Where the session is in its schedule."""

    WAITING = "waiting"  # before the window: no profiler exists
    WARMUP = "warmup"  # profiler started, not recording
    RECORDING = "recording"
    DONE = "done"  # window over, trace written (or nothing to write), hooks removed
    DISABLED = "disabled"  # capture gave up (another profiler running, export failed…)


@dataclass(frozen=True)
class CaptureResult:
    """What one rank captured."""

    rank: int
    world_size: int
    trace: Path | None  # None when nothing was recorded
    steps_seen: int  # step boundaries seen in the whole run
    steps_captured: int  # complete steps inside the recorded window
    note: str | None  # why the capture is short or empty, for the report and the terminal


class CaptureSession:
    """The state machine behind one capture (see module docstring)."""

    def __init__(
        self,
        options: CaptureOptions,
        out_dir: Path,
        *,
        argv: list[str],
        say: Callable[[str], None] = say_line,
        api: bool = False,
    ) -> None:
        self.options = options
        self._api = api  # notes name options as bwdiag.profile(wait=...) rather than --wait
        self._subject = "the profile block" if api else "the script"
        self.out_dir = Path(out_dir)
        self.argv = list(argv)
        self.say = say
        self.phase = Phase.WAITING
        self.steps_seen = 0
        self.trace: Path | None = None
        self.note: str | None = None
        self._torch: ModuleType | None = None
        self._prof: Any = None
        self._markers: StepMarkers | None = None
        self._annotator: ModuleAnnotator | None = None
        self._busy = False
        self._steps_in_trace = 0
        self._full_window_meta: dict[str, Any] | None = None
        self._clock: StepClock | None = None
        self._after: StepClock | None = None  # the steps after the window (see _start_after_clock)

    # ------------------------------------------------------------------ lifecycle
    def attach(self, torch: ModuleType) -> None:
        """Torch is imported: install the step markers, and start at once when ``wait == 0``."""
        self._torch = torch
        self._clock = StepClock(torch)
        if self.options.step_on.kind is not StepOn.MANUAL:
            self._markers = StepMarkers(self.options.step_on, self._boundary, self.say)
            self._markers.install(torch)
        if self.options.wait == 0:
            self._guarded(self._start)

    def step(self) -> None:
        """One step boundary, from ``prof.step()``."""
        self._boundary(1)

    def finish(self, ended: str = "ended") -> CaptureResult:
        """The script or block is over (``ended`` says how): finish the trace with what was captured.

        Step markers go first: a ``time:`` marker's SIGALRM would otherwise run a step boundary in
        the middle of this method (closing the profiler twice, importing half-imported modules), and
        ``_busy`` stays set so that a tick already delivered does nothing either.
        """
        self._busy = True
        if self._markers is not None:
            self._markers.remove()
            self._markers = None
        if self.phase is Phase.WAITING:
            if self._torch is None:
                self.note = "the script ended without importing torch: nothing was recorded"
            else:
                self.note = (
                    f"{self._subject} {ended} after {self._steps_text()}, before the capture window "
                    f"opened at step {self.options.wait}: nothing was recorded (lower {self._opt('wait')}, "
                    f"or check {self._opt('step_on')})"
                )
        elif self.phase is Phase.WARMUP:
            self.note = (
                f"{self._subject} {ended} during the profiler warmup, after {self._steps_text()}: "
                f"nothing was recorded (lower {self._opt('wait')}/{self._opt('warmup')})"
            )
            self._guarded(self._close_profiler)
        elif self.phase is Phase.RECORDING:
            complete = self.steps_seen - self.options.wait - self.options.warmup
            self.note = (
                f"{self._subject} {ended} after {complete} of {self.options.active} active steps; "
                "the trace holds those and the partial step that was running"
            )
            self._steps_in_trace = complete
            self._guarded(lambda: self._add_metadata(complete, self.note))
            self._guarded(self._close_profiler)
        self._remove_hooks()
        if self.phase is not Phase.DISABLED:
            self.phase = Phase.DONE
        self._guarded(self._write_after_clock)
        rank, world = rank_and_world()
        result = CaptureResult(rank, world, self.trace, self.steps_seen, self._steps_in_trace, self.note)
        write_done_marker(
            self.out_dir,
            rank,
            {"trace": self.trace.name if self.trace else None, "note": self.note, "pid": os.getpid()},
        )
        return result

    # ------------------------------------------------------------------ steps
    def _opt(self, name: str) -> str:
        return f"{name}=" if self._api else "--" + name.replace("_", "-")

    def _steps_text(self) -> str:
        n = self.steps_seen
        return f"{n} step{'s' if n != 1 else ''}"

    def _boundary(self, n: int) -> None:
        if self._busy or self.phase is Phase.DISABLED:
            return
        if self.phase is Phase.DONE:
            self._tick_after(n)
            return
        self._busy = True
        try:
            for _ in range(n):
                self.steps_seen += 1
                if self.phase is Phase.WAITING:
                    if self._clock is not None:
                        self._clock.tick(self.steps_seen)
                    if self.steps_seen >= self.options.wait:
                        self._guarded(self._start)
                elif self.phase in (Phase.WARMUP, Phase.RECORDING):
                    self._guarded(self._advance)
        finally:
            self._busy = False

    def _guarded(self, action: Callable[[], None]) -> None:
        """Run profiler work; a failure disables capture with one line instead of breaking the
        user's script (it runs inside their optimizer.step() or forward)."""
        try:
            action()
        except Exception as err:  # noqa: BLE001 - reported, capture disabled, script carries on
            self.say(f"capture stopped: {type(err).__name__}: {err}")
            self.phase = Phase.DISABLED
            self._remove_hooks()
            self._prof = None

    def _start(self) -> None:
        torch = self._torch
        assert torch is not None
        opts = self.options
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():  # CUDA and ROCm builds both report through CUDA activity
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "won't be using warmup" when --warmup 0: chosen
            schedule = torch.profiler.schedule(
                skip_first=opts.wait, wait=0, warmup=opts.warmup, active=opts.active, repeat=1
            )
        prof = torch.profiler.profile(
            activities=activities,
            schedule=schedule,
            on_trace_ready=self._export,
            record_shapes=True,
            with_stack=opts.with_stack,
            with_modules=opts.with_stack,  # without stacks torch records no module data (2.13)
        )
        # The profiler is created only now, at step `wait`: number its steps from here so the
        # trace's ProfilerStep#N are the run's own step indices (#7..#9 with the defaults).
        prof.step_num = self.steps_seen
        prof.current_action = schedule(self.steps_seen)
        if hasattr(prof, "_prev_schedule_action"):
            prof._prev_schedule_action = prof.current_action
        annotate = opts.with_modules and not compiled_graphs_present()
        # The metadata of a full window, gathered now (~1 ms: host, device, calibration cache): done
        # when the window closes, it would lengthen the last recorded ProfilerStep by as much.
        self._full_window_meta = self._metadata(opts.active, None, with_modules=annotate)
        release_cupti_on_stop(torch, os.environ)
        try:
            with profiler_output_filtered():
                prof.start()
        except RuntimeError as err:  # e.g. the script runs its own profiler
            self.say(f"cannot start torch.profiler ({err}); continuing without capture")
            self.phase = Phase.DISABLED
            self._remove_hooks()
            return
        self._prof = prof
        self.phase = Phase.WARMUP if opts.warmup else Phase.RECORDING
        if annotate:
            self._annotator = ModuleAnnotator(
                torch, self._markers.top_forward_starting if self._markers is not None else None)
        elif opts.with_modules:
            self.say("torch.compile graphs present: module annotations skipped")

    def _advance(self) -> None:
        opts = self.options
        done = self.steps_seen - opts.wait  # steps completed since the profiler started
        if done == opts.warmup + opts.active:
            self._steps_in_trace = opts.active
            meta = self._full_window_meta
            if meta is None or meta["device"] != device_description():  # CUDA started in the window
                meta = self._metadata(opts.active, None, with_modules=self._annotator is not None)
            meta["rank"], meta["world_size"] = rank_and_world()  # the process group may be newer
            meta["unprofiled_steps"] = self._clock.record() if self._clock is not None else None
            self._prof.add_metadata_json("bwdiag", json.dumps(meta))
            with profiler_output_filtered():
                self._prof.step()  # RECORD_AND_SAVE -> NONE: stop_trace, then _export
            self._close_profiler()
            self._start_after_clock()
            self.phase = Phase.DONE
            first = opts.wait + opts.warmup
            where = f"trace {self.trace}" if self.trace else "no trace"
            self.say(f"recorded steps {first}..{first + opts.active - 1}; {where}; profiler stopped")
            return
        if done == opts.warmup:  # WARMUP -> RECORD: Kineto starts tracing and says so on fd 2
            with profiler_output_filtered():
                self._prof.step()
            self.phase = Phase.RECORDING
        else:  # no Kineto transition: keep this per-step call as cheap as plain torch.profiler's
            self._prof.step()

    def _start_after_clock(self) -> None:
        """The window is over: module annotations go, and the step markers (or the ``prof.step()``
        calls of ``bwdiag.profile``) are timed for ``AFTER_WINDOW_STEPS`` more steps (the unprofiled
        steady state; see ``capture/clock.py``), after which the markers are removed."""
        if self._annotator is not None:
            self._annotator.remove()
            self._annotator = None
        if self._torch is None or AFTER_WINDOW_STEPS <= 0:
            self._remove_hooks()
            return
        self._after = StepClock(self._torch)
        self._after.tick(self.steps_seen)

    def _tick_after(self, n: int) -> None:
        if self._after is None:
            return
        for _ in range(n):
            self.steps_seen += 1
            self._after.tick(self.steps_seen)
        if self._after.ticks > AFTER_WINDOW_STEPS:
            self._remove_hooks()  # enough: the rest of the run pays nothing

    def _write_after_clock(self) -> None:
        """The steps timed after the window, beside the trace (``rank<k>.clock.json``)."""
        record = self._after.record(wait=True) if self._after is not None else None
        if record is not None:
            rank, _ = rank_and_world()
            write_clock_file(self.out_dir, rank, {"after_window": record})

    def _add_metadata(self, steps: int, note: str | None) -> None:
        meta = self._metadata(steps, note, with_modules=self._annotator is not None)
        meta["unprofiled_steps"] = self._clock.record() if self._clock is not None else None
        self._prof.add_metadata_json("bwdiag", json.dumps(meta))

    def _metadata(self, steps: int, note: str | None, *, with_modules: bool) -> dict[str, Any]:
        return capture_metadata(
            argv=self.argv,
            schedule=self.options.schedule_dict(),
            steps_captured=steps,
            with_stack=self.options.with_stack,
            with_modules=with_modules,
            note=note,
        )

    def _close_profiler(self) -> None:
        prof, self._prof = self._prof, None
        if self._annotator is not None:
            self._annotator.remove()
            self._annotator = None
        if prof is not None:
            with profiler_output_filtered():
                prof.__exit__(None, None, None)  # exports if still recording

    def _export(self, prof: Any) -> None:
        rank, _ = rank_and_world()
        tmp = temp_trace_path(self.out_dir, rank)
        try:
            prof.export_chrome_trace(str(tmp))
            final = self.out_dir / rank_trace_name(rank)
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        self.trace = final

    def _remove_hooks(self) -> None:
        if self._markers is not None:
            self._markers.remove()
            self._markers = None
        if self._annotator is not None:
            self._annotator.remove()
            self._annotator = None


def torch_if_imported() -> ModuleType | None:
    """The torch module when the process has imported it, else None (never imports it)."""
    return sys.modules.get("torch")
