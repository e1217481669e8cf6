"""Failures while writing: a full disk, Ctrl-C, a crash between the two files.

Outputs are written atomically (temporary file in the same folder, then ``os.replace``), and a run
that fails leaves nothing of itself behind: not a half-written file, not one file of the pair, not
the folder it made, not a temporary file.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from bwdiag import pipeline
from bwdiag.cli import main
from bwdiag.errors import OutputError
from bwdiag.report import files as report_files

TRACE = Path(__file__).resolve().parent / "data" / "bad" / "reference_good.json.gz"


@pytest.fixture(scope="module")
def diagnosis():
    return pipeline.analyze([TRACE])


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_disk_full_mid_write_keeps_the_old_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "diagnosis.json"
    target.write_bytes(b'{"old": true}')

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError, match=r"cannot write .*diagnosis.json: No space left on device"):
        report_files.write_atomic(target, b'{"new": true}' * 1000)
    assert target.read_bytes() == b'{"old": true}'
    assert tree(tmp_path) == ["diagnosis.json"]  # the temporary file is gone


def test_ctrl_c_mid_write_keeps_the_old_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "report.html"
    target.write_bytes(b"<p>old</p>")

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        report_files.write_atomic(target, b"<p>new</p>")
    assert target.read_bytes() == b"<p>old</p>"
    assert tree(tmp_path) == ["report.html"]


def test_second_file_failing_removes_the_first_and_the_folder(tmp_path, monkeypatch, diagnosis):
    real = report_files.write_atomic

    def html_fails(path, data):
        if Path(path).name == "report.html":
            raise OutputError(f"cannot write {path}: No space left on device")
        real(path, data)

    monkeypatch.setattr(report_files, "write_atomic", html_fails)
    out = tmp_path / "new" / "out"
    with pytest.raises(OutputError, match="report.html"):
        pipeline.write_outputs(diagnosis, out)
    assert tree(tmp_path) == []  # diagnosis.json removed, then out/ and new/ that this run made


def test_interrupted_write_into_an_existing_folder_leaves_it_as_it_was(tmp_path, monkeypatch, diagnosis):
    (tmp_path / "notes.txt").write_text("mine")
    real = report_files.write_atomic

    def interrupted(path, data):
        if Path(path).name == "report.html":
            raise KeyboardInterrupt
        real(path, data)

    monkeypatch.setattr(report_files, "write_atomic", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pipeline.write_outputs(diagnosis, tmp_path)
    assert tree(tmp_path) == ["notes.txt"]


def test_cli_write_failure_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    def full(path, data):
        raise OutputError(f"cannot write {path}: No space left on device")

    monkeypatch.setattr(report_files, "write_atomic", full)
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["analyze", str(TRACE), "-o", str(out)])
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [f"bwdiag: error: cannot write {out / 'diagnosis.json'}: "
                                       "No space left on device"]
    assert not out.exists()


def test_cli_ctrl_c_during_analysis_leaves_nothing(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "analyze", interrupted)
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["analyze", str(TRACE), "-o", str(out)])
    assert res.exit_code == 130  # the shell's status for SIGINT, and one line (no click "Aborted!")
    assert res.stderr == "bwdiag: interrupted (Ctrl-C): stopped, no output written\n"
    assert tree(tmp_path) == []


def test_cli_writes_both_files_and_no_temporaries(tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["analyze", str(TRACE), "-o", str(out)])
    assert res.exit_code == 0, res.stderr
    assert tree(tmp_path) == ["out", "out/diagnosis.json", "out/report.html"]
