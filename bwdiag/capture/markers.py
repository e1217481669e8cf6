"""Step markers: hooks that tell the capture session where one step ends and the next begins.

Every marker calls ``on_boundary(n)`` when ``n`` step boundaries have just passed (almost always 1).
Markers that fire at the *start* of a step (a forward, a ``record_function`` block) swallow their
first event, which only opens step 0. Hooks are installed once torch is imported and removed as soon
as the capture window is over, so the rest of the run pays nothing.

``auto`` (the ``bwdiag run`` default) decides from what the script does:

* an ``optimizer.step()`` of any optimizer -> training: every later optimizer step ends a step;
* two top-level forwards in a row with no optimizer step between them, the first run with
  gradients disabled (``torch.no_grad`` / ``inference_mode``) -> inference: each top-level forward
  starts a step;
* 32 top-level forwards and no optimizer step at all -> inference as well (a script that forgot
  ``no_grad``; gradient accumulation over more than 32 micro-batches needs ``--step-on optimizer``).

The top-level module is the first module with parameters called from outside any other module's
forward (a loss module has none). It is found with global forward hooks that live for one call and
are then replaced by a hook on that one instance.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from bwdiag.capture.quiet import GlobalHookWarningHidden
from bwdiag.capture.options import StepMarker, StepOn
from bwdiag.errors import BwdiagError

#: Top-level forwards without any optimizer step after which ``auto`` settles on inference.
AUTO_FORWARD_LIMIT = 32


class StepMarkers:
    """Installs the hooks for one :class:`StepMarker` and turns their events into boundaries."""

    def __init__(
        self,
        marker: StepMarker,
        on_boundary: Callable[[int], None],
        say: Callable[[str], None],
    ) -> None:
        self.marker = marker
        self.on_boundary = on_boundary
        self.say = say
        self.mode: StepOn | None = None if marker.kind is StepOn.AUTO else marker.kind
        self._handles: list[Any] = []
        self._started = False  # a step-start marker has seen its first event
        self._top: _TopModuleWatch | None = None
        self._forwards = 0
        self._last_forward_no_grad = False
        self._patched_enter: Any = None
        self._old_alarm: Any = None

    # ---------------------------------------------------------------- install / remove
    def install(self, torch: ModuleType) -> None:
        """Register the hooks; called once torch is imported."""
        self._torch = torch
        kind = self.marker.kind
        if kind in (StepOn.AUTO, StepOn.OPTIMIZER):
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._handles.append(register_optimizer_step_post_hook(self._on_optimizer_step))
        if kind in (StepOn.AUTO, StepOn.FORWARD):
            self._top = _TopModuleWatch(torch, self._on_top_forward, class_name=None)
        elif kind is StepOn.MODULE:
            self._top = _TopModuleWatch(torch, self._on_top_forward, class_name=self.marker.arg)
        elif kind is StepOn.LABEL:
            self._patch_record_function(torch, self.marker.arg or "")
        elif kind is StepOn.TIME:
            self._start_timer(self.marker.seconds)

    def top_forward_starting(self, module: Any) -> None:
        """A top-level module's forward is about to start (the module annotations' pre-hook says so
        before it opens the module's span): a forward marker marks the step now (:meth:`_TopModuleWatch.early`)."""
        if self._top is not None:
            self._top.early(module)

    def remove(self) -> None:
        """Remove every hook (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._top is not None:
            self._top.remove()
            self._top = None
        if self._patched_enter is not None:
            cls, original = self._patched_enter
            cls.__enter__ = original
            self._patched_enter = None
        if self._old_alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old_alarm)
            self._old_alarm = None

    # ---------------------------------------------------------------- events
    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.mode is None:
            self.mode = StepOn.OPTIMIZER
            if self._top is not None:
                self._top.remove()
                self._top = None
        if self.mode is StepOn.OPTIMIZER:
            self.on_boundary(1)

    def _on_top_forward(self) -> None:
        if self.mode in (StepOn.FORWARD, StepOn.MODULE):
            self._step_start()
            return
        if self.mode is not None:  # auto settled on the optimizer
            return
        no_grad = not self._torch.is_grad_enabled()
        self._forwards += 1
        if (self._forwards > 1 and self._last_forward_no_grad) or self._forwards > AUTO_FORWARD_LIMIT:
            self.mode = StepOn.FORWARD
            for handle in self._handles:  # the optimizer hook
                handle.remove()
            self._handles.clear()
            self.say(
                f"marking steps by the forward of {self._top.describe() if self._top else 'the model'} "
                "(no optimizer steps seen); choose another marker with --step-on"
            )
            self._started = True
            self.on_boundary(self._forwards - 1)
            return
        self._last_forward_no_grad = no_grad

    def _step_start(self) -> None:
        if self._started:
            self.on_boundary(1)
        else:
            self._started = True

    # ---------------------------------------------------------------- label
    def _patch_record_function(self, torch: ModuleType, label: str) -> None:
        cls = torch.autograd.profiler.record_function
        original = cls.__enter__
        markers = self

        def __enter__(rf: Any) -> Any:
            if rf.name == label:
                markers._step_start()
            return original(rf)

        cls.__enter__ = __enter__
        self._patched_enter = (cls, original)

    # ---------------------------------------------------------------- time
    def _start_timer(self, seconds: float) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise BwdiagError("--step-on time:SECONDS needs to start from the main thread")
        current = signal.getsignal(signal.SIGALRM)
        if current not in (signal.SIG_DFL, signal.SIG_IGN, None):
            raise BwdiagError(
                "--step-on time:SECONDS uses SIGALRM, which the script already handles; "
                "mark steps another way (--step-on optimizer|forward|module:NAME|label:NAME)"
            )
        self._old_alarm = current
        signal.signal(signal.SIGALRM, self._on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def _on_alarm(self, signum: int, frame: Any) -> None:
        """One tick is one step boundary. The timer is one-shot and re-armed after the boundary's
        own work (starting or stepping the profiler, which can take longer than the interval on a
        loaded host), so every step spans at least the interval and no tick lands inside that work."""
        self.on_boundary(1)
        if self._old_alarm is not None:  # not removed by the boundary (window over)
            signal.setitimer(signal.ITIMER_REAL, self.marker.seconds)


class _TopModuleWatch:
    """Calls ``on_call()`` at the start of every forward of one module instance.

    The instance is the first module with parameters (or, with ``class_name``, of that class) whose
    forward is called from outside any other module's forward. Until it is found, global forward
    hooks track the nesting depth; then they are removed and one instance pre-hook remains.
    """

    def __init__(self, torch: ModuleType, on_call: Callable[[], None], class_name: str | None) -> None:
        from torch.nn.modules import module as nn_module

        self._on_call = on_call
        self._class_name = class_name
        self._depth = 0
        self.module: Any = None
        self._global = [
            nn_module.register_module_forward_pre_hook(self._global_pre),
            nn_module.register_module_forward_hook(self._global_post, always_call=True),
        ]
        self._hidden = GlobalHookWarningHidden()
        self._instance: Any = None
        self._called_early = False  # early() ran for the call now starting: the instance hook skips it

    def early(self, module: Any) -> None:
        """The watched module's forward is about to start, told by a global pre-hook that runs before
        the instance hook (the module annotations'): mark the step there, so the step's span opens
        before the module's own annotation does and holds all of it."""
        if module is not None and module is self.module:
            self._called_early = True
            self._on_call()

    def _instance_pre(self) -> None:
        if self._called_early:
            self._called_early = False
            return
        self._on_call()

    def describe(self) -> str:
        return type(self.module).__name__ if self.module is not None else "the model"

    def _matches(self, module: Any) -> bool:
        if self._class_name is not None:
            cls = type(module)
            return self._class_name in (cls.__name__, cls.__qualname__, f"{cls.__module__}.{cls.__qualname__}")
        if self._depth != 0:
            return False
        return next(iter(module.parameters(recurse=True)), None) is not None

    def _global_pre(self, module: Any, args: Any) -> None:
        if self.module is None and self._matches(module):
            self.module = module
            self._drop_global()
            self._instance = module.register_forward_pre_hook(lambda m, a: self._instance_pre())
            self._on_call()  # this call started before the instance hook existed
            return
        self._depth += 1

    def _global_post(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(0, self._depth - 1)

    def _drop_global(self) -> None:
        for handle in self._global:
            handle.remove()
        self._global.clear()
        self._hidden.restore()

    def remove(self) -> None:
        self._drop_global()
        if self._instance is not None:
            self._instance.remove()
            self._instance = None
