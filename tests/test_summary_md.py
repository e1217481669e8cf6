"""``bwdiag analyze … --summary-md FILE``: the Markdown summary for CI job summaries / PR comments."""

from __future__ import annotations

import gzip
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

from conftest import REPO, SAMPLE_TRACES
from bwdiag.report.markdown import md_text, render_markdown
from bwdiag.units import fmt_time
from tests.report_fixtures import HOSTILE, gpu_diagnosis


def _cells(row: str) -> list[str]:
    """A Markdown table row split on its unescaped pipes."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def test_analyze_writes_and_appends_the_summary(tmp_path: Path) -> None:
    trace = SAMPLE_TRACES / "train_transformer_cpu" / "rank0.pt.trace.json.gz"
    summary = tmp_path / "summary.md"
    summary.write_text("## Earlier step\n", encoding="utf-8")  # a job summary other steps wrote to
    result = subprocess.run([sys.executable, "-m", "bwdiag", "analyze", str(trace), "-o", str(tmp_path / "out"),
                             "--summary-md", str(summary)], cwd=REPO, capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stderr
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## Earlier step\n\n### bwdiag: ")
    d = json.loads((tmp_path / "out" / "diagnosis.json").read_text())

    # The step time cell: the median of the trace's complete ProfilerStep spans, read from the raw trace.
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    durs = [e["dur"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    lines = text.splitlines()
    header = lines.index("| Step time | Projected after the fixes | Bound by |")
    step, projected, bound = _cells(lines[header + 2])
    assert step.startswith(f"**{fmt_time(statistics.median(durs))}** (median of {len(durs)}")
    assert bound.startswith(max(d["time"]["by_bound"], key=d["time"]["by_bound"].get))

    # One row per finding, largest saving first, with its saving per step.
    rows = [_cells(line) for line in lines if re.match(r"^\| \d+ \|", line)]
    findings = d["findings"]
    assert len(rows) == min(5, len(findings)) >= 1
    for row, f in zip(rows, findings):
        assert row[1] == md_text(f["title"]) and row[3] == md_text(f["kind"])
        assert row[2].startswith(fmt_time(f["est_saving_per_step_us"]) + " (")
    assert f"report: `{tmp_path / 'out' / 'report.html'}`" in text

    # A folder in the way is one line and exit status 2.
    bad = subprocess.run([sys.executable, "-m", "bwdiag", "analyze", str(trace), "-o", str(tmp_path / "out2"),
                          "--summary-md", str(tmp_path / "no-such-dir" / "s.md")], cwd=REPO,
                         capture_output=True, text=True, timeout=240)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.splitlines()[-1] == (f"bwdiag: error: cannot write the Markdown summary "
                                           f"{tmp_path / 'no-such-dir' / 's.md'}: No such file or directory")


def test_names_from_the_trace_stay_text_in_one_cell() -> None:
    text = render_markdown(gpu_diagnosis())
    assert HOSTILE not in text and not re.search(r"(?<!\\)<(img|/script)", text)  # every < escaped
    table = [line for line in text.splitlines() if line.startswith("|")]
    widths = {len(_cells(line)) for line in table}
    assert widths == {3, 4}  # the verdict table and the findings table; no cell split by a name
    hostile = next(line for line in table if "onerror" in line)
    assert md_text(HOSTILE) in hostile and r"\<img src=x onerror=alert(1)\>" in hostile
    assert "over the window" in text  # the fixture's findings have no per-step saving
