"""The HTML page (static checks), diagnosis.json, the terminal summary and atomic writes."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import orjson
import pytest

from bwdiag.errors import OutputError
from bwdiag.report import build_context, print_summary, render_html, render_json, write_atomic
from bwdiag.report.files import open_in_browser
from bwdiag.report.html import templates_dir
from bwdiag.units import fmt_bandwidth, fmt_bytes, fmt_flops, fmt_pct, fmt_time
from tests.report_fixtures import ADD, GEMM, HOSTILE, cpu_diagnosis, gpu_diagnosis


class _Page(HTMLParser):
    """Collects tags, attributes and script bodies of a page."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[tuple[dict, str]] = []
        self._in_script: dict | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = dict(attrs)
            self.scripts.append((self._in_script, ""))

    def handle_data(self, data):
        if self._in_script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = None


def _parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


def test_data_embedded_once_and_round_trips():
    d = gpu_diagnosis()
    html = render_html(d)
    page = _parse(html)
    data = [text for attrs, text in page.scripts if attrs.get("id") == "data"]
    assert len(data) == 1
    assert json.loads(data[0]) == build_context(d)
    assert [a.get("type") for a, _ in page.scripts] == ["application/json", None]


def test_hostile_name_cannot_break_out():
    html = render_html(gpu_diagnosis())
    assert "<img" not in html
    assert html.lower().count("</script") == 2  # the two script blocks' own closing tags
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in html  # shown as text
    page = _parse(html)
    assert not [t for t, a in page.tags if t == "img"]
    assert not [a for t, a in page.tags if any(k.startswith("on") for k in a)]


def test_page_fetches_nothing():
    html = render_html(gpu_diagnosis())
    page = _parse(html)
    for tag, attrs in page.tags:
        assert "src" not in attrs, tag
        if tag == "link":
            pytest.fail(f"<link> in page: {attrs}")
        if "href" in attrs:
            assert attrs["href"].startswith("#"), attrs
    csp = [a["content"] for t, a in page.tags
           if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]
    assert not re.search(r"url\(\s*['\"]?(https?:|//)", html)
    # The only absolute URL is the SVG namespace the script uses in createElementNS.
    assert set(re.findall(r"https?://[^\s\"'<>)]+", html)) == {"http://www.w3.org/2000/svg"}


def test_page_shows_verdict_numbers():
    html = render_html(gpu_diagnosis())
    assert '<div class="kpi-value" id="kpi-step">5 ms</div>' in html
    assert '<div class="kpi-value" id="kpi-projected">3 ms</div>' in html
    assert "−40.0% · 1.67× faster" in html
    assert "Exposed communication <b>3 ms</b>" in html
    assert html.count('class="finding"') == 4
    assert html.count('class="copy"') == 4


def test_page_warns_about_groups_above_their_roof():
    import dataclasses

    d = gpu_diagnosis()
    fast = dataclasses.replace(d.kernels[0], pct_of_ceiling=4000.0)
    html = render_html(dataclasses.replace(d, kernels=(fast, *d.kernels[1:])))
    assert "1 group runs faster than its ceiling allows (up to 4,000%)" in html
    assert 'id="above-roof"' not in render_html(d)


def test_cpu_page_renders_without_kernels():
    html = render_html(cpu_diagnosis())
    assert "assumed ceilings" in html
    assert "No collectives in this trace." in html
    assert 'id="kpi-projected"' not in html


def test_templates_found_in_source_checkout():
    assert (Path(str(templates_dir())) / "report.html.j2").is_file()


def test_json_is_indented_nan_free_contract():
    k = gpu_diagnosis().kernels[1]
    import dataclasses

    d = gpu_diagnosis(kernels=(dataclasses.replace(k, pct_of_ceiling=float("nan"),
                                                   intensity=float("inf")),))
    raw = render_json(d)
    assert raw.endswith(b"\n") and b'\n  "source": {' in raw
    assert b"NaN" not in raw and b"Infinity" not in raw
    doc = orjson.loads(raw)
    assert doc["schema"] == "bwdiag/diagnosis@2"
    assert doc["kernels"][0]["pct_of_ceiling"] is None and doc["kernels"][0]["intensity"] is None
    assert doc["time"]["by_bound"]["compute"] == 8000.0
    assert [f["est_saving_us"] for f in doc["findings"]] == [3000.0, 2500.0, 2500.0, 500.0]


def test_terminal_summary_has_verdict_and_findings():
    out = io.StringIO()
    print_summary(gpu_diagnosis(), outputs={"report": Path("out/report.html")}, file=out)
    text = " ".join(out.getvalue().split())  # rich wraps at 80 columns
    assert "Step 5 ms (median of 4 complete steps per rank, the median over 2 ranks)" in text
    assert "Compute-bound" in text and "(40.0% of the time)" in text
    assert "Fuse the elementwise chain in model.layers.0" in text
    assert "3 ms (15.0%)" in text
    assert "Run the MLP GEMMs in fp8" not in text  # fourth finding: only counted
    assert "… and 1 more in the report" in text
    assert "Projected after fixes: 3 ms" in text and "1.67× faster" in text
    assert "report: out/report.html" in text
    # Top kernels by time: the GEMM (8 ms, 8000/17000 = 47.1% of kernel time) first.
    assert "Top kernels by time" in text
    # (2*2048^3*100 FLOP / 8 ms = 214.7 TFLOP/s = 68.8% of 312 TFLOP/s)
    assert re.search(r"sm80_xmma_gemm\S* │ 8 ms │ 47.1% │ compute │ 68.8%", text)


def test_terminal_rows_of_one_op_show_their_shapes():
    # Two groups of aten::mm (forward and backward) read the same without their shapes.
    a = dataclasses.replace(GEMM, name="aten::mm", shapes="f32[64, 256], f32[256, 512]", total_us=9000.0)
    b = dataclasses.replace(GEMM, name="aten::mm", shapes="f32[256, 64], f32[64, 512]", total_us=7000.0)
    out = io.StringIO()
    print_summary(gpu_diagnosis(kernels=(a, b, ADD)), file=out, width=120)
    text = out.getvalue()
    assert "aten::mm f32[64, 256], f32[256, 512]" in text and "aten::mm f32[256, 64], f32[64, 512]" in text


def test_terminal_summary_goes_to_stderr_by_default(capsys):
    print_summary(cpu_diagnosis())
    captured = capsys.readouterr()
    assert captured.out == ""
    err = " ".join(captured.err.split())
    assert "Analysed window 1.5 ms" in err
    assert "No findings" in err and "ASSUMED" in err


def test_write_atomic_replaces_whole_file(tmp_path):
    target = tmp_path / "report.html"
    target.write_bytes(b"old")
    write_atomic(target, b"new contents")
    assert target.read_bytes() == b"new contents"
    assert os.listdir(tmp_path) == ["report.html"]  # no temporary file left behind
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_write_atomic_keeps_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "diagnosis.json"
    target.write_bytes(b"old")

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OutputError, match="No space left on device"):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["diagnosis.json"]


def test_write_atomic_missing_folder_is_an_output_error(tmp_path):
    with pytest.raises(OutputError, match="cannot write"):
        write_atomic(tmp_path / "nope" / "report.html", b"x")


def test_open_in_browser_uses_file_uri(tmp_path, monkeypatch):
    page = tmp_path / "report.html"
    page.write_text("<p>x</p>")
    opened = []
    monkeypatch.delenv("BROWSER", raising=False)
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr("bwdiag.report.files._answers", lambda address: True)  # an X server on :0
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url) or True)
    assert open_in_browser(page) is None
    assert opened == [page.resolve().as_uri()]
    with pytest.raises(OutputError, match="no such file"):
        open_in_browser(tmp_path / "missing.html")
    monkeypatch.setattr("webbrowser.open", lambda url: False)
    assert open_in_browser(page) == (
        f"no web browser found to open the report (set $BROWSER to choose one); the report is at {page.resolve()}"
    )


def test_open_in_browser_without_a_display_says_where_the_report_is(tmp_path, monkeypatch):
    page = tmp_path / "report.html"
    page.write_text("<p>x</p>")
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("BROWSER", raising=False)
    monkeypatch.setattr("webbrowser.open", lambda url: pytest.fail("must not start a browser"))
    problem = open_in_browser(page)
    assert problem.startswith("no display to open a browser on (set $BROWSER")
    assert f"the report is at {page.resolve()}; copy it to your machine" in problem


@pytest.mark.parametrize(("value", "text"), [
    (0.5, "0.5 µs"), (850.0, "850 µs"), (1234.5, "1.23 ms"), (20000.0, "20 ms"),
    (4.56e6, "4.56 s"), (None, "—"), (float("nan"), "—"),
])
def test_fmt_time(value, text):
    assert fmt_time(value) == text


def test_fmt_units():
    assert fmt_flops(312e12) == "312 TFLOP/s"
    assert fmt_flops(19.5e12) == "19.5 TFLOP/s"
    assert fmt_bandwidth(2.039e12) == "2.04 TB/s"
    assert fmt_bandwidth(300e9) == "300 GB/s"
    assert fmt_bytes(100e6) == "100 MB"
    assert fmt_bytes(512) == "512 B"
    assert fmt_pct(47.26) == "47.3%"
    assert fmt_pct(0.04) == "<0.1%"
    assert fmt_pct(49689.6) == "49,690%"
    assert fmt_pct(None) == "—"


def test_page_stays_small_with_thousands_of_groups():
    """5,000 groups with 330-character templated names: rows are columnar JSON, built by JS."""
    from tests.report_fixtures import kernel

    name = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, "
            "float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<"
            "char*, 3> >(int, at::native::AUnaryFunctor<float, float, float, at::native::"
            "binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3>)")
    rows = tuple(
        kernel(f"{name}_{i}", total_us=10.0 + i, count=3, flops=1e6 * (i + 1), bytes_=1e7,
               bound="memory", ceiling="memory", roof=19.5e12, op="aten::mul",
               module=f"model.layers.{i % 24}.mlp.act", shapes="[[4096, 11008], []]")
        for i in range(5000)
    )
    html = render_html(gpu_diagnosis(kernels=rows))
    assert len(html.encode()) < 5_000_000
    assert html.count("<tr") < 100  # no server-rendered kernel rows


def test_page_names_the_straggler_and_shows_the_fit():
    from bwdiag.diagnose.model import CommFit, Straggler

    html = render_html(gpu_diagnosis(
        straggler=Straggler(rank=1, made_others_wait_us=123301.0, arrived_last_calls=7, matched_calls=10),
        comm_fits=(CommFit(collective="send_recv", alpha_us=45294.7, beta_bytes_per_s=7.4e10, n=12, sizes=6),)))
    assert ("Rank 1 is the straggler: it arrived last at 7 of 10 matched collectives, and the "
            "other ranks waited 123 ms for it.") in html
    assert '<span class="tag warn">straggler</span>' in html
    assert ('<td>send_recv</td><td class="num">45.3 ms</td><td class="num">74 GB/s</td>'
            '<td class="num">12</td><td class="num">6</td>') in html


def test_compiled_template_is_cached_and_reused(tmp_path, monkeypatch):
    """The page template is compiled once per template version (~0.1 s saved per run after the first)."""
    import jinja2

    from bwdiag.report import html

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    html.environment.cache_clear()
    first = render_html(gpu_diagnosis())
    cached = list((tmp_path / "cache" / "bwdiag" / "templates").glob("__jinja2_*.cache"))
    assert len(cached) == 1
    html.environment.cache_clear()

    def no_compile(*args, **kwargs):
        raise AssertionError("template compiled again despite the cache")

    monkeypatch.setattr(jinja2.Environment, "compile", no_compile)
    assert render_html(gpu_diagnosis()) == first
    html.environment.cache_clear()


def test_unwritable_template_cache_still_renders(tmp_path, monkeypatch):
    from bwdiag.report import html

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    html.environment.cache_clear()
    page = render_html(gpu_diagnosis())
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    (tmp_path / "damaged").mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "damaged"))
    render_html(gpu_diagnosis())
    for f in (tmp_path / "damaged" / "bwdiag" / "templates").glob("*.cache"):
        f.write_bytes(b"garbage")  # a damaged cache entry is recompiled, not an error
    html.environment.cache_clear()
    assert render_html(gpu_diagnosis()) == page
    html.environment.cache_clear()
