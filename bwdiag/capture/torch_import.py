"""Run a callback once ``torch`` has been imported, without importing it ourselves.

``bwdiag run`` must not import torch before the script does: importing it takes seconds, and some
scripts set variables (``CUDA_VISIBLE_DEVICES``, ``OMP_NUM_THREADS``…) before their own
``import torch``. So a one-shot finder on ``sys.meta_path`` waits for the script's import and calls
back as soon as ``torch/__init__.py`` has finished executing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> Callable[[], None]:
    """Call ``callback(module)`` once ``name`` is imported (now, if it already is).

    Returns a function that cancels the wait (a no-op once the callback has run).
    """
    if name in sys.modules:
        callback(sys.modules[name])
        return lambda: None
    finder = _ImportWatcher(name, callback)
    sys.meta_path.insert(0, finder)
    return finder.cancel


class _ImportWatcher(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.callback = callback

    def cancel(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname != self.name:
            return None
        self.cancel()  # one shot; the search below must not find us again
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _CallbackLoader(spec.loader, self.callback)
        return spec


class _CallbackLoader(importlib.abc.Loader):
    """Delegates to the real loader, then puts it back on the module and runs the callback."""

    def __init__(self, inner: importlib.abc.Loader, callback: Callable[[ModuleType], None]) -> None:
        self._inner = inner
        self._callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec):
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if module.__spec__ is not None:
            module.__spec__.loader = self._inner
        module.__loader__ = self._inner
        self._inner.exec_module(module)
        self._callback(module)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)
