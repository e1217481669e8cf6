"""The Ray engine: one Ray task per rank file, a bounded number in flight, summaries streamed back.

``bwdiag analyze PATHS --engine ray [--address auto|ray://host:10001]``. Without ``--address`` a
local Ray instance is started for the run (and stopped after it); with one, the tasks go to that
cluster, whose workers need bwdiag installed (``pip install "bwdiag[ray]"``) and must be able to read
the paths. Each task runs the same map as the local engine (:func:`bwdiag.engine.local.map_rank`)
and returns one ``RankDigest`` (kilobytes to a few MB), never the rank's events; at most
``max_in_flight`` tasks (default: the cluster's CPUs) are submitted at a time, so neither the
cluster's object store nor this process ever holds more than that many summaries in transit. A task
whose worker dies (killed for memory, node lost) is not retried: its rank is reported as missing
with the reason, and the rest of the job is diagnosed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, Sequence

from bwdiag.engine.local import Missing, map_rank
from bwdiag.errors import BwdiagError

INSTALL_HINT = 'pip install "bwdiag[ray]"'


class EngineError(BwdiagError):
    """The Ray engine cannot run: Ray missing, or the cluster cannot be reached."""


def require():
    """The ``ray`` module, or an :class:`EngineError` (exit 2) naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise EngineError(f"--engine ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def run(files: Sequence[Path], *, address: str | None = None, device_spec: Path | None = None,
        graph_capture=None, progress: Callable[[], None] | None = None, max_in_flight: int | None = None,
        work: Callable = map_rank) -> tuple[list, list[Missing]]:
    """The map over ``files`` as Ray tasks: the ranks' ``RankMap`` s in file order and the missing
    ranks. Uses the Ray instance this process already joined, else joins ``address``, else starts a
    local one (stopped again at the end). ``progress()`` once per rank done. ``work``: the map
    function (tests pass one that kills its worker)."""
    ray = require()
    started = False
    if not ray.is_initialized():
        try:
            with _pythonpath(None if address else _package_root()):
                ray.init(address=address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as err:
            where = address or "a local instance"
            raise EngineError(f"--engine ray: cannot start or reach Ray at {where} ({err})") from None
        started = True
    try:
        return _run(ray, list(files), device_spec, graph_capture, progress, max_in_flight, work)
    finally:
        if started:
            ray.shutdown()


def _run(ray, files, device_spec, graph_capture, progress, max_in_flight, work):
    captures = None
    if graph_capture:
        from bwdiag.trace.graphs import capture_files

        captures = capture_files(list(graph_capture))
    from bwdiag.hardware.calibrate import readings_of_this_run

    readings = readings_of_this_run()  # every rank placed against the driver's calibration, not its worker's
    task = ray.remote(num_cpus=1, max_retries=0)(_task)
    limit = max_in_flight or max(1, int(ray.cluster_resources().get("CPU", 1)))
    results: list = [None] * len(files)
    pending: dict = {}
    queue = list(enumerate(files))
    queue.reverse()
    while queue or pending:
        while queue and len(pending) < limit:
            i, path = queue.pop()
            pending[task.remote(work, str(path), captures, device_spec, len(files), readings)] = i
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            i = pending.pop(ref)
            results[i] = _get(ray, ref, files[i])
            if progress is not None:
                progress()
    maps = [r for r in results if not isinstance(r, Missing)]
    return maps, [r for r in results if isinstance(r, Missing)]


def _task(work, path: str, captures, device_spec, job_ranks: int, readings=None):
    from bwdiag.hardware.calibrate import given_readings

    with given_readings(readings):
        return work(Path(path), captures=captures, device_spec=device_spec, job_ranks=job_ranks)


def _get(ray, ref, path: Path):
    """A task's result, or the rank as :class:`Missing` when its worker died or the task failed."""
    from ray import exceptions as rx

    try:
        return ray.get(ref)
    except rx.RayTaskError as err:  # the map raised: a bug, or a file that breaks an assumption
        cause = err.cause if getattr(err, "cause", None) is not None else err
        return Missing(path, f"{path}: the analysis failed on Ray ({type(cause).__name__}: {cause})")
    except rx.RayError as err:  # WorkerCrashedError, OutOfMemoryError, NodeDiedError, ObjectLostError ...
        return Missing(path, f"{path}: its Ray worker died before finishing ({type(err).__name__})")


@contextlib.contextmanager
def _pythonpath(value: str | None):
    """``PYTHONPATH`` set to ``value`` while a local Ray starts (its raylet and workers inherit this
    process's environment; a runtime_env would cost an agent and seconds per worker), then restored."""
    if value is None:
        yield
        return
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


def _package_root() -> str:
    """The folder bwdiag is imported from, ahead of the caller's PYTHONPATH: a local Ray's workers
    import the same bwdiag (a checkout run with ``python -m bwdiag`` is not installed)."""
    root = str(Path(__file__).resolve().parents[2])
    rest = os.environ.get("PYTHONPATH")
    return root + (os.pathsep + rest if rest else "")
