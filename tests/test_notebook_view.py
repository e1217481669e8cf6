"""``DiagnosisView`` in Jupyter: ``_repr_html_`` shows the report page (verdict card, findings,
roofline) from an iframe ``srcdoc``, with nothing fetched and nothing escaping the frame; the tables
stay DataFrames."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd
import pytest

from bwdiag.capture.view import DiagnosisView
from bwdiag.report.roofline import plottable
from tests.report_fixtures import HOSTILE, gpu_diagnosis

SRCDOC = re.compile(r'^<iframe [^>]*srcdoc="([^"]*)"></iframe>$', re.S)


def _srcdoc(view: DiagnosisView) -> str:
    match = SRCDOC.match(view._repr_html_())
    assert match, view._repr_html_()[:300]
    return html.unescape(match.group(1))


def test_repr_html_is_the_self_contained_page_in_a_sandboxed_frame() -> None:
    d = gpu_diagnosis()
    view = DiagnosisView(d)
    shown = view._repr_html_()
    assert 'sandbox="allow-scripts"' in shown  # scripts run, but not with the notebook's origin
    assert HOSTILE not in shown  # the hostile kernel name cannot close the attribute or the frame
    page = _srcdoc(view)
    assert page == view.to_html()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    # Nothing to fetch: no external script, style, image or frame source in the page.
    assert not re.search(r"""<(script|link|img|iframe)[^>]+(src|href)\s*=\s*["']?(https?:)?//""", page, re.I)
    assert "@import" not in page and not re.search(r"url\(\s*['\"]?(https?:)?//", page)
    for section in ('id="verdict"', 'id="findings"', 'id="roofline"'):
        assert section in page
    assert isinstance(view.kernels, pd.DataFrame) and len(view.kernels) == len(d.kernels)


def test_repr_html_renders_offline_in_chromium(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("websocket", reason="the browser tests drive Chromium over websocket-client")
    from tests import browser_cdp
    from tests.browser_cdp import Browser, chromium_binary

    # The sandboxed frame would run in its own process, out of sight of the page's DevTools session
    # (its requests and console included): keep it in the page's process.
    monkeypatch.setattr(browser_cdp, "CHROMIUM_FLAGS", browser_cdp.CHROMIUM_FLAGS + (
        "--disable-site-isolation-trials", "--disable-features=IsolateOrigins,site-per-process"))

    binary = chromium_binary()
    if binary is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium)")
    d = gpu_diagnosis()
    notebook = tmp_path / "notebook.html"  # a notebook output cell, as Jupyter inserts it
    notebook.write_text(f"<!doctype html><html><body><div class='output'>{DiagnosisView(d)._repr_html_()}"
                        "</div></body></html>", encoding="utf-8")
    with Browser(binary, width=1200, height=900) as b:
        b.open(notebook)
        assert b.requests() == [notebook.resolve().as_uri()]  # the cell itself, nothing else
        assert b.problems() == [] and b.dialogs() == []
        frame = b.call("Page.getFrameTree")["frameTree"]["childFrames"][0]["frame"]["id"]
        context = b.call("Page.createIsolatedWorld", frameId=frame)["executionContextId"]

        def inside(expression: str):
            result = b.call("Runtime.evaluate", expression=expression, contextId=context, returnByValue=True)
            return result["result"].get("value")

        assert inside("document.documentElement.getAttribute('data-rendered')") == "1"
        assert inside("document.querySelectorAll('#roof-points circle.pt').length") == sum(
            1 for k in d.kernels if plottable(k))
        assert inside("document.querySelector('#verdict').textContent.length") > 0
        assert inside("document.querySelectorAll('#findings li, #findings tr, #findings article').length") > 0
