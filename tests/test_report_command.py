"""``bwdiag report diagnosis.json -o DIR``: the page and the summary again, from the JSON alone."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import H100_BERT, REPO, SAMPLE_TRACES, shared_trace


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bwdiag", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, env=_env())


def _env() -> dict:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("COLUMNS", None)
    return env


def _summary(stdout: str) -> list[str]:
    """The terminal summary without the lines naming the files written."""
    return [line for line in stdout.splitlines() if not line.startswith(("json: ", "html: "))]


@pytest.mark.parametrize("trace", ["shared", "sample"])
def test_rerendered_page_and_summary_are_the_analysis(trace, tmp_path):
    path = shared_trace(H100_BERT) if trace == "shared" else SAMPLE_TRACES / "ddp_gloo_cpu"
    first = _cli("analyze", str(path), "-o", str(tmp_path / "d1"))
    assert first.returncode == 0, first.stderr
    (tmp_path / "elsewhere").mkdir()
    again = _cli("report", str(tmp_path / "d1" / "diagnosis.json"), "-o", str(tmp_path / "d2"),
                 cwd=tmp_path / "elsewhere")  # no trace needed, nor the folder it was analysed from
    assert again.returncode == 0, again.stderr
    assert _summary(again.stdout) == _summary(first.stdout)  # the summary is each command's stdout
    assert again.stdout.splitlines()[-1] == f"html: {tmp_path / 'd2' / 'report.html'}"
    assert (tmp_path / "d2" / "report.html").read_bytes() == (tmp_path / "d1" / "report.html").read_bytes()
    assert sorted(p.name for p in (tmp_path / "d2").iterdir()) == ["report.html"]


def test_report_never_overwrites_without_force(tmp_path):
    out = tmp_path / "d1"
    assert _cli("analyze", str(SAMPLE_TRACES / "decode_kv_cache_cpu"), "-o", str(out)).returncode == 0
    before = (out / "report.html").read_bytes()
    (out / "report.html").write_text("mine")
    refused = _cli("report", str(out / "diagnosis.json"))  # default: beside the JSON
    assert refused.returncode == 2
    assert refused.stderr.strip() == (f"bwdiag: error: {out / 'report.html'}: already exists; pass --force to "
                                      "overwrite or choose another -o/--out")
    assert (out / "report.html").read_text() == "mine"
    forced = _cli("report", str(out), "--force")  # the folder names its diagnosis.json
    assert forced.returncode == 0, forced.stderr
    assert (out / "report.html").read_bytes() == before


def test_report_of_a_damaged_or_foreign_file_is_one_line(tmp_path):
    bad = tmp_path / "diagnosis.json"
    bad.write_text('{"schema": "bwdiag/diagnosis@2", "source": ')
    proc = _cli("report", str(bad), "-o", str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"bwdiag: error: {bad}: not valid JSON") and proc.stderr.count("\n") == 1
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [], "schemaVersion": 1}))
    proc = _cli("report", str(trace), "-o", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr == (f"bwdiag: error: {trace}: not a bwdiag diagnosis: diagnosis: schema None is not a "
                           "bwdiag diagnosis (expected one of bwdiag/diagnosis@1, bwdiag/diagnosis@2)\n")
    assert not (tmp_path / "out").exists()  # nothing written for a file that is not a diagnosis


def test_rerendering_needs_no_analysis_stack(tmp_path):
    """The page comes from the JSON alone: no pandas, numpy or torch is imported for it."""
    from tests.report_fixtures import gpu_diagnosis

    from bwdiag.report.json_out import render_json

    src = tmp_path / "diagnosis.json"
    src.write_bytes(render_json(gpu_diagnosis()))
    code = ("import sys; from bwdiag.report.rerender import rerender; "
            f"rerender({str(src)!r}, {str(tmp_path / 'out')!r}); "
            "print(sorted(m for m in ('pandas', 'numpy', 'torch') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    assert (tmp_path / "out" / "report.html").stat().st_size > 1000
