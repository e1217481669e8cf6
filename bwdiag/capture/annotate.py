"""Module annotations: one ``record_function`` span per module forward, during the window only.

``torch.profiler``'s own ``with_modules`` records nothing unless ``with_stack`` is on too (torch
2.13), and the Python tracer behind it costs about +70% step time on a small CPU model. bwdiag
instead installs two global forward hooks while the profiler runs, each forward opening a span named
``nn.Module: <path> (<Class>)`` (``path`` as in ``named_modules()`` of the top-level module, e.g.
``nn.Module: blocks.0.attn (Attention)``; the top-level module itself is ``nn.Module: GPT``). They
show up as ``user_annotation`` events (and ``gpu_user_annotation`` on the device), so the loader can
tie each kernel to the innermost module that launched it. The hooks are removed when the window
ends. They are skipped when torch.compile has compiled graphs (new global hooks would make dynamo
recompile inside the very steps being measured).
"""

from __future__ import annotations

import sys
import threading
import weakref
from types import ModuleType
from typing import Any

PREFIX = "nn.Module: "


def compiled_graphs_present() -> bool:
    """True once torch.compile (dynamo) has compiled at least one graph in this process."""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    if dynamo_utils is None:
        return False
    return bool(dynamo_utils.counters.get("stats", {}).get("unique_graphs", 0))


class ModuleAnnotator:
    """Global forward hooks that wrap each module forward in a named ``record_function``."""

    def __init__(self, torch: ModuleType) -> None:
        from torch.nn.modules import module as nn_module

        # The ops behind `record_function.__enter__/__exit__`, called directly: no Python context
        # object per module call.
        self._enter = torch.ops.profiler._record_function_enter_new
        self._exit = torch.ops.profiler._record_function_exit._RecordFunction
        self._names: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._local = threading.local()
        self._handles = [
            nn_module.register_module_forward_pre_hook(self._pre),
            nn_module.register_module_forward_hook(self._post, always_call=True),
        ]

    def _stack(self) -> list[Any]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _name(self, module: Any, top_level: bool) -> str:
        try:
            return self._names[module]
        except (KeyError, TypeError):
            pass  # not named yet: name it (and, at top level, its whole tree) below
        cls = type(module).__name__
        if not top_level:
            return cls
        for path, child in module.named_modules():
            self._names[child] = f"{path} ({type(child).__name__})" if path else cls
        return self._names.get(module, cls)

    def _pre(self, module: Any, args: Any) -> None:
        stack = self._stack()
        stack.append(self._enter(PREFIX + self._name(module, top_level=not stack), None))

    def _post(self, module: Any, args: Any, output: Any) -> None:
        stack = self._stack()
        if stack:
            self._exit(stack.pop())

    def remove(self) -> None:
        """Remove the hooks and close any span left open by a forward that raised."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        stack = self._stack()
        while stack:
            self._exit(stack.pop())
