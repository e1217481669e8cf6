"""The report page in real headless Chromium: it renders, fetches nothing, logs no error,
runs no injected script, and the roofline shows one point per kernel group with an estimate.

Needs the Debian ``chromium`` package (skipped with a reason otherwise). One browser serves the
whole module; each page is loaded once. Screenshots go to ``test-artifacts/`` (git-ignored).
Set ``BWDIAG_DOCS_SCREENSHOT=1`` to also refresh ``docs/report.png`` from the A100 report.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from bwdiag.diagnose.model import AppliedFinding, Diagnosis, Finding
from bwdiag.report import render_html, write_atomic
from bwdiag.report.context import build_context
pytest.importorskip("websocket", reason="the browser tests drive Chromium over websocket-client")

from tests.browser_cdp import Browser, chromium_binary  # noqa: E402
from tests.report_fixtures import (  # noqa: E402
    A100_TRAIN, ADD, COPY, CPU_ONLY, GEMM, H100_QWEN, HOSTILE, cpu_diagnosis, gpu_diagnosis, real_diagnosis,
)

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
DOCS_PNG = ROOT / "docs" / "report.png"


@pytest.fixture(scope="module")
def browser():
    binary = chromium_binary()
    if binary is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium)")
    with Browser(binary, width=1360, height=1000) as b:
        yield b


def _with_estimates(d: Diagnosis) -> int:
    """Kernel groups with a FLOP and a byte estimate, counted from the diagnosis rows."""
    return sum(1 for k in d.kernels if k.flops and k.bytes and k.flops > 0 and k.bytes > 0)


def _byte_only(d: Diagnosis) -> int:
    """Groups for the bandwidth strip, counted from the diagnosis rows: bytes, an achieved B/s,
    no FLOPs, not a collective."""
    return sum(1 for k in d.kernels if k.bytes and k.bytes > 0 and not k.flops
               and k.achieved_bytes_per_s and k.bound.value != "communication")


def _check_legends(browser: Browser) -> None:
    """Each legend lists exactly what its chart drew: per bound the count of circles of that
    colour class, and an entry per kind of line only where such a line was drawn."""
    got = browser.evaluate("""(() => {
        const out = {};
        for (const [legend, chart, marks, prefix] of [['#roof-legend', '#roof-svg', '#roof-points', 'point:'],
                                                      ['#bw-legend', '#bw-svg', '#bw-marks', 'mark:']]) {
            const svg = document.querySelector(chart);
            const drawn = {};
            if (svg) {
                for (const c of document.querySelectorAll(marks + ' circle.pt')) {
                    const b = [...c.classList].find(x => x.startsWith('b-')).slice(2);
                    drawn[prefix + b] = (drawn[prefix + b] || 0) + 1;
                }
                if (svg.querySelector('line.roof:not(.vector)')) drawn.roof = null;
                if (svg.querySelector('line.roof.vector')) drawn['roof-vector'] = null;
                if (svg.querySelector('line.mem-roof')) drawn['mem-roof'] = null;
                if (svg.querySelector('circle.ridge')) drawn.ridge = null;
            }
            const listed = {};
            for (const li of document.querySelectorAll(legend + ' li[data-series]')) {
                const key = li.getAttribute('data-series');
                const swatch = li.querySelector('svg.marker circle.pt');
                listed[key] = key.includes(':') ? +li.textContent.trim().split(' ').pop() : null;
                // The legend's marker carries the same colour class as the drawn circles.
                if (key.includes(':') && !swatch.classList.contains('b-' + key.split(':')[1])) listed[key] = 'wrong colour';
            }
            out[legend] = [drawn, listed];
        }
        return out;
    })()""")
    for legend, (drawn, listed) in got.items():
        assert listed == drawn, legend


def _load(browser: Browser, d: Diagnosis, name: str) -> Path:
    """Write the report for ``d``, open it, and check what every page must satisfy."""
    ARTIFACTS.mkdir(exist_ok=True)
    page = ARTIFACTS / f"{name}.html"
    write_atomic(page, render_html(d).encode())
    browser.open(page)
    assert browser.evaluate("document.documentElement.getAttribute('data-rendered')") == "1"
    assert browser.problems() == []
    assert browser.requests() == [page.resolve().as_uri()]  # the page itself, nothing else
    points = browser.evaluate("document.querySelectorAll('#roof-points circle.pt').length")
    assert points == _with_estimates(d)
    marks = browser.evaluate("document.querySelectorAll('#bw-marks circle.pt').length")
    assert marks == _byte_only(d)
    assert browser.evaluate("""(() => {  // every mark inside the strip's frame
        const f = document.querySelector('#bw-svg rect.frame');
        if (!f) return true;
        const x0 = +f.getAttribute('x'), y0 = +f.getAttribute('y');
        const x1 = x0 + +f.getAttribute('width'), y1 = y0 + +f.getAttribute('height');
        return [...document.querySelectorAll('#bw-marks circle')].every(c => {
            const cx = +c.getAttribute('cx'), cy = +c.getAttribute('cy'), r = +c.getAttribute('r');
            return cy - r >= y0 && cy + r <= y1 && cx >= x0 && cx <= x1; });
    })()""")
    assert browser.evaluate("document.querySelectorAll('#unplotted-list li').length") == (
        len(d.kernels) - points - marks)
    _check_legends(browser)
    shown = min(50, len(d.kernels))
    assert browser.evaluate("document.querySelectorAll('#k-table tbody tr[data-k]').length") == shown
    if d.kernels:
        assert browser.evaluate("document.getElementById('k-range').textContent") == (
            f"1–{shown} of {len(d.kernels):,}")
    assert browser.evaluate("document.images.length") == 0
    browser.screenshot(ARTIFACTS / f"{name}.png", full_page=True)
    return page


def _click_biggest_point(browser: Browser) -> None:
    """Hover shows the tooltip; a click highlights the point's row in the kernel table."""
    k = browser.evaluate("""(() => {
        const pts = [...document.querySelectorAll('#roof-points circle.pt')];
        const big = pts.reduce((a, b) => (+a.getAttribute('r') >= +b.getAttribute('r') ? a : b));
        big.dispatchEvent(new MouseEvent('mouseover', {bubbles: true, clientX: 300, clientY: 300}));
        return +big.getAttribute('data-k');
    })()""")
    tip = browser.evaluate("document.getElementById('tooltip').hidden ? null : "
                           "document.getElementById('tooltip').textContent")
    row = browser.evaluate(f"bwdiagReport.data.kernels[{k}]")
    assert tip is not None and tip.startswith(row["name"]) and "of ceiling" in tip
    browser.evaluate(f"document.querySelector('#roof-points circle[data-k=\"{k}\"]')"
                     ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
    assert browser.evaluate("document.querySelector('#k-table tr.hl').getAttribute('data-k')") == str(k)
    assert browser.evaluate("document.querySelector('#roof-points circle.sel').getAttribute('data-k')") == str(k)


def test_a100_training_report(browser):
    d = real_diagnosis(A100_TRAIN)
    _load(browser, d, "a100-training")
    assert _with_estimates(d) > 0
    if os.environ.get("BWDIAG_DOCS_SCREENSHOT"):  # the README's picture: the page as it opens
        browser.call("Emulation.setDeviceMetricsOverride", width=1500, height=1400,
                     deviceScaleFactor=1, mobile=False)
        browser.evaluate("window.scrollTo(0, 0)")
        browser.screenshot(DOCS_PNG)
        browser.call("Emulation.setDeviceMetricsOverride", width=1360, height=1000,
                     deviceScaleFactor=1, mobile=False)
        assert DOCS_PNG.stat().st_size < 500_000
    _click_biggest_point(browser)
    # Clicking the last group listed beside the chart pages the table to its row.
    k = browser.evaluate("""(() => { const li = [...document.querySelectorAll('#unplotted-list li')].pop();
        li.click(); return +li.getAttribute('data-k'); })()""")
    assert browser.evaluate("document.querySelector('#k-table tr.hl').getAttribute('data-k')") == str(k)
    page_start = k // 50 * 50  # unfiltered, sorted by time: row k sits on page k // 50
    assert browser.evaluate("document.getElementById('k-range').textContent").startswith(
        f"{page_start + 1}–")
    # Sorting by count puts the most-launched group first.
    browser.evaluate("document.querySelector('#k-table th[data-key=\"count\"]').click()")
    first = browser.evaluate("+document.querySelector('#k-table tbody tr').getAttribute('data-k')")
    assert d.kernels and browser.evaluate(f"bwdiagReport.data.kernels[{first}].count") == max(
        k.count for k in d.kernels)


def _hostile(d: Diagnosis) -> Diagnosis:
    """``d`` with the hostile string as a kernel name, module and op and in a finding."""
    kernels = list(d.kernels)
    kernels[0] = dataclasses.replace(kernels[0], name=HOSTILE, module=HOSTILE, op=HOSTILE)
    finding = Finding(kind="other", title=f"Look at {HOSTILE}", est_saving_us=1.0,
                      est_saving_pct=0.0, evidence=(HOSTILE,), fix=HOSTILE)
    whatif = d.whatif
    if whatif is not None:  # the what-if table shows finding titles as well
        whatif = dataclasses.replace(whatif, findings=(
            *whatif.findings, AppliedFinding("other", finding.title, 1.0, 0.0, True)))
    return dataclasses.replace(d, kernels=tuple(kernels), findings=(*d.findings, finding),
                               warnings=(*d.warnings, HOSTILE), whatif=whatif)


def _check_hostile_is_text(browser: Browser) -> None:
    assert browser.dialogs() == []
    browser.evaluate("bwdiagReport.table.filter('onerror=alert')")
    cells = browser.evaluate("[...document.querySelectorAll('#k-table td.name')].map(td => td.textContent)")
    assert HOSTILE in cells
    assert browser.evaluate(
        "[...document.querySelectorAll('.finding h3')].some(h => h.textContent.includes("
        f"{HOSTILE!r}))")
    if browser.evaluate("!!document.getElementById('whatif-table')"):
        assert browser.evaluate(
            "[...document.querySelectorAll('#whatif-table tbody td')].some(td => td.textContent.includes("
            f"{HOSTILE!r}))")
    assert browser.evaluate("document.images.length + document.querySelectorAll('img').length") == 0
    assert browser.dialogs() == [] and browser.problems() == []


def test_h100_qwen_report_with_hostile_names(browser):
    d = _hostile(real_diagnosis(H100_QWEN))
    _load(browser, d, "h100-qwen")
    _check_hostile_is_text(browser)


def test_cpu_trace_report(browser):
    d = real_diagnosis(CPU_ONLY)
    _load(browser, d, "cpu-trace")
    # A row of a CPU trace is its op: the table names it once ("CPU op"), no second "Op" column.
    heads = browser.evaluate("[...document.querySelectorAll('#k-table th')].map(th => th.textContent)")
    assert heads[0] == "CPU op" and "Op" not in heads and len(heads) == len(set(heads))
    text = browser.evaluate("document.getElementById('roof-chart').textContent")
    if not _with_estimates(d):
        assert "roofline" in text or "nothing to place" in text


def test_two_rank_fixture_report(browser):
    """Every section populated (ranks, collectives, idle breakdown), hostile names included."""
    d = gpu_diagnosis()
    _load(browser, d, "fixture-two-ranks")
    _check_hostile_is_text(browser)
    _at_1280(browser)  # with the Rank column too, the key columns fit
    try:
        _check_key_columns_visible(browser)
    finally:
        _restore(browser)
    assert browser.evaluate("document.querySelectorAll('#r-table tbody tr').length") == 2
    # Filtering by bound: ADD and COPY are the two memory-bound groups.
    browser.evaluate("bwdiagReport.table.filter('')")
    browser.evaluate("(() => { const s = document.getElementById('k-bound'); s.value = 'memory';"
                     " s.dispatchEvent(new Event('change')); })()")
    assert browser.evaluate("document.getElementById('k-range').textContent") == "1–2 of 2"
    names = browser.evaluate("[...document.querySelectorAll('#k-table td.name')].map(t => t.textContent)")
    assert names == [ADD.name, COPY.name]
    # Typing in the filter box matches modules too (debounced input event).
    browser.evaluate("(() => { const i = document.getElementById('k-filter'); i.value = 'layers.0.mlp';"
                     " i.dispatchEvent(new Event('input')); })()")
    browser.evaluate("new Promise(r => setTimeout(r, 300))")
    assert browser.evaluate("document.getElementById('k-range').textContent") == "0 of 0"  # still memory only
    browser.evaluate("(() => { const s = document.getElementById('k-bound'); s.value = '';"
                     " s.dispatchEvent(new Event('change')); })()")
    names = browser.evaluate("[...document.querySelectorAll('#k-table td.name')].map(t => t.textContent)")
    assert names == [GEMM.name]
    # An evidence button filters the kernel table to what it names.
    browser.evaluate("document.querySelector('#finding-1 button.find').click()")
    assert browser.evaluate("document.getElementById('k-filter').value") == ADD.name
    names = browser.evaluate("[...document.querySelectorAll('#k-table td.name')].map(t => t.textContent)")
    assert names == [ADD.name]
    # The copy button puts the fix on the clipboard and says so.
    browser.call("Browser.grantPermissions",
                 permissions=["clipboardReadWrite", "clipboardSanitizedWrite"])
    browser.call("Emulation.setFocusEmulationEnabled", enabled=True)
    browser.evaluate("document.querySelector('#finding-3 button.copy').click()")
    label = browser.evaluate("new Promise(r => setTimeout(() => "
                             "r(document.querySelector('#finding-3 button.copy').textContent), 200))")
    assert label == "Copied"
    assert browser.evaluate("navigator.clipboard.readText()") == d.findings[2].fix
    assert browser.problems() == []


def test_cpu_fixture_report(browser):
    _load(browser, cpu_diagnosis(), "fixture-cpu")
    assert "No CPU ops in this trace" in browser.evaluate("document.getElementById('roof-chart').textContent")


def _check_key_columns_visible(browser: Browser) -> None:
    """At the current 1280 px viewport: the kernel table needs no sideways scroll, its key columns
    lie inside the viewport and the name column keeps room to be read."""
    browser.evaluate("document.getElementById('kernels').scrollIntoView({behavior: 'instant'})")
    geo = browser.evaluate("""(() => {
        const box = document.querySelector('#kernels .scroll-x');
        const th = k => document.querySelector('#k-table th[data-key="' + k + '"]').getBoundingClientRect();
        const keys = ['name', 'total_us', 'share_pct', 'bound', 'pct_of_ceiling'];
        return {view: document.documentElement.clientWidth, scroll: box.scrollWidth, client: box.clientWidth,
                cols: keys.map(k => { const r = th(k); return [k, r.left, r.right, r.width]; })};
    })()""")
    assert geo["view"] == 1280 and geo["scroll"] <= geo["client"]  # no sideways scroll
    for key, left, right, width in geo["cols"]:
        assert 0 <= left and right <= geo["view"] and width > 40, key
    assert dict((k, w) for k, _, _, w in geo["cols"])["name"] >= 200


def _at_1280(browser: Browser) -> None:
    browser.call("Emulation.setDeviceMetricsOverride", width=1280, height=800,
                 deviceScaleFactor=1, mobile=False)


def _restore(browser: Browser) -> None:
    browser.call("Emulation.setDeviceMetricsOverride", width=1360, height=1000,
                 deviceScaleFactor=1, mobile=False)


def test_h100_qwen_layout_strip_and_whatif(browser):
    """At 1280×800 the kernel table's key columns are on screen without scrolling sideways; long
    names are cut, whole in their title and after a click; the byte-only groups are on the strip;
    the what-if section says the step before and after."""
    from bwdiag.units import fmt_time

    d = real_diagnosis(H100_QWEN)
    page = _load(browser, d, "h100-qwen-plain")
    assert len(page.read_bytes()) < 250_000  # the strip and the what-if add little (99 kB before)
    _at_1280(browser)
    try:
        _check_key_columns_visible(browser)
        browser.screenshot(ARTIFACTS / "h100-qwen-1280.png")
        # The longest name is cut (ellipsis), whole in its title; a click shows it whole.
        cut = browser.evaluate("""(() => {
            const td = [...document.querySelectorAll('#k-table td.name')]
                .reduce((a, b) => (a.textContent.length >= b.textContent.length ? a : b));
            const k = td.parentNode.getAttribute('data-k');
            const before = [td.scrollWidth > td.clientWidth, td.title, td.textContent, td.offsetHeight];
            td.click();
            const after = document.querySelector('#k-table tr[data-k="' + k + '"] td.name');
            return before.concat([after.parentNode.classList.contains('open'),
                                  after.scrollWidth <= after.clientWidth, after.offsetHeight]);
        })()""")
        overflowed, title, text, h0, opened, fits, h1 = cut
        assert overflowed and title.startswith(text) and opened and fits and h1 > h0
    finally:
        _restore(browser)
    # The strip: one mark per byte-only group (15 on this trace), coloured by its bound.
    marks = browser.evaluate("""[...document.querySelectorAll('#bw-marks circle.pt')].map(c =>
        [+c.getAttribute('data-k'), [...c.classList].find(x => x.startsWith('b-')).slice(2)])""")
    assert len(marks) == _byte_only(d) == 15
    for k, bound in marks:
        row = browser.evaluate(f"bwdiagReport.data.kernels[{k}]")
        assert not row["flops"] and row["bytes"] > 0 and row["bound"] == bound
    title = browser.evaluate("document.getElementById('bw-title').textContent")
    assert title.startswith("Bandwidth strip: 15 groups that move bytes without FLOPs")
    assert "7.32 ms" in title  # 7,318.41 µs
    assert browser.evaluate("document.getElementById('unplotted-title').textContent") == (
        "Not on the chart: 0 of 38 groups")
    # What-if: the top findings applied; step × projected/window, from the diagnosis itself. Since
    # issue 14 the projection is the dependency graph's (34.9 → 31.4 ms; the subtraction said 19 ms):
    # once the top fusion is applied the GPU waits on the host, so the other kernel-side findings add
    # nothing and the host finding adds more than it saves alone.
    w, t = d.whatif, d.time
    assert w.graph_projected_us is not None
    head = browser.evaluate("document.getElementById('whatif-head').textContent")
    assert " ".join(head.split()) == (
        f"If you fix the top {len(w.findings)} findings: step {fmt_time(t.step_us)} → "
        f"{fmt_time(t.step_us * w.graph_projected_us / w.total_us)} ({w.total_us / w.graph_projected_us:.2f}× faster)")
    assert head.startswith("If you fix the top 6 findings: step 34.9 ms → 31.4 ms")
    rows = browser.evaluate("[...document.querySelectorAll('#whatif-table tbody tr')].map(r => r.textContent)")
    expected = [r["cap_reason"] if r["capped"] else "all of it" for r in build_context(d)["whatif"]["rows"]]
    assert len(rows) == len(w.findings) and all(e in r for e, r in zip(expected, rows))
    assert "all of it" in rows[0] and "nothing left to save" in rows[1]
    assert "Whatif" not in browser.evaluate("document.body.innerText")  # no raw dump left


def test_many_rank_report_from_a_real_analysis(browser, tmp_path):
    """40 rank files analysed for real (over the page's per-rank limit): the heat strip, the slowest
    ranks, the distributions and the folded kernel table render, with no error and no fetch."""
    from bwdiag.pipeline import analyze
    from tests.many_rank_traces import write_job

    n = 40
    write_job(tmp_path / "job", n, step_us=lambda r, s: 1000.0 + 10 * r + (900.0 if (r == 13 and s == 2) else 0.0))
    d = analyze([tmp_path / "job"])
    ARTIFACTS.mkdir(exist_ok=True)
    page = ARTIFACTS / "many-ranks.html"
    write_atomic(page, render_html(d).encode())
    browser.open(page)
    assert browser.evaluate("document.documentElement.getAttribute('data-rendered')") == "1"
    assert browser.problems() == []
    assert browser.requests() == [page.resolve().as_uri()]
    # 40 ranks × 3 steps: columns of min(24, 1100 // 40) = 24 px, rows of min(18, 240 // 3) = 18 px.
    assert browser.evaluate("[document.getElementById('heat-strip').width, "
                            "document.getElementById('heat-strip').height]") == [40 * 24, 3 * 18]
    # Rank 13's step 2 (1930 µs, 1.5× the 1195 µs median or more) is dark red; rank 0's step 1
    # (1000 µs, under the median) is white.
    pixels = browser.evaluate("""(() => {  // one readback of the whole strip
        const c = document.getElementById('heat-strip'), px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const at = (x, y) => [...px.slice((y * c.width + x) * 4, (y * c.width + x) * 4 + 4)];
        return [at(13 * 24 + 5, 18 + 5), at(5, 5)]; })()""")
    assert pixels == [[178, 24, 43, 255], [255, 255, 255, 255]]
    tip = browser.evaluate("""(() => {
        const c = document.getElementById('heat-strip');
        c.scrollIntoView();
        const b2 = c.getBoundingClientRect();
        c.dispatchEvent(new MouseEvent('mousemove', {clientX: b2.left + 13 * 24 + 5, clientY: b2.top + 18 + 5}));
        return document.getElementById('tooltip').textContent; })()""")
    assert tip.startswith("rank 13 · step 2: 2.03 ms")
    assert browser.evaluate("document.querySelectorAll('#slow-ranks tbody tr').length") == 10
    assert browser.evaluate("document.querySelector('#slow-ranks tbody td').textContent") == "39"
    assert browser.evaluate("document.querySelectorAll('#rank-histogram .bar').length") == 24
    assert browser.evaluate("document.querySelectorAll('#r-table').length") == 0  # no per-rank table
    assert browser.evaluate("document.querySelectorAll('#k-table tbody tr[data-k]').length") == 2
    heads = browser.evaluate("[...document.querySelectorAll('#k-table thead th')].map(t => t.textContent)")
    assert heads[0] == "Ranks"
    assert browser.evaluate("document.querySelector('#k-table tbody tr td').textContent") == "40"
    browser.screenshot(ARTIFACTS / "many-ranks.png", full_page=True)
    assert browser.problems() == []
