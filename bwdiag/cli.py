"""The ``bwdiag`` command line: thin click commands over the library."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from bwdiag._version import __version__
from bwdiag.capture.options import (
    DEFAULT_ACTIVE,
    DEFAULT_RANK_TIMEOUT_S,
    DEFAULT_WAIT,
    DEFAULT_WARMUP,
    STEP_ON_HELP,
)
from bwdiag.errors import BwdiagError


#: Set by a command after which the process may end without freeing its objects (console_main).
_exit_without_cleanup = False


def console_main() -> None:
    """The ``bwdiag`` program (and ``python -m bwdiag``): :func:`main`, standalone.

    After a successful ``bwdiag analyze`` the process ends with ``os._exit(0)`` once stdout and
    stderr are flushed: its outputs are written and closed and its worker pool is shut down, and
    freeing the interpreter's objects one by one (pandas' modules, the trace tables) would add
    ~0.1 s to a 2 s run. (mypy ends the same way.) ``bwdiag run`` never does: the user's script's
    atexit handlers must run, as under ``python script.py``.
    """
    from bwdiag.interrupts import INTERRUPTED_STATUSES

    try:
        main()
    except SystemExit as end:
        interrupted = end.code in INTERRUPTED_STATUSES and _exit_without_cleanup
        if interrupted or (_exit_without_cleanup and end.code in (0, None)):
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(end.code or 0)
        raise


class _Group(click.Group):
    """Turns a BwdiagError into one line on stderr and exit status 2: no traceback for bad input."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BwdiagError as err:
            click.echo(f"bwdiag: error: {err}", err=True)
            sys.exit(err.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="bwdiag")
def main() -> None:
    """Why is my PyTorch step slow, and what should I change?"""


# -- device ceilings -------------------------------------------------------------------------


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the full table as JSON.")
def devices(as_json: bool) -> None:
    """List the device ceilings bwdiag knows (dense peaks, one-direction interconnect)."""
    from bwdiag.cli_views import devices_json, devices_table

    click.echo(devices_json() if as_json else devices_table())


@main.command()
@click.option("--flops", "flops", required=True, help="FLOPs of the work: 2.1e12, 4G, 1.5T ...")
@click.option("--bytes", "bytes_", required=True, help="Bytes moved to/from memory: 3e8, 96M, 1Gi ...")
@click.option("--time", "time_", default=None, help="Measured time: seconds or 440us / 0.44ms.")
@click.option("--device", "device", required=True, help="A device from `bwdiag devices` (or a driver name), or cpu: this machine as `bwdiag calibrate --device cpu` measured it.")
@click.option("--dtype", default="bf16", show_default=True, help="fp64 fp32 tf32 bf16 fp16 fp8 int8")
@click.option("--vector", is_flag=True, help="Vector units, not tensor cores.")
def roofline(flops: str, bytes_: str, time_: str | None, device: str, dtype: str, vector: bool) -> None:
    """Place work on a device's roofline: intensity, ceiling, bound, best time, % of ceiling."""
    from bwdiag.cli_views import roofline_report

    click.echo(roofline_report(flops, bytes_, time_, device, dtype, tensor=not vector))


@main.command()
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N")
@click.option("--quick", is_flag=True, help="A ~2 s measurement (smaller arrays and GEMMs).")
def calibrate(device: str, quick: bool) -> None:
    """Measure this machine's memory bandwidth and GEMM FLOP/s, and cache them."""
    from bwdiag.cli_views import calibrate_report

    click.echo(calibrate_report(device, quick=quick))


# -- offline analysis ------------------------------------------------------------------------

_DEVICE_SPEC_HELP = (
    "JSON file of device ceilings laid over the trace's device (spec_source \"user\"): one object from "
    "`bwdiag devices --json`, edited, or just the fields to change, e.g. {\"memory_bandwidth\": 3.0e12, "
    "\"tensor_flops\": {\"bf16\": 800e12}}. \"base\": \"<name from bwdiag devices>\" starts from that device "
    "instead. Figures per device. Keys: tensor_flops, vector_flops (dtype -> dense FLOP/s; fp64 fp32 tf32 bf16 "
    "fp16 fp8 int8; merged into the device's), memory_bandwidth (B/s), interconnect_bandwidth (B/s, one "
    "direction, or null), name, vendor, kind, sm_count, memory_gb, memory_bytes, compute_capability, "
    "interconnect, notes, sources, devices_per_package (figures are divided by it), base; spec_source and "
    "matched_from are ignored; any other key is refused. README: Device ceilings."
)


def _default_out(paths: tuple[str, ...]) -> Path:
    first = Path(paths[0].rstrip("/"))
    while any(c in first.name for c in "*?[") and first.name != first.parent.name:  # a glob: its folder
        first = first.parent
    stem = first.name
    for suffix in (".gz", ".json", ".pt.trace"):
        stem = stem.removesuffix(suffix)
    return Path(f"bwdiag-{stem or 'trace'}")


@main.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path),
              help="Output folder for diagnosis.json and report.html [default: ./bwdiag-<trace name>].")
@click.option("--device-spec", type=click.Path(path_type=Path), metavar="FILE", help=_DEVICE_SPEC_HELP)
@click.option("--force", is_flag=True, help="Overwrite outputs already in the output folder.")
@click.option("--open", "open_report", is_flag=True, help="Open report.html in a browser when done ($BROWSER if set).")
@click.option("--graph-capture", "graph_capture", multiple=True, type=click.Path(path_type=Path),
              metavar="FILE", help="Capture-time trace (or folder of them) that prices CUDA/HIP graph replays "
                                   "[default: capture_traces/ beside the trace, as vLLM writes it]. Repeatable.")
@click.option("--hta", "with_hta", is_flag=True,
              help="Also run HTA's own analyses (temporal breakdown, comm/comp overlap, kernel breakdown) "
                   'on the same files and show them beside bwdiag\'s, differences explained. Slower; needs '
                   'pip install "bwdiag[hta]".')
@click.option("--summary-md", "summary_md", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="Also write a short Markdown summary (verdict, step time, top findings with savings) for CI "
                   "job summaries and PR comments; appended to FILE when it exists, e.g. $GITHUB_STEP_SUMMARY.")
@click.option("--annotated-trace", "annotated_trace", type=click.Path(path_type=Path), metavar="FILE",
              help="Also write the trace back with bwdiag's classification, for ui.perfetto.dev / chrome://tracing: "
                   "bound, % of ceiling, FLOPs, bytes and finding ids in each kernel's args, a time-by-bound counter "
                   "and one slice per finding on a 'bwdiag' process. FILE.json or FILE.json.gz; a folder for several "
                   "ranks (one file per rank). Refused if it exists, unless --force.")
@click.option("--ranks", "ranks_spec", metavar="SPEC",
              help="Analyse only these ranks of a folder of rank files, e.g. 0-7,128,1023.")
@click.option("--sample", type=int, metavar="N",
              help="Analyse N ranks of a big job: spread across its nodes, plus the slowest found by a quick "
                   "first pass over step markers (ProfilerStep spans). The report says which and why.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where each rank is summarised: this machine's worker processes, or one Ray task per rank "
                   'file (pip install "bwdiag[ray]"). The diagnosis is the same.')
@click.option("--address", metavar="ADDR", default=None,
              help="With --engine ray: the Ray cluster (auto, ray://host:10001) [default: start a local Ray].")
def analyze(traces: tuple[str, ...], out_dir: Path | None, device_spec: Path | None, force: bool,
            open_report: bool, graph_capture: tuple[Path, ...], with_hta: bool,
            summary_md: Path | None = None, annotated_trace: Path | None = None,
            ranks_spec: str | None = None, sample: int | None = None,
            engine: str = "local", address: str | None = None) -> None:
    """Diagnose saved torch.profiler traces: files (.json / .json.gz), folders of rank files, glob
    patterns ('traces/rank*.json.gz') or fsspec URLs (s3://, gs://, file://; pip install "bwdiag[cloud]")."""
    from bwdiag import pipeline
    from bwdiag.interrupts import ends_cleanly_when_interrupted

    out_dir = out_dir or _default_out(traces)
    pipeline.check_output_dir(out_dir, force=force)  # fail before the (long) analysis
    selection = None
    if ranks_spec is not None or sample is not None:
        from bwdiag.trace import find_trace_files
        from bwdiag.trace.select import select

        files, selection = select(find_trace_files(list(traces)), ranks=ranks_spec, sample=sample)
        traces = tuple(files)
    annotated = pipeline.plan_annotated_trace(annotated_trace, traces, force=force) if annotated_trace else None
    if with_hta:
        pipeline.require_hta()
    if address is not None and engine != "ray":
        raise click.UsageError("--address needs --engine ray")
    pipeline.require_engine(engine, annotated=annotated is not None)
    global _exit_without_cleanup
    _exit_without_cleanup = True  # an interrupted analysis ends at once (bwdiag.interrupts)
    with ends_cleanly_when_interrupted() as interrupts:
        diagnosis = pipeline.analyze(traces, device_spec=device_spec, progress=sys.stderr.isatty(),
                                     graph_capture=graph_capture or None, annotated=annotated,
                                     engine=engine, address=address)
        if selection is not None:
            diagnosis = _with_selection(diagnosis, selection)
        hta = None
        if with_hta:
            diagnosis, hta = pipeline.compare_with_hta(traces, diagnosis, progress=sys.stderr.isatty())
        with interrupts.writing():
            outputs = pipeline.write_outputs(diagnosis, out_dir, force=True, hta=hta)
    pipeline.print_summary(diagnosis, outputs, hta=hta, file=sys.stdout)  # the command's output: `> file` keeps it
    if annotated is not None:
        from bwdiag.report.annotated_trace import describe

        click.echo(describe(annotated.written))
    if summary_md is not None:
        from bwdiag.report.markdown import write_summary_md

        write_summary_md(diagnosis, summary_md, outputs)
    if open_report:
        from bwdiag.report.files import open_in_browser

        problem = open_in_browser(outputs["html"])  # the outputs are written: not an error
        if problem:
            click.echo(f"bwdiag: {problem}", err=True)
    _exit_without_cleanup = not open_report  # a browser started for --open is left to finish its start


def _with_selection(diagnosis, selection: dict):
    """``diagnosis`` with ``source.selection`` saying which ranks ``--ranks`` / ``--sample`` picked and why."""
    import dataclasses

    from bwdiag.diagnose.model import RankSelection

    source = dataclasses.replace(diagnosis.source, selection=RankSelection.from_dict(selection))
    return dataclasses.replace(diagnosis, source=source)


@main.command("report")
@click.argument("diagnosis_json", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path),
              help="Output folder for report.html [default: the folder holding DIAGNOSIS_JSON].")
@click.option("--force", is_flag=True, help="Overwrite a report.html already in the output folder.")
def report_command(diagnosis_json: Path, out_dir: Path | None, force: bool) -> None:
    """Re-render report.html and the terminal summary from a diagnosis.json (or its folder), without the trace."""
    from bwdiag.report.rerender import rerender

    diagnosis, html = rerender(diagnosis_json, out_dir, force=force)
    from bwdiag.report.terminal import print_summary

    print_summary(diagnosis, outputs={"html": html}, file=sys.stdout)


@main.command("diff")
@click.argument("before", type=click.Path(path_type=str))
@click.argument("after", type=click.Path(path_type=str))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path),
              help="Output folder for diff.json and diff.html [default: ./bwdiag-diff-<AFTER name>].")
@click.option("--force", is_flag=True, help="Overwrite a diff already in the output folder.")
@click.option("--fail-if-slower", "fail_if_slower", type=click.FloatRange(min=0), metavar="PCT", default=None,
              help="Exit 1 when AFTER's step is slower than BEFORE's by more than PCT % beyond the run-to-run noise.")
@click.option("--device-spec", type=click.Path(path_type=Path), metavar="FILE",
              help="Device ceilings for a side analysed from traces (see `bwdiag analyze --help`).")
def diff_command(before: str, after: str, out_dir: Path | None, force: bool, fail_if_slower: float | None,
                 device_spec: Path | None) -> None:
    """Compare two runs: did the fix work? BEFORE/AFTER: trace files, rank folders or bwdiag output folders
    (a folder with diagnosis.json is read, not re-analysed)."""
    from bwdiag import diff
    from bwdiag.diff.render import print_diff

    diff.check_inputs(before, after)  # a missing side is the first thing to say
    out_dir = out_dir or diff.default_out(after)
    diff.check_output_dir(out_dir, force=force)  # fail before the (long) analysis
    doc = diff.diff(before, after, fail_if_slower=fail_if_slower, device_spec=device_spec,
                    progress=sys.stderr.isatty())
    outputs = diff.write_outputs(doc, out_dir)
    print_diff(doc, outputs=outputs)
    if doc.get("gate", {}).get("failed"):
        sys.exit(1)


# -- capture ---------------------------------------------------------------------------------
_RUN_SETTINGS = {
    "ignore_unknown_options": True,
    "allow_interspersed_args": False,
    "help_option_names": ["-h", "--help"],
}


@main.command("run", context_settings=_RUN_SETTINGS)
@click.option("-o", "--out", type=click.Path(path_type=Path), help="Output folder [default: ./bwdiag-<script>-<timestamp>/].")
@click.option("--force", is_flag=True, help="Overwrite traces and reports already in the output folder.")
@click.option("-m", "module", is_flag=True, help="TARGET is a module, run as `python -m TARGET`.")
@click.option("--wait", type=int, default=DEFAULT_WAIT, show_default=True, help="Steps to skip first (compilation, autotuning).")
@click.option("--warmup", type=int, default=DEFAULT_WARMUP, show_default=True, help="Steps the profiler warms up on, not recorded.")
@click.option("--active", type=int, default=DEFAULT_ACTIVE, show_default=True, help="Steps recorded; profiling stops after them.")
@click.option("--step-on", "step_on", default="auto", show_default=True, metavar="MARKER", help=f"What marks a step: {STEP_ON_HELP}.")
@click.option("--with-stack/--no-stack", default=False, show_default=True, help="Record Python stacks (costly).")
@click.option("--modules/--no-modules", default=True, show_default=True, help="Annotate module forwards in the window.")
@click.option("--nproc-per-node", type=int, default=None, help="Launch N ranks on this node through torch.distributed.run.")
@click.option("--analyze/--no-analyze", default=True, show_default=True, help="Write diagnosis.json and report.html after the run.")
@click.option("--device-spec", type=click.Path(path_type=Path, dir_okay=False), default=None, metavar="FILE", help=_DEVICE_SPEC_HELP)
@click.option("--baseline", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="An earlier run's output folder (or trace): after the analysis, print `bwdiag diff DIR OUT` "
                   "and write diff.json/diff.html beside the report.")
@click.option("--rank-only", is_flag=True, hidden=True)
@click.option("--rank-timeout", type=float, default=DEFAULT_RANK_TIMEOUT_S, show_default=True, help="Seconds rank 0 waits for the other ranks under torchrun.")
@click.argument("target", metavar="SCRIPT.py|MODULE")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def run_command(
    out: Path | None,
    force: bool,
    module: bool,
    wait: int,
    warmup: int,
    active: int,
    step_on: str,
    with_stack: bool,
    modules: bool,
    nproc_per_node: int | None,
    analyze: bool,
    device_spec: Path | None,
    baseline: Path | None,
    rank_only: bool,
    rank_timeout: float,
    target: str,
    script_args: tuple[str, ...],
) -> None:
    """Run a script as `python SCRIPT.py ARGS` would, capture a few steps, and diagnose them.

    \b
      bwdiag run train.py --lr 3e-4
      bwdiag run -m mypkg.train --config c.yaml
      bwdiag run --nproc-per-node 2 train.py
      torchrun --nproc-per-node 2 -m bwdiag run train.py

    The script's own flags go after SCRIPT.py untouched. Steps are found without code changes
    (optimizer steps when training, model forwards when not; see --step-on); the traces, diagnosis.json
    and report.html go into one folder, printed at the end. The exit status is the script's.
    """
    from bwdiag.capture.options import CaptureOptions, StepMarker
    from bwdiag.capture.run import RunConfig, run
    from bwdiag.capture.runner import Target

    options = CaptureOptions(
        wait=wait,
        warmup=warmup,
        active=active,
        step_on=StepMarker.parse(step_on),
        with_stack=with_stack,
        with_modules=modules,
    )
    config = RunConfig(
        options=options,
        out=out,
        force=force,
        analyze=analyze,
        device_spec=device_spec,
        nproc_per_node=nproc_per_node,
        rank_only=rank_only,
        rank_timeout_s=rank_timeout,
        baseline=baseline,
    )
    run(Target(target, is_module=module), script_args, config, argv=["bwdiag", *sys.argv[1:]])
