"""Where trace files come from, and the one place that opens them.

``bwdiag analyze`` takes local files and folders, glob patterns (``'traces/rank*.json.gz'``) and
fsspec URLs (``s3://bucket/run42/``, ``gs://…``, ``memory://…``; ``file://`` is read as the local path
it names). :func:`list_sources` expands them into trace files: a local file is a :class:`~pathlib.Path`,
a remote one a :class:`UrlPath`, which has the few ``Path`` methods the loader uses (``name``,
``parent``, ``stat``, ``open``, ``read_bytes``, ``is_dir`` …), pickles as its URL (a worker process or a
Ray task opens it again through fsspec) and prints as its URL. :func:`open_source` and
:func:`source_size` open and measure either kind; ``load_rank`` accepts both.

fsspec and the cloud filesystems are the ``bwdiag[cloud]`` extra (fsspec, s3fs, gcsfs): a URL without
them is refused in one line naming it.
"""

from __future__ import annotations

import glob as _glob
import re
from pathlib import Path
from typing import IO, Any, Iterable, Union
from urllib.parse import unquote, urlparse

from bwdiag.errors import TraceError

#: File endings of trace files; ``diagnosis.json`` (bwdiag's own output) is never one.
TRACE_SUFFIXES = (".json", ".json.gz")
# Folder beside a trace that holds its CUDA-graph capture-time traces (see bwdiag.trace.graphs).
CAPTURE_DIR = "capture_traces"
CLOUD_HINT = 'pip install "bwdiag[cloud]"'

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_GLOB = re.compile(r"[*?\[]")


def is_url(text: str) -> bool:
    """Whether ``text`` is a URL (``scheme://…``) rather than a local path."""
    return bool(_URL.match(text))


def _filesystem(url: str):
    """The fsspec filesystem and in-filesystem path of ``url``; a one-line TraceError when fsspec or
    the protocol's package is missing, or the protocol is unknown."""
    try:
        import fsspec
    except ImportError:
        raise TraceError(f"{url}: reading a URL needs fsspec, which is not installed; {CLOUD_HINT}") from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as err:
        raise TraceError(f"{url}: fsspec cannot open {url.split('://')[0]}:// URLs here ({_first_line(err)}); "
                         f"{CLOUD_HINT}") from None
    except ValueError as err:
        raise TraceError(f"{url}: not a URL fsspec can open ({_first_line(err)})") from None


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


class _Stat:
    __slots__ = ("st_size",)

    def __init__(self, size: int) -> None:
        self.st_size = size


class UrlPath:
    """A file or folder behind an fsspec URL, with the ``Path`` methods the trace loader uses."""

    __slots__ = ("url", "_fs", "_path")

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/") if not url.endswith(":///") else url
        self._fs = None
        self._path = ""

    def _open_fs(self):
        if self._fs is None:
            self._fs, self._path = _filesystem(self.url)
        return self._fs, self._path

    def __reduce__(self):  # a worker or a Ray task opens the filesystem again
        return (UrlPath, (self.url,))

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"UrlPath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UrlPath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(("UrlPath", self.url))

    def __truediv__(self, name: str) -> UrlPath:
        return UrlPath(f"{self.url}/{name}")

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    @property
    def parent(self) -> UrlPath:
        return UrlPath(self.url.rsplit("/", 1)[0])

    def resolve(self) -> UrlPath:
        return self

    def exists(self) -> bool:
        fs, path = self._open_fs()
        return bool(fs.exists(path))

    def is_dir(self) -> bool:
        fs, path = self._open_fs()
        return bool(fs.isdir(path))

    def is_file(self) -> bool:
        fs, path = self._open_fs()
        return bool(fs.isfile(path))

    def stat(self) -> _Stat:
        fs, path = self._open_fs()
        try:
            return _Stat(int(fs.size(path) or 0))
        except FileNotFoundError:
            raise FileNotFoundError(self.url) from None

    def open(self, mode: str = "rb") -> IO[bytes]:
        fs, path = self._open_fs()
        return fs.open(path, mode)

    def read_bytes(self) -> bytes:
        fs, path = self._open_fs()
        if fs.isdir(path):
            raise IsADirectoryError(self.url)
        return fs.cat_file(path)

    def rglob(self, pattern: str = "*") -> list[UrlPath]:
        """Every file under this folder (only ``"*"`` is supported)."""
        fs, path = self._open_fs()
        return [_url_of(fs, p) for p in sorted(fs.find(path))]

    def relative_to(self, other: UrlPath) -> Path:
        return Path(self.url[len(other.url):].lstrip("/"))


#: A trace file as :func:`list_sources` returns it.
Source = Union[Path, UrlPath]


def _url_of(fs, path: str) -> UrlPath:
    url = fs.unstrip_protocol(path)
    return UrlPath(url)


def as_source(raw: Any) -> Source:
    """A path given by the user as a :data:`Source`: ``file://`` URLs become local paths."""
    if isinstance(raw, (Path, UrlPath)):
        return raw
    text = str(raw)
    if text.startswith("file://"):
        return Path(unquote(urlparse(text).path))
    return UrlPath(text) if is_url(text) else Path(text)


def open_source(path: Source) -> IO[bytes]:
    """The file opened for binary reading (OSError if it cannot be)."""
    if isinstance(path, UrlPath):
        return path.open("rb")
    return open(path, "rb")


def source_size(path: Source) -> int:
    """The file's size in bytes, as stored (compressed for .gz)."""
    return path.stat().st_size


#: Files bwdiag writes beside traces that are not traces: the steps a capture timed after its window.
CLOCK_SUFFIX = ".clock.json"


def _is_trace(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and name != "diagnosis.json" and not name.endswith(CLOCK_SUFFIX)


def _matches(raw: str, missing: str) -> list[Source]:
    """The trace files a glob pattern matches (sorted), local or behind a URL."""
    text = raw[len("file://"):] if raw.startswith("file://") else raw
    if is_url(text):
        fs, pattern = _filesystem(text)
        found: list[Source] = [_url_of(fs, p) for p in sorted(fs.glob(pattern)) if fs.isfile(p)]
    else:
        found = [Path(p) for p in sorted(_glob.glob(text, recursive=True)) if Path(p).is_file()]
    found = [f for f in found if _is_trace(f.name)]
    if not found:
        raise TraceError(f"{raw}: no trace file (*.json or *.json.gz) matches this pattern; {missing}")
    return found


def list_sources(paths: Iterable[Any], *, missing: str, empty: str, skip_dir: str | None = None) -> list[Source]:
    """Files as given, folders expanded into their trace files (sorted, recursively), glob patterns
    into the files they match, each file once.

    ``missing`` / ``empty`` end the one-line errors for a path that does not exist and a folder with
    no trace file; files under a sub-folder named ``skip_dir`` are left out of a folder's expansion.
    """
    files: list[Source] = []
    for raw in paths:
        if isinstance(raw, str) and _GLOB.search(raw) and not Path(raw).exists():
            files.extend(_matches(raw, missing))
            continue
        path = as_source(raw)
        try:
            exists = path.exists()
        except OSError as err:
            raise TraceError(f"{path}: cannot be reached ({err.strerror or _first_line(err)})") from None
        if not exists:
            raise TraceError(f"{path}: {missing}")
        if not path.is_dir():
            files.append(path)
            continue
        found = sorted((p for p in path.rglob("*") if (isinstance(p, UrlPath) or p.is_file()) and _is_trace(p.name)
                        and (skip_dir is None or skip_dir not in p.relative_to(path).parts[:-1])), key=str)
        if not found:
            raise TraceError(f"{path}: {empty}")
        files.extend(found)
    unique: dict[Any, Source] = {}  # a file named twice (or inside a folder also given) is read once
    for f in files:
        unique.setdefault(f.resolve(), f)
    return list(unique.values())
