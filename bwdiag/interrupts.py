"""How an offline command (``bwdiag analyze``) ends when the user interrupts it.

Ctrl-C and ``kill -TERM`` both end it at once with one line on stderr and the shell's conventional
status (130 for SIGINT, 143 for SIGTERM): its worker processes are killed first, and outputs, which
are written atomically as a pair, are either all there from a run that finished or not there at all.
The command raises ``SystemExit(status)``; the ``bwdiag`` program then ends with ``os._exit``
(``cli.console_main``): the executor's threads would otherwise print tracebacks about the futures the
interruption cancelled, and Python's exit would wait for them.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator

#: Exit statuses of an interrupted command, which the program ends at once (see module docstring).
INTERRUPTED_STATUSES = (130, 143)


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that ``finally`` blocks and output clean-up run."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


@contextlib.contextmanager
def ends_cleanly_when_interrupted() -> Iterator[None]:
    """Run the body; on Ctrl-C or SIGTERM stop the workers, say so in one line, and exit."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread (a library caller): leave signals alone
        yield
        return
    try:
        yield
    except KeyboardInterrupt:
        _end(130, "interrupted (Ctrl-C)")
    except Terminated:
        _end(143, "terminated (SIGTERM)")
    finally:
        signal.signal(signal.SIGTERM, previous)


def _end(status: int, what: str) -> None:  # noqa: RET503 - always raises
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up
    from bwdiag.trace.workers import stop_workers

    stop_workers()
    try:
        sys.stderr.write(f"bwdiag: {what}: stopped, no output written\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    raise SystemExit(status)
