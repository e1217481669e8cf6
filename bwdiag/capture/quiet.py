"""Keep torch.profiler's own chatter off the script's stderr, or mark it as bwdiag's.

Kineto writes lines such as ``USDT:2026-12-02 10:07:43 81:81 SyncActivityProfilerHandler.cpp:52]
profiler_start`` straight to file descriptor 2 whenever the profiler starts or stops, whatever
``KINETO_LOG_LEVEL`` says; torch.profiler also issues Python warnings. ``bwdiag run`` promises that
everything on stderr that is not the script's own starts with ``bwdiag: ``, so each profiler
transition runs inside :func:`profiler_output_filtered`: fd 2 goes to a temporary file for those few
milliseconds, Kineto's progress lines are dropped, its other log lines and the warnings come back
prefixed ``bwdiag: torch: ``, and anything else (another thread of the script writing at that very
moment) is passed through unchanged.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator

_KINETO_LOG = re.compile(rb"^\[?[A-Z]+:?[\d :.-]*\S+\.(?:cpp|cc|h):\d+\]")
_PROGRESS = re.compile(rb"^\[?(?:USDT|STAGE)\b")


#: torch.compile's warning about global module hooks: bwdiag's own step-finding and annotation hooks
#: would set it off in a script that registers none (``python script.py`` prints nothing there).
_GLOBAL_HOOK_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks on modules"


class GlobalHookWarningHidden:
    """Hides torch.compile's global-hook warning while bwdiag's global hooks exist (see above);
    :meth:`restore` takes the filter out again, leaving the script's own filters as they were."""

    def __init__(self) -> None:
        warnings.filterwarnings("ignore", message=_GLOBAL_HOOK_WARNING, category=UserWarning)
        self._entry = warnings.filters[0]

    def restore(self) -> None:
        if self._entry is None:
            return
        try:
            warnings.filters.remove(self._entry)
        except ValueError:  # the script reset the filters meanwhile
            pass
        self._entry = None
        mutated = getattr(warnings, "_filters_mutated", None)
        if mutated is not None:  # invalidate the per-module "already warned" caches, as filterwarnings does
            mutated()


@contextlib.contextmanager
def profiler_output_filtered() -> Iterator[None]:
    """Run a profiler start/step/stop with its native stderr and warnings filtered (see module)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _native_stderr_filtered():
            yield
    for w in caught:
        sys.stderr.write(f"bwdiag: torch: {w.category.__name__}: {w.message}\n")


@contextlib.contextmanager
def _native_stderr_filtered() -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no fd 2 (closed, or an embedded interpreter)
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            _replay(sink.read())


def _replay(data: bytes) -> None:
    out = []
    for line in data.splitlines(keepends=True):
        if _KINETO_LOG.match(line):
            if not _PROGRESS.match(line):
                out.append(b"bwdiag: torch: " + line)
        else:
            out.append(line)
    if out:
        os.write(2, b"".join(out))
