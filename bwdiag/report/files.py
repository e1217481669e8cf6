"""Writing report files safely and opening them."""

from __future__ import annotations

import os
import sys
import tempfile
import webbrowser
from pathlib import Path

from bwdiag.errors import OutputError


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    Readers see either the old file or the complete new one, never a half-written file; on any
    failure the temporary file is removed and an :class:`OutputError` names the path.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as err:
        raise OutputError(f"cannot write {path}: {err.strerror or err}") from err
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(err, OSError):
            raise OutputError(f"cannot write {path}: {err.strerror or err}") from err
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def open_in_browser(path: Path) -> None:
    """Open a written report in the user's web browser (for ``--open``).

    On Linux without a display (an SSH session on a GPU node) no graphical browser can start,
    and Python's fallback would be a text browser taking over the terminal: that is refused with
    a message saying how to view the file instead. Raises :class:`OutputError` when the file does
    not exist or no browser can be started.
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise OutputError(f"cannot open {path}: no such file")
    if _headless():
        raise OutputError(
            f"no display to open a browser on; copy {path} to your machine and open it there"
        )
    if not webbrowser.open(path.as_uri()):
        raise OutputError(f"no web browser found to open {path}; open it by hand")


def _headless() -> bool:
    """Linux/BSD with neither an X11 nor a Wayland display."""
    if not sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return False
    return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
