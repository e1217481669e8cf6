"""``report.html``: one self-contained page rendered from the jinja2 templates in ``templates/``.

One jinja Environment with autoescaping on; the report data is embedded once, only through
``|tojson``, in ``<script type="application/json" id="data">``; the page's CSS and JavaScript are
inlined from ``templates/report.css`` and ``templates/report.js``. Nothing is fetched when the page
is viewed (a Content-Security-Policy says so to the browser as well).
"""

from __future__ import annotations

import functools
import importlib.resources
from pathlib import Path

import jinja2
from markupsafe import Markup

from bwdiag._version import __version__
from bwdiag.cache import cache_dir
from bwdiag.diagnose.model import Diagnosis
from bwdiag import units
from bwdiag.report.context import build_context

_PAGE = "report.html.j2"
_ASSETS = ("report.css", "report.js")


def templates_dir():
    """The folder holding the templates: package data ``bwdiag/templates`` when installed,
    else ``templates/`` at the top of a source checkout. Returns a Traversable/Path."""
    try:
        packaged = importlib.resources.files("bwdiag") / "templates"
        if packaged.is_dir():
            return packaged
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    return Path(__file__).resolve().parents[2] / "templates"


def _read_template(name: str):
    path = templates_dir() / name
    try:
        source = path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return source, str(path), lambda: True


class _TemplateCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates under ``$XDG_CACHE_HOME/bwdiag/templates`` (keyed by the source's checksum,
    so an edited template is recompiled): compiling the page costs ~0.1 s per run otherwise. The
    cache is optional: a folder that cannot be written just means compiling every time."""

    def __init__(self) -> None:
        self.pattern = "__jinja2_%s.cache"

    @property
    def directory(self) -> str:  # looked up on each use: XDG_CACHE_HOME may change in a process
        return str(cache_dir() / "templates")

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            Path(self.directory).mkdir(parents=True, exist_ok=True)
            super().dump_bytecode(bucket)
        except OSError:
            pass  # read-only or full cache folder: the template was compiled, only not kept

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, EOFError, ValueError):
            bucket.reset()  # unreadable or damaged cache entry: compile afresh


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The one jinja Environment: autoescape on, strict undefined, unit-formatting filters."""
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_read_template),
        bytecode_cache=_TemplateCache(),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        time=units.fmt_time,
        flops=units.fmt_flops,
        bandwidth=units.fmt_bandwidth,
        bytes=units.fmt_bytes,
        count=units.fmt_count,
        pct=units.fmt_pct,
        intensity=units.fmt_intensity,
    )
    return env


def _asset(name: str) -> Markup:
    """An inline CSS/JS source from the templates folder, checked not to close its own tag."""
    text = (templates_dir() / name).read_text(encoding="utf-8")
    lowered = text.lower()
    if "</script" in lowered or "</style" in lowered:
        raise ValueError(f"templates/{name} must not contain a closing </script> or </style>")
    return Markup(text)


def render_html(diagnosis: Diagnosis, hta: dict | None = None) -> str:
    """The whole report page as one self-contained HTML string (``hta``: the ``--hta`` comparison)."""
    ctx = build_context(diagnosis)
    template = environment().get_template(_PAGE)
    return template.render(
        ctx=ctx,
        version=__version__,
        css=_asset(_ASSETS[0]),
        js=_asset(_ASSETS[1]),
        hta=hta_page(hta) if hta is not None else None,
    )


def hta_page(section: dict) -> dict:
    """The ``--hta`` section with its rows formatted for the page."""
    from bwdiag.report.hta_view import table_rows

    return {**section, "tables": [{"rank": r["rank"], "rows": table_rows(r), "notes": r["notes"]}
                                  for r in section["ranks"]]}
