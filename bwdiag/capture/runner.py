"""Run a script or module exactly as ``python`` would, with a capture session around it.

The script sees what ``python script.py ARGS`` gives it: ``__name__ == "__main__"``, ``sys.argv``
as typed, the script's folder as ``sys.path[0]`` (the working directory for ``-m``), an absolute
``__file__``, the same working directory, stdout and stderr. Its exit is Python's: ``sys.exit(n)``
exits ``n``; an uncaught exception prints its traceback (without bwdiag's frames) through
``sys.excepthook`` and exits 1; an uncaught ``KeyboardInterrupt`` prints its traceback, runs the
``atexit`` handlers and ends the process with SIGINT, as CPython does. The captured steps are
written and analysed first, whatever the ending.
"""

from __future__ import annotations

import atexit
import builtins
import io
import os
import runpy
import signal
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from bwdiag.errors import BwdiagError


@dataclass(frozen=True)
class Target:
    """What to run: a script path (or a folder / zip with ``__main__.py``), or a module name."""

    name: str
    is_module: bool

    def label(self) -> str:
        """The name used for the default output folder."""
        return self.name


def check_target(target: Target) -> None:
    """Fail before anything starts when a script path cannot be opened (python exits 2 there too)."""
    if target.is_module:
        if not target.name or target.name.startswith("."):
            raise BwdiagError(f"-m needs an absolute module name, got {target.name!r}")
        return
    path = Path(target.name)
    if not path.exists():
        raise BwdiagError(f"can't open file {str(path.absolute())!r}: no such file")
    if path.is_dir() and not (path / "__main__.py").exists():
        raise BwdiagError(f"can't find '__main__' module in {str(path.absolute())!r}")


def execute(target: Target, args: Sequence[str]) -> None:
    """Run the target in this process as ``__main__``; exceptions propagate unchanged."""
    sys.argv = [target.name, *args]
    if target.is_module:
        _set_path0(os.getcwd())
        _find_module(target.name)
        runpy.run_module(target.name, run_name="__main__", alter_sys=True)
        return
    path = os.path.abspath(target.name)
    _set_path0(os.path.dirname(os.path.realpath(path)) if os.path.isfile(path) else path)
    if not os.path.isfile(path):  # a folder or zip file with __main__.py: runpy's own rules
        runpy.run_path(path, run_name="__main__")
        return
    with io.open_code(path) as f:
        source = f.read()
    code = compile(source, path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=path,
        __cached__=None,
        __loader__=_source_loader(path),
        __package__=None,
        __spec__=None,
        __builtins__=builtins,
        __annotations__={},
    )
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        # Like runpy, keep the script's module in place while atexit handlers and pickles may
        # still need it; restore bwdiag's only if the script replaced it with something else.
        if sys.modules.get("__main__") is not main and saved is not None:
            sys.modules["__main__"] = saved


#: The ``bwdiag`` package folder, and the folder it is imported from.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE_HOME = os.path.dirname(_PACKAGE_DIR)


def _set_path0(entry: str) -> None:
    """Make ``entry`` the script's ``sys.path[0]``, in place of bwdiag's own launcher entry (the
    ``bin`` folder of the ``bwdiag`` script, or the working directory under ``python -m bwdiag``)
    as python would have it, unless bwdiag itself is imported from there (a source checkout):
    then the entry stays behind the script's, so bwdiag can still import its own modules."""
    launcher = sys.path[0] if sys.path else None
    home = _PACKAGE_HOME
    if launcher is not None and os.path.abspath(launcher or ".") != home:
        sys.path[0] = entry
    else:
        sys.path.insert(0, entry)


class ModuleNotRunnable(SystemExit):
    """``-m NAME`` names no runnable module: Python's one-line message and exit status 1."""


def _find_module(name: str) -> None:
    """Refuse ``name`` as ``python -m`` does, in its words, before any of the module runs (parent
    packages are imported to find it, as Python does)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as err:
        raise ModuleNotRunnable(f"{sys.executable}: Error while finding module specification for {name!r} "
                                f"({type(err).__name__}: {err})") from None
    if spec is None:
        raise ModuleNotRunnable(f"{sys.executable}: No module named {name}")
    if spec.submodule_search_locations is not None:  # a package runs its __main__
        try:
            main = importlib.util.find_spec(f"{name}.__main__")
        except ImportError:
            main = None
        if main is None:
            raise ModuleNotRunnable(f"{sys.executable}: No module named {name}.__main__; {name!r} is a "
                                    "package and cannot be directly executed")


def _source_loader(path: str):
    from importlib.machinery import SourceFileLoader

    return SourceFileLoader("__main__", path)


def ending_of(exc: BaseException | None) -> str:
    """How the script ended, in words, for the capture note."""
    if exc is None:
        return "ended"
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})" if exc.code not in (None, 0) else "ended"
    if isinstance(exc, KeyboardInterrupt):
        return "was interrupted (Ctrl-C)"
    return f"raised {type(exc).__name__}"


def exit_like_python(exc: BaseException | None) -> NoReturn:
    """End this process the way ``python script.py`` would have ended with ``exc`` uncaught."""
    if exc is None:
        raise SystemExit(0)
    if isinstance(exc, SystemExit):
        raise exc
    tb = strip_own_frames(exc.__traceback__)
    exc.__traceback__ = tb
    sys.excepthook(type(exc), exc, tb)
    if isinstance(exc, KeyboardInterrupt):
        _die_by_sigint()
    raise SystemExit(1)


def _die_by_sigint() -> NoReturn:
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass  # a closed or replaced stream: nothing left to flush
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    raise SystemExit(130)  # only reached where SIGINT cannot end the process


def strip_own_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """Drop the leading traceback entries that belong to bwdiag, click or runpy."""
    import click

    own_dirs = (_PACKAGE_DIR + os.sep, os.path.dirname(os.path.abspath(click.__file__)) + os.sep)
    runpy_files = {"<frozen runpy>", os.path.abspath(runpy.__file__)}
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name.startswith(own_dirs) or name in runpy_files:
            tb = tb.tb_next
            continue
        break
    return tb


def run_with(
    target: Target,
    args: Sequence[str],
    *,
    before: Callable[[], None],
    after: Callable[[BaseException | None], None],
) -> NoReturn:
    """``before()``, run the target, ``after(exc)`` (whatever happened), then exit like Python.

    ``after`` must not raise: it reports its own failures in one line (see cli/run).
    """
    before()
    exc: BaseException | None = None
    try:
        execute(target, args)
    except BaseException as err:  # noqa: BLE001 - every ending is re-created by exit_like_python
        exc = err
    try:
        after(exc)
    except KeyboardInterrupt:
        sys.stderr.write("bwdiag: interrupted while writing the report; traces are in place\n")
    exit_like_python(exc)
