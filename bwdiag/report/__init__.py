"""Reports of a diagnosis: the HTML page, ``diagnosis.json`` and the terminal summary."""

from bwdiag.report.context import build_context
from bwdiag.report.files import open_in_browser, write_atomic
from bwdiag.report.html import render_html
from bwdiag.report.json_out import render_json
from bwdiag.report.terminal import print_summary

__all__ = [
    "build_context",
    "open_in_browser",
    "print_summary",
    "render_html",
    "render_json",
    "write_atomic",
]
