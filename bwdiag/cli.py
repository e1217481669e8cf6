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
