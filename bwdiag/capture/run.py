"""``bwdiag run``: capture a few steps of an unmodified script, then analyse them.

One process (``bwdiag run script.py``): the script runs in this process under a
:class:`~bwdiag.capture.session.CaptureSession`; when it ends, the trace is analysed into the same
folder and the process exits as the script would have.

Several ranks: ``bwdiag run --nproc-per-node N`` starts ``torch.distributed.run`` with
``bwdiag run --rank-only`` in each worker and analyses after the launcher has exited (every rank is
finished, so nothing can race). Under a plain ``torchrun -m bwdiag run script.py`` there is no
parent of ours: rank 0 waits for every rank's done marker (see :mod:`bwdiag.capture.folder`) before
analysing.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from bwdiag.capture.folder import (
    PREFIX,
    default_out_dir,
    launch_time,
    prepare_out_dir,
    remove_if_empty,
    rank_trace_name,
    done_marker_name,
    say_line,
    unique_default,
    wait_for_ranks,
)
from bwdiag.capture.options import DEFAULT_RANK_TIMEOUT_S, CaptureOptions
from bwdiag.capture.report import analyze_traces, print_summary_prefixed
from bwdiag.capture.runner import ModuleNotRunnable, Target, check_target, ending_of, run_with
from bwdiag.capture.session import CaptureResult, CaptureSession
from bwdiag.capture.torch_import import when_imported
from bwdiag.errors import BwdiagError, OutputError


@dataclass(frozen=True)
class RunConfig:
    """Everything ``bwdiag run`` was asked to do, besides the target and its arguments."""

    options: CaptureOptions
    out: Path | None = None
    force: bool = False
    analyze: bool = True
    device_spec: Path | None = None
    nproc_per_node: int | None = None
    rank_only: bool = False
    rank_timeout_s: float = DEFAULT_RANK_TIMEOUT_S
    baseline: Path | None = None  # an earlier run to diff against once analysed



def run(target: Target, args: Sequence[str], config: RunConfig, *, argv: Sequence[str]) -> NoReturn:
    """Run ``target`` with ``args`` under capture and exit as Python would have.

    ``argv`` is bwdiag's own command line, recorded in each trace. Raises :class:`BwdiagError`
    (exit 2) before the script starts when the target or the output folder is unusable.
    """
    check_target(target)
    if config.baseline is not None and not Path(config.baseline).exists():
        raise BwdiagError(f"--baseline {config.baseline}: no such file or folder (an earlier run's output folder)")
    if config.nproc_per_node is not None:
        raise SystemExit(launch_ranks(target, args, config))

    rank, world, local_world = _env_ranks()
    analyses = config.analyze and not config.rank_only and rank == 0
    started = launch_time()
    if config.out is not None:
        out = Path(config.out)
    else:
        out = default_out_dir(target.label(), started)
        if world == 1:
            out = unique_default(out)
    created = not out.exists()
    out = prepare_out_dir(out, rank=rank, analyses=analyses, force=config.force)
    session = CaptureSession(config.options, out, argv=list(argv))
    cancel = [lambda: None]

    def attach(torch) -> None:
        try:
            session.attach(torch)
        except Exception as err:  # noqa: BLE001 - reported; the script's own import must succeed
            say_line(f"capture disabled: {err}")

    def before() -> None:
        cancel[0] = when_imported("torch", attach)

    def after(exc: BaseException | None) -> None:
        cancel[0]()
        if isinstance(exc, ModuleNotRunnable):  # nothing ran: Python's one line is all there is to say
            session.finish(ending_of(exc))
            remove_if_empty(out, created)
            return
        try:
            result = session.finish(ending_of(exc))
            if result.note:
                say_line(result.note)
            if world == 1 and result.trace is None:
                remove_if_empty(out, created, say_line)
                return
            if not analyses:
                return
            # Several ranks and no folder given: other nodes wrote to their own local folder.
            waited = world if (config.out is not None or local_world >= world) else local_world
            traces = _collect(out, result, waited, since=started, timeout_s=config.rank_timeout_s)
            _analyze_and_tell(out, traces, config)
        except Exception as err:  # noqa: BLE001 - the script's own exit status must survive
            say_line(f"could not finish the report: {type(err).__name__}: {err}")
            say_line(f"traces so far are in {out}; retry with: bwdiag analyze {out}")

    run_with(target, args, before=before, after=after)


def _env_ranks() -> tuple[int, int, int]:
    def num(name: str, default: int) -> int:
        try:
            return int(os.environ.get(name, default))
        except ValueError:
            return default

    world = num("WORLD_SIZE", 1)
    return num("RANK", 0), world, num("LOCAL_WORLD_SIZE", world)


def _collect(out: Path, mine: CaptureResult, world: int, *, since: float, timeout_s: float) -> list[Path]:
    if world <= 1:
        return [mine.trace] if mine.trace else []
    traces, missing = wait_for_ranks(out, world, since=since, timeout_s=timeout_s, say=say_line)
    if missing:
        say_line(
            f"rank(s) {', '.join(map(str, missing))} did not finish within {timeout_s:.0f} s; "
            "analysing the others"
        )
    return traces


def _analyze_and_tell(out: Path, traces: list[Path], config: RunConfig) -> None:
    if not traces:
        say_line(f"no trace to analyse; output folder: {out}")
        return
    diagnosis, outputs = analyze_traces(traces, out, force=config.force, device_spec=config.device_spec)
    print_summary_prefixed(diagnosis, outputs)  # ends with the json and html paths
    if config.baseline is not None:
        _diff_with_baseline(out, config)
    say_line(f"output folder: {out}")


def _diff_with_baseline(out: Path, config: RunConfig) -> None:
    """``bwdiag diff BASELINE OUT`` after the analysis, its summary prefixed like the rest; a diff
    that cannot be made is one line (the run itself went fine)."""
    from bwdiag import diff
    from bwdiag.diff.render import print_diff

    try:
        diff.check_output_dir(out, force=config.force)
        doc = diff.diff(config.baseline, out, device_spec=config.device_spec)
        outputs = diff.write_outputs(doc, out)
    except BwdiagError as err:
        say_line(f"no diff with the baseline: {err}")
        return
    buffer = io.StringIO()
    width = max(40, shutil.get_terminal_size().columns - len(PREFIX))
    print_diff(doc, outputs=outputs, file=buffer, width=width)
    for line in buffer.getvalue().rstrip("\n").splitlines():
        say_line(line)


def launch_ranks(target: Target, args: Sequence[str], config: RunConfig) -> int:
    """Start ``config.nproc_per_node`` ranks through ``torch.distributed.run`` on this node, wait
    for all of them, analyse their traces; return the launcher's exit status."""
    n = config.nproc_per_node
    assert n is not None
    if n < 1:
        raise BwdiagError(f"--nproc-per-node must be >= 1, got {n}")
    started = time.time()
    out = Path(config.out) if config.out else unique_default(default_out_dir(target.label(), started))
    out = prepare_out_dir(out, rank=0, analyses=config.analyze, force=config.force)
    stale = [rank_trace_name(r) for r in range(1, n) if (out / rank_trace_name(r)).exists()]
    if stale and not config.force:
        raise OutputError(f"{out} already holds {', '.join(stale)}; pass --force to overwrite")
    for r in range(n):
        for name in (rank_trace_name(r), done_marker_name(r)):
            (out / name).unlink(missing_ok=True)

    opts = config.options
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
        "-m", "bwdiag", "run", "--rank-only", "--force", "-o", str(out),
        f"--wait={opts.wait}", f"--warmup={opts.warmup}", f"--active={opts.active}",
        f"--step-on={opts.step_on}",
        "--with-stack" if opts.with_stack else "--no-stack",
        "--modules" if opts.with_modules else "--no-modules",
    ]
    if target.is_module:
        cmd.append("-m")
    cmd += ["--", target.name, *args]
    say_line(f"launching {n} ranks with torch.distributed.run; output folder: {out}")
    status = _wait_child(subprocess.Popen(cmd))
    if status < 0:  # killed by a signal: report it the way a shell does
        status = 128 - status
    if config.analyze:
        try:
            traces = [
                out / rank_trace_name(r)
                for r in range(n)
                if (out / done_marker_name(r)).exists() and (out / rank_trace_name(r)).exists()
            ]
            _analyze_and_tell(out, traces, config)
        except Exception as err:  # noqa: BLE001 - the launcher's exit status must survive
            say_line(f"could not finish the report: {type(err).__name__}: {err}")
            say_line(f"traces are in {out}; retry with: bwdiag analyze {out}")
    return status


def _wait_child(child: subprocess.Popen) -> int:
    """Wait for the launcher; Ctrl-C reaches it through the process group, so keep waiting for
    it to save and exit rather than killing it."""
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:
            continue
