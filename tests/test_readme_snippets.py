"""The README's Integrations section runs as written: every ``python`` and ``bash`` block in it is
run in a fresh folder (the notebook one in an IPython shell, as Jupyter runs a cell), and what each
promises to write is there."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE_TRACES

FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


def _section_blocks() -> dict[str, list[tuple[str, str]]]:
    """``{### heading: [(language, code)]}`` for the README's ``## Integrations`` section."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Integrations\n", 1)[1].split("\n## ", 1)[0]
    blocks: dict[str, list[tuple[str, str]]] = {}
    for part in section.split("\n### ")[1:]:
        heading, body = part.split("\n", 1)
        blocks[heading.strip()] = FENCE.findall(body)
    return blocks


BLOCKS = _section_blocks()


def test_the_section_has_one_runnable_example_per_integration() -> None:
    runnable = {h: [lang for lang, _ in b if lang in ("python", "bash")] for h, b in BLOCKS.items()}
    assert runnable == {"PyTorch Lightning": ["python"], "Hugging Face Trainer": ["python"],
                        "Notebooks": ["python"], "Perfetto / chrome://tracing": ["bash"], "CI": ["bash"]}


def _env(tmp: Path) -> dict[str, str]:
    shim = tmp / "bin"
    shim.mkdir()
    # `bwdiag` as the README types it, run from this checkout with this interpreter.
    (shim / "bwdiag").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m bwdiag "$@"\n')
    (shim / "bwdiag").chmod(0o755)
    return {"PATH": f"{shim}:/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp),
            "XDG_CACHE_HOME": str(tmp / "cache"), "HF_HUB_OFFLINE": "1"}


def _code(heading: str, language: str) -> str:
    (code,) = [c for lang, c in BLOCKS[heading] if lang == language]
    return code


@pytest.mark.parametrize("heading, writes", [
    ("PyTorch Lightning", "runs/lightning"),
    ("Hugging Face Trainer", "runs/bert"),
])
def test_framework_examples_run_as_written(tmp_path: Path, heading: str, writes: str) -> None:
    pytest.importorskip({"PyTorch Lightning": "lightning", "Hugging Face Trainer": "transformers"}[heading])
    (tmp_path / "example.py").write_text(_code(heading, "python"))
    result = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=_env(tmp_path),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / writes
    assert (out / "diagnosis.json").exists() and (out / "report.html").exists()
    assert "report: " + writes + "/report.html" in result.stderr


NOTEBOOK = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
cell = shell.run_cell(open("cell.py").read())
cell.raise_error()
shown, _ = shell.display_formatter.format(cell.result)
print(json.dumps({"type": type(cell.result).__name__, "html": shown.get("text/html", ""),
                  "slowest": type(shell.user_ns["slowest"]).__name__}))
"""


def test_notebook_example_displays_the_report(tmp_path: Path) -> None:
    pytest.importorskip("IPython")
    import json

    (tmp_path / "cell.py").write_text(_code("Notebooks", "python"))
    (tmp_path / "nb.py").write_text(NOTEBOOK)
    result = subprocess.run([sys.executable, "nb.py"], cwd=tmp_path, env=_env(tmp_path),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    shown = json.loads(result.stdout.strip().splitlines()[-1])
    assert shown["type"] == "DiagnosisView" and shown["slowest"] == "DataFrame"
    assert shown["html"].startswith("<iframe ") and "srcdoc=" in shown["html"]


def test_ci_example_runs_as_written(tmp_path: Path) -> None:
    os.symlink(SAMPLE_TRACES, tmp_path / "sample_traces")  # the README's commands run from the checkout
    result = subprocess.run(["bash", "-euc", _code("CI", "bash")], cwd=tmp_path, env=_env(tmp_path),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert summary.startswith("### bwdiag: ") and "**Top findings**" in summary
    assert (tmp_path / "bwdiag-ci" / "report.html").exists()


def test_perfetto_example_runs_as_written(tmp_path: Path) -> None:
    import gzip

    os.symlink(SAMPLE_TRACES, tmp_path / "sample_traces")
    result = subprocess.run(["bash", "-euc", _code("Perfetto / chrome://tracing", "bash")], cwd=tmp_path,
                            env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "annotated trace: annotated.json.gz" in result.stdout
    doc = json.loads(gzip.decompress((tmp_path / "annotated.json.gz").read_bytes()))
    marked = [e for e in doc["traceEvents"] if "bwdiag" in (e.get("args") or {})]
    assert marked and all(e["args"]["bwdiag"]["bound"] for e in marked)
    assert any(e.get("ph") == "M" and e.get("args") == {"name": "bwdiag"} for e in doc["traceEvents"])
    assert (tmp_path / "bwdiag-perfetto" / "report.html").exists()
