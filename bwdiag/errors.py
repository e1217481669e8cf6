"""The one error family bwdiag raises for bad input; the CLI prints it as one line, exit status 2."""

from __future__ import annotations


class BwdiagError(Exception):
    """A problem the user can act on: bad input, unwritable output, unknown device.

    ``str(err)`` is the whole message: it names the file and the problem, and the fix when there is one.
    """

    exit_code = 2


class TraceError(BwdiagError):
    """A trace file or folder that cannot be read as a torch.profiler / Kineto trace."""


class OutputError(BwdiagError):
    """An output path that cannot be written."""


class DeviceSpecError(BwdiagError):
    """A device spec override that cannot be used."""


class NoDiagnosis(BwdiagError, AttributeError):
    """``prof.diagnosis`` read where there is none; the message says why and what to change.

    Also an AttributeError, so ``getattr(prof, "diagnosis", None)`` and ``hasattr`` keep working.
    """


class MissingExtra(BwdiagError, ImportError):
    """An optional framework an integration needs is not installed; the message names the extra.

    Also an ImportError, so ``try: import bwdiag.integrations.lightning except ImportError`` works.
    """
