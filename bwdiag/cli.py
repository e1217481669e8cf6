"""The ``bwdiag`` command line: thin click commands over the library."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bwdiag import __version__
from bwdiag.errors import BwdiagError


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
    from bwdiag.hardware.cli_views import devices_json, devices_table

    click.echo(devices_json() if as_json else devices_table())


@main.command()
@click.option("--flops", "flops", required=True, help="FLOPs of the work: 2.1e12, 4G, 1.5T ...")
@click.option("--bytes", "bytes_", required=True, help="Bytes moved to/from memory: 3e8, 96M, 1Gi ...")
@click.option("--time", "time_", default=None, help="Measured time: seconds or 440us / 0.44ms.")
@click.option("--device", "device", required=True, help="A device from `bwdiag devices` (or a driver name).")
@click.option("--dtype", default="bf16", show_default=True, help="fp64 fp32 tf32 bf16 fp16 fp8 int8")
@click.option("--vector", is_flag=True, help="Vector units, not tensor cores.")
def roofline(flops: str, bytes_: str, time_: str | None, device: str, dtype: str, vector: bool) -> None:
    """Place work on a device's roofline: intensity, ceiling, bound, best time, % of ceiling."""
    from bwdiag.hardware.cli_views import roofline_report

    click.echo(roofline_report(flops, bytes_, time_, device, dtype, tensor=not vector))


@main.command()
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N")
@click.option("--quick", is_flag=True, help="A ~2 s measurement (smaller arrays and GEMMs).")
def calibrate(device: str, quick: bool) -> None:
    """Measure this machine's memory bandwidth and GEMM FLOP/s, and cache them."""
    from bwdiag.hardware.cli_views import calibrate_report

    click.echo(calibrate_report(device, quick=quick))


# -- offline analysis ------------------------------------------------------------------------


def _default_out(paths: tuple[str, ...]) -> Path:
    first = Path(paths[0])
    stem = first.name
    for suffix in (".gz", ".json", ".pt.trace"):
        stem = stem.removesuffix(suffix)
    return Path(f"bwdiag-{stem or 'trace'}")


@main.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path),
              help="Output folder for diagnosis.json and report.html [default: ./bwdiag-<trace name>].")
@click.option("--device-spec", type=click.Path(path_type=Path),
              help="JSON file of device ceilings that overrides the table (see `bwdiag devices --json`).")
@click.option("--force", is_flag=True, help="Overwrite outputs already in the output folder.")
@click.option("--open", "open_report", is_flag=True, help="Open report.html in a browser when done.")
def analyze(traces: tuple[str, ...], out_dir: Path | None, device_spec: Path | None, force: bool,
            open_report: bool) -> None:
    """Diagnose saved torch.profiler traces: files (.json / .json.gz) or folders of rank files."""
    from bwdiag import pipeline

    out_dir = out_dir or _default_out(traces)
    pipeline.check_output_dir(out_dir, force=force)  # fail before the (long) analysis
    diagnosis = pipeline.analyze(traces, device_spec=device_spec, progress=sys.stderr.isatty())
    outputs = pipeline.write_outputs(diagnosis, out_dir, force=True)
    pipeline.print_summary(diagnosis, outputs)
    if open_report:
        from bwdiag.report.files import open_in_browser

        open_in_browser(outputs["html"])
