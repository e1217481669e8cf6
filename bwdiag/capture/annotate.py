"""Module annotations: one ``record_function`` span per module forward, during the window only.

``torch.profiler``'s own ``with_modules`` records nothing unless ``with_stack`` is on too (torch
2.13), and the Python tracer behind it costs about +70% step time on a small CPU model. bwdiag
instead installs two global forward hooks while the profiler runs, each forward opening a span
``nn.Module: <name>``, the same naming scheme as torch's Python tracer: spans nest, and joining the
names of the nested spans with dots gives the module's path. The top-level module is named by its
class, every other module by its path relative to the enclosing module that called it, as in
``named_modules()``: ``TinyGPT`` > ``blocks.0`` > ``attn`` > ``qkv`` reads
``TinyGPT.blocks.0.attn.qkv``. A module outside the top-level tree is named by its class. They show
up as ``user_annotation`` events (and ``gpu_user_annotation`` on the device), so the loader can tie
each kernel to the innermost module that launched it. The hooks are removed when the window
ends. They are skipped when torch.compile has compiled graphs (new global hooks would make dynamo
recompile inside the very steps being measured).
"""

from __future__ import annotations

import sys
import threading
import weakref
from types import ModuleType
from typing import Any

from bwdiag.capture.quiet import GlobalHookWarningHidden

PREFIX = "nn.Module: "


def compiled_graphs_present() -> bool:
    """True once torch.compile (dynamo) has compiled at least one graph in this process."""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    if dynamo_utils is None:
        return False
    return bool(dynamo_utils.counters.get("stats", {}).get("unique_graphs", 0))


class ModuleAnnotator:
    """Global forward hooks that wrap each module forward in a named ``record_function``."""

    def __init__(self, torch: ModuleType, before_top_level: Any = None) -> None:
        """``before_top_level(module)``: called as a top-level forward starts, before its span opens
        (the step markers mark a step there, so the step's span holds the whole forward)."""
        from torch.nn.modules import module as nn_module

        self._before_top_level = before_top_level
        # The ops behind `record_function.__enter__/__exit__`, called directly (no Python context
        # object per module call). The exit op is called with __torch_function__ handling off, as
        # record_function does: with it on, the call costs about twice as much.
        self._enter = torch.ops.profiler._record_function_enter_new
        exit_op = torch.ops.profiler._record_function_exit._RecordFunction
        no_torch_function = torch._C.DisableTorchFunctionSubclass

        def _exit(record: Any) -> None:
            with no_torch_function():
                exit_op(record)

        self._exit = _exit
        self._paths: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._local = threading.local()
        self._handles = [
            nn_module.register_module_forward_pre_hook(self._pre),
            nn_module.register_module_forward_hook(self._post, always_call=True),
        ]
        self._hidden = GlobalHookWarningHidden()

    def _stack(self) -> list[Any]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _path(self, module: Any) -> str | None:
        try:
            return self._paths[module]
        except (KeyError, TypeError):  # unknown, or a module that cannot be weakly referenced
            return None

    def _pre(self, module: Any, args: Any) -> None:
        stack = self._stack()
        if not stack and self._before_top_level is not None:
            self._before_top_level(module)
            if not self._handles:  # that step ended the window: the annotations are gone
                return
        if not stack:  # a top-level forward: name its whole tree once
            if self._path(module) != "":
                for path, child in module.named_modules():
                    self._paths[child] = path
            name, path = type(module).__name__, ""
        else:
            path = self._path(module)
            parent = stack[-1][1]
            if path is None or parent is None:
                name = type(module).__name__
            elif parent == "":
                name = path
            elif path.startswith(parent + "."):
                name = path[len(parent) + 1 :]
            else:
                name = path
        stack.append((self._enter(PREFIX + name, None), path))

    def _post(self, module: Any, args: Any, output: Any) -> None:
        stack = self._stack()
        if stack:
            self._exit(stack.pop()[0])

    def remove(self) -> None:
        """Remove the hooks and close any span left open by a forward that raised."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._hidden.restore()
        stack = self._stack()
        while stack:
            self._exit(stack.pop()[0])
