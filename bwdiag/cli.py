"""The ``bwdiag`` command line: thin click commands over the library."""

from __future__ import annotations

import sys

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
