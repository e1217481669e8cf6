"""The local engine: the map in this machine's forked worker processes (``trace.load.map_files``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from bwdiag.errors import TraceError


@dataclass(frozen=True)
class Missing:
    """A rank file the map could not summarise, and why (one line naming the file)."""

    path: Path
    reason: str


def map_rank(path: Path, file_progress=None, jobs: int = 1, meanwhile=None, *, captures=None,
             device_spec: Path | None = None, keep: bool = False, job_ranks: int | None = None):
    """The map of one rank file: a ``reduce.RankMap``, or :class:`Missing` when the file cannot be read.

    ``file_progress``, ``jobs`` and ``meanwhile`` are ``trace.load_rank``'s (a single big file's
    chunks parsed in parallel); ``keep`` hands back the analysis and the rules' results as well;
    ``job_ranks``: the job's number of rank files (``reduce.summarize_rank``).
    """
    from bwdiag.diagnose.reduce import summarize_rank
    from bwdiag.trace import load_rank

    try:
        trace = load_rank(path, file_progress, jobs, meanwhile, graph_capture=captures)
    except TraceError as err:
        return Missing(Path(path), str(err))
    return summarize_rank(trace, device_spec=device_spec, keep=keep, job_ranks=job_ranks)


def run(files: Sequence[Path], *, device_spec: Path | None = None, graph_capture=None, keep: bool = False,
        progress: Callable[[], None] | None = None, file_progress=None, meanwhile=None,
        jobs: int | None = None) -> tuple[list, list[Missing]]:
    """The map over ``files`` in worker processes (``jobs``, default one per core): the ranks'
    ``RankMap`` s in file order and the files that are missing. ``progress()`` once per file done."""
    from bwdiag.trace.load import default_jobs, map_files

    captures = None
    if graph_capture:
        from bwdiag.trace.graphs import capture_files

        captures = capture_files(list(graph_capture))
    files = list(files)
    jobs = default_jobs(len(files)) if jobs is None else jobs
    work = functools.partial(map_rank, captures=captures, device_spec=device_spec, keep=keep,
                             job_ranks=len(files))
    maps, missing = [], []
    for result in map_files(files, work, jobs, file_progress, meanwhile):
        (missing if isinstance(result, Missing) else maps).append(result)
        if progress is not None:
            progress()
    return maps, missing
