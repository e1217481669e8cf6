"""The whole offline path in three calls: analyze → write_outputs → print_summary.

``bwdiag analyze``, ``bwdiag run`` and ``bwdiag.profile`` all go through here, so a folder written by
a capture is reproduced exactly by ``bwdiag analyze FOLDER``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from bwdiag.diagnose.model import Diagnosis
from bwdiag.errors import OutputError

if TYPE_CHECKING:
    from bwdiag.report.annotated_trace import AnnotatedTarget

OUTPUT_NAMES = {"json": "diagnosis.json", "html": "report.html"}


def analyze(paths: Sequence[str | os.PathLike], *, device_spec: Path | None = None,
            progress: bool = False, graph_capture: Sequence[str | os.PathLike] | None = None,
            annotated: AnnotatedTarget | None = None, engine: str = "local",
            address: str | None = None) -> Diagnosis:
    """Load the traces under ``paths`` (files and/or folders of rank files) and diagnose them.

    ``graph_capture``: capture-time traces (files or folders) that price CUDA/HIP graph replays;
    without it, a ``capture_traces/`` folder beside each trace is used when there is one.
    ``annotated``: where to write the traces back with bwdiag's classification
    (:func:`plan_annotated_trace`); the files written are in ``annotated.written`` afterwards.
    ``engine``: where each rank is summarised (:mod:`bwdiag.engine`): ``"local"`` worker processes,
    or ``"ray"`` tasks (``address``: the cluster, default a local Ray instance); the diagnosis is the same.
    """
    results: list | None = [] if annotated is not None else None
    diagnosis, analyses = _analyze(paths, device_spec=device_spec, progress=progress, graph_capture=graph_capture,
                                   results=results, engine=engine, address=address)
    if annotated is not None:
        from bwdiag.report import annotated_trace

        annotated.written[:] = annotated_trace.write(annotated, diagnosis, analyses, results)
    return diagnosis


def require_engine(engine: str, *, annotated: bool = False) -> None:
    """Fail before any work (exit 2, one line) when ``engine`` cannot run: Ray not installed
    (naming ``pip install "bwdiag[ray]"``), or ``--annotated-trace``, which needs every rank's
    events in this process, asked of Ray."""
    if engine == "ray":
        from bwdiag.engine.ray_engine import EngineError, require

        require()
        if annotated:
            raise EngineError("--annotated-trace needs every rank's events in this process: "
                              "use it with --engine local")


def plan_annotated_trace(target: str | os.PathLike, paths: Sequence[str | os.PathLike], *,
                         force: bool = False) -> AnnotatedTarget:
    """Check, before any work, where ``--annotated-trace`` writes the annotated copy of each trace
    under ``paths`` (a file for one trace, a folder for several); see :mod:`bwdiag.report.annotated_trace`."""
    from bwdiag.report.annotated_trace import plan
    from bwdiag.trace import find_trace_files

    return plan(target, find_trace_files(list(paths)), force=force)


def _analyze(paths, *, device_spec, progress, graph_capture, results=None, engine="local", address=None):
    """The diagnosis and, when ``results`` asks for the findings rules' results (a list that
    receives them, see :func:`~bwdiag.diagnose.reduce.reduce`), the per-rank analyses it was made
    from (else ``[]``). Map per rank on ``engine``, reduce here."""
    from bwdiag.trace import find_trace_files

    from bwdiag.hardware.calibrate import one_reading

    files = find_trace_files(list(paths))
    with _progress(progress, files) as bar, one_reading():
        if engine == "ray":
            from bwdiag.engine import ray_engine

            bar.phase(f"analysing {len(files)} rank(s) on Ray", total=len(files))
            maps, missing = ray_engine.run(files, address=address, device_spec=device_spec,
                                           graph_capture=graph_capture, progress=bar.file_done)
        else:
            from bwdiag.engine import local

            maps, missing = local.run(files, device_spec=device_spec, graph_capture=graph_capture,
                                      keep=results is not None, progress=bar.file_done,
                                      file_progress=bar.file_bytes, meanwhile=_import_analysis)
        bar.phase("combining the ranks")
        from bwdiag.diagnose.reduce import reduce

        return reduce(maps, [m.reason for m in missing], device_spec=device_spec, results_out=results)


def require_hta() -> None:
    """Fail before any work (exit 2, one line naming ``pip install "bwdiag[hta]"``) when ``--hta``
    is asked for and HTA is not installed."""
    from bwdiag.trace.hta_bridge import require

    require()


def compare_with_hta(paths: Sequence[str | os.PathLike], diagnosis: Diagnosis, *,
                     progress: bool = False) -> tuple[Diagnosis, dict]:
    """Run HTA's own analyses on the files ``analyze(paths)`` read and set them beside ``diagnosis``.

    Returns the diagnosis (with a warning added when HTA, or one of its analyses, fails on these
    traces: bwdiag's own figures never depend on HTA) and the ``hta`` section of diagnosis.json.
    """
    import dataclasses

    from bwdiag.report import hta_view
    from bwdiag.trace import find_trace_files
    from bwdiag.trace import hta_bridge

    files = find_trace_files(list(paths))
    try:
        with _progress(progress, files) as bar:
            bar.phase("running HTA's analyses")
            result = hta_bridge.run_analyses(files)
    except Exception as err:  # noqa: BLE001 - HTA failing on a trace must not cost the user bwdiag's report
        hint = f"; {hta_bridge.INSTALL_HINT}" if isinstance(err, ImportError) else ""
        message = f"HTA could not analyse these traces ({hta_bridge.describe(err)}){hint}"
        section = hta_view.failed(message, hta_bridge.version())
    else:
        section = hta_view.compare(diagnosis, result)
    if section["errors"]:
        diagnosis = dataclasses.replace(diagnosis, warnings=(*diagnosis.warnings, *section["errors"]))
    return diagnosis, section


def _import_analysis() -> None:
    """Import what follows the load (pandas, the diagnosis, the report: ~0.6 s). ``load_traces``
    calls this while worker processes parse a big trace, so the two overlap."""
    import bwdiag.diagnose.build  # noqa: F401
    import bwdiag.diagnose.findings  # noqa: F401
    import bwdiag.report.html  # noqa: F401
    import bwdiag.report.json_out  # noqa: F401
    import bwdiag.trace.link  # noqa: F401


def check_output_dir(out_dir: Path, *, force: bool = False, names: Iterable[str] | None = None) -> None:
    """Refuse, before any work, an output folder that would be overwritten or cannot be written.

    ``names`` are the files the command writes there (default: diagnosis.json and report.html).
    Nothing is created here, so a refused or failed analysis leaves no empty folder behind.
    """
    out_dir = Path(out_dir)
    if out_dir.exists():
        if not out_dir.is_dir():
            raise OutputError(f"{out_dir}: exists and is not a folder; choose another -o/--out")
        existing = [n for n in (OUTPUT_NAMES.values() if names is None else names) if (out_dir / n).exists()]
        if existing and not force:
            raise OutputError(
                f"{out_dir}: already holds {', '.join(existing)}; pass --force to overwrite or choose another -o/--out"
            )
        target = out_dir
    else:
        target = next((p for p in out_dir.absolute().parents if p.exists()), Path("/"))
        if not target.is_dir():
            raise OutputError(f"{out_dir}: {target} is not a folder; choose another -o/--out")
    if not os.access(target, os.W_OK | os.X_OK):
        raise OutputError(f"{out_dir}: {target} is not writable; choose another -o/--out")
    _probe_writable(out_dir, target)


def _probe_writable(out_dir: Path, target: Path) -> None:
    """Create and remove a scratch folder in ``target``: the permission bits alone miss read-only
    mounts, full disks and (for root) pseudo-filesystems, which would only fail after the analysis."""
    try:
        probe = tempfile.mkdtemp(prefix=".bwdiag-probe-", dir=target)
    except OSError as err:
        raise OutputError(
            f"{out_dir}: cannot write in {target} ({err.strerror or err}); choose another -o/--out"
        ) from None
    os.rmdir(probe)


def write_outputs(diagnosis: Diagnosis, out_dir: Path, *, force: bool = False,
                  hta: dict | None = None) -> dict[str, Path]:
    """Write ``diagnosis.json`` and ``report.html`` into ``out_dir``, each atomically.

    ``hta``: the section :func:`compare_with_hta` returned, added to both (``--hta``).
    """
    from bwdiag.report.files import write_atomic
    from bwdiag.report.html import render_html
    from bwdiag.report.json_out import render_json

    out_dir = Path(out_dir)
    check_output_dir(out_dir, force=force)
    # Render both before writing either: a rendering error leaves no half-set of outputs behind.
    payload = {"json": render_json(diagnosis), "html": render_html(diagnosis, hta=hta).encode("utf-8")}
    if hta is not None:
        from bwdiag.report.hta_view import add_to_json

        payload["json"] = add_to_json(payload["json"], hta)
    created = [p for p in (out_dir, *out_dir.parents) if not p.exists()]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        _remove_created([], created)
        raise OutputError(f"{out_dir}: cannot create the output folder ({err.strerror or err})") from None
    outputs: dict[str, Path] = {}
    new_files: list[Path] = []
    try:
        for key, data in payload.items():
            path = out_dir / OUTPUT_NAMES[key]
            existed = path.exists()
            try:
                write_atomic(path, data)
            except OSError as err:
                raise OutputError(f"{path}: cannot be written ({err.strerror or err})") from None
            if not existed:
                new_files.append(path)
            outputs[key] = path
    except BaseException:
        # A failed or interrupted write leaves nothing of this run behind: not one file of the pair,
        # not the folder made for it (files that were there before and got replaced stay replaced).
        _remove_created(new_files, created)
        raise
    return outputs


def _remove_created(files: list[Path], folders: list[Path]) -> None:
    for f in files:
        try:
            f.unlink()
        except FileNotFoundError:
            pass
    for d in folders:  # innermost first
        try:
            d.rmdir()
        except OSError:
            break


def print_summary(diagnosis: Diagnosis, outputs: dict[str, Path] | None = None, file=None,
                  hta: dict | None = None, **style) -> None:
    """The terminal verdict: time by bound, top findings and kernels, coverage, where the files are
    (with ``hta``: HTA's figures beside bwdiag's before the file paths). ``style``: ``width`` and
    ``brand`` of :func:`bwdiag.report.terminal.print_summary`."""
    from bwdiag.report.terminal import print_summary as _print

    if hta is None:
        _print(diagnosis, outputs=outputs, file=file, **style)
        return
    from bwdiag.report.hta_view import print_terminal

    _print(diagnosis, outputs=None, file=file, **style)
    print_terminal(hta, outputs, file=file)


class _progress:
    """A rich progress bar on stderr for loads and analyses that take over a second.

    Silent unless asked (the CLI asks when stderr is a terminal) and until :attr:`DELAY` seconds have
    passed, so quick runs print nothing extra. A single file is tracked by bytes read, several by
    files loaded; then a spinner while the analysis runs. The bar is transient: it leaves no trace.
    """

    DELAY = 1.0

    def __init__(self, enabled: bool, files: Sequence[Path]):
        import threading

        self.enabled = enabled
        self._lock = threading.Lock()
        self._bar = None
        self._task = None
        self._closed = False
        self._timer = None
        if len(files) == 1:
            self._desc, self._total, self._done = f"reading {Path(files[0]).name}", None, 0
        else:
            self._desc, self._total, self._done = f"loading {len(files)} traces", len(files), 0

    def __enter__(self) -> _progress:
        if self.enabled:
            import threading

            self._timer = threading.Timer(self.DELAY, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with self._lock:
            if self._closed:
                return
            self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self._desc, total=self._total, completed=self._done)

    def _update(self, **fields) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.update(self._task, **fields)

    def file_done(self) -> None:
        """One file of a multi-file load is done."""
        self._done += 1
        self._update(completed=self._done)

    def file_bytes(self, done: int, total: int) -> None:
        """``done`` of ``total`` bytes of a single file read."""
        self._done, self._total = done, total
        self._update(completed=done, total=total)

    def phase(self, text: str, total: int | None = None) -> None:
        """A new phase: show ``text`` with a spinner (no known end), or a bar of ``total`` steps
        (:meth:`file_done` counts them)."""
        self._desc, self._done, self._total = text, 0, total
        self._update(description=text, completed=0, total=total)

    def __exit__(self, *exc):
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
            if self._bar is not None:
                self._bar.stop()
        return False
