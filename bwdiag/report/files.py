"""Writing report files safely and opening them."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
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


def open_in_browser(path: Path) -> str | None:
    """Open a written report in the user's web browser (for ``--open``).

    Returns ``None`` when a browser took the page, else one line saying why it could not be opened
    and where the report is: the report is written either way, so this is not an error (the
    caller prints the line and still exits 0). Raises :class:`OutputError` only when the file does
    not exist.

    * ``$BROWSER`` (a ``:``-separated list of commands, as Python's :mod:`webbrowser` and
      ``xdg-open`` read it; ``%s`` marks where the URL goes, else it is appended; a trailing ``&``
      starts the command in the background) is tried first, with or without a display.
    * Else, on Linux/BSD without ``$DISPLAY`` or ``$WAYLAND_DISPLAY`` (an SSH session on a GPU node)
      no graphical browser can start, and Python's fallback would be a text browser taking over the
      terminal: not tried.
    * With ``$DISPLAY`` (or ``$WAYLAND_DISPLAY``) set, the display's socket must answer before a
      browser is started: a browser started on a display nobody serves dies a moment later, after
      :func:`webbrowser.open` has already reported success.
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise OutputError(f"cannot open {path}: no such file")
    url = path.as_uri()
    where = f"the report is at {path}"
    chosen = os.environ.get("BROWSER", "")
    if chosen.strip():
        problems = []
        for command in (c for c in chosen.split(os.pathsep) if c.strip()):
            problem = _run_browser_command(command, url)
            if problem is None:
                return None
            problems.append(problem)
        return f"could not open the report with $BROWSER ({'; '.join(problems)}); {where}"
    if _headless():
        return (f"no display to open a browser on (set $BROWSER to choose a command); {where}; "
                "copy it to your machine and open it there")
    dead = _unreachable_display()
    if dead is not None:
        return f"could not open the report: {dead}; {where}"
    if not webbrowser.open(url):
        return f"no web browser found to open the report (set $BROWSER to choose one); {where}"
    return None


def _run_browser_command(command: str, url: str) -> str | None:
    """Run one ``$BROWSER`` entry on ``url``: ``None`` on success, else what went wrong."""
    try:
        argv = shlex.split(command)
    except ValueError as err:
        return f"{command!r}: {err}"
    background = bool(argv) and argv[-1] == "&"
    argv = argv[:-1] if background else argv
    if not argv:
        return f"{command!r}: no command"
    argv = [a.replace("%s", url) for a in argv] if any("%s" in a for a in argv) else [*argv, url]
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=background)
    except OSError as err:
        return f"{argv[0]}: {err.strerror or err}"
    if background:
        return None
    status = child.wait()
    return None if status == 0 else f"{argv[0]} exited with status {status}"


def _headless() -> bool:
    """Linux/BSD with neither an X11 nor a Wayland display."""
    if not _unix_desktop():
        return False
    return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _unix_desktop() -> bool:
    return sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd"))


#: How long the display's socket may take to accept a connection.
DISPLAY_CONNECT_TIMEOUT_S = 1.0


def _unreachable_display() -> str | None:
    """On Linux/BSD: why the display in ``$DISPLAY`` / ``$WAYLAND_DISPLAY`` cannot be used (no
    server listens on it), or ``None`` when one of them answers or cannot be checked."""
    if not _unix_desktop():
        return None
    problems = []
    for variable, address in (("WAYLAND_DISPLAY", _wayland_address()), ("DISPLAY", _x11_address())):
        value = os.environ.get(variable)
        if not value:
            continue
        if address is None:
            return None  # a form we cannot check (e.g. XQuartz's path): let the browser try
        if _answers(address):
            return None
        problems.append(f"no display server answers on {variable}={value}")
    return " and ".join(problems) or None


def _x11_address() -> tuple[int, object] | None:
    """The socket of ``$DISPLAY`` (``:0``, ``unix:0.0``, ``localhost:10.0`` under ssh -X)."""
    found = re.fullmatch(r"([^:/]*):(\d+)(?:\.\d+)?", os.environ.get("DISPLAY", "").strip())
    if not found:
        return None
    host, number = found.group(1), int(found.group(2))
    if host in ("", "unix"):
        return socket.AF_UNIX, f"/tmp/.X11-unix/X{number}"
    return socket.AF_INET, (host, 6000 + number)


def _wayland_address() -> tuple[int, object] | None:
    name = os.environ.get("WAYLAND_DISPLAY", "").strip()
    if not name:
        return None
    if not os.path.isabs(name):
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        if not runtime:
            return None
        name = os.path.join(runtime, name)
    return socket.AF_UNIX, name


def _answers(address: tuple[int, object]) -> bool:
    family, where = address
    candidates = [where]
    if family == socket.AF_UNIX and sys.platform.startswith("linux") and str(where).startswith("/tmp/.X11-unix/"):
        candidates.append("\0" + str(where))  # X servers also listen in the abstract namespace
    for target in candidates:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.settimeout(DISPLAY_CONNECT_TIMEOUT_S)
                sock.connect(target)
            return True
        except OSError:
            continue
    return False
