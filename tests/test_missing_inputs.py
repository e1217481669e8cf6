"""A missing input skips a test on a developer's machine and fails it under CI (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests import conftest
from tests.conftest import REPO


def test_missing_trace_skips_outside_ci(monkeypatch):
    monkeypatch.setattr(conftest, "UNDER_CI", False)
    monkeypatch.setattr(conftest, "SHARED_TRACES", REPO / "no-such-traces")
    with pytest.raises(pytest.skip.Exception, match="real trace a/b.json.gz not found"):
        conftest.shared_trace("a/b.json.gz")


def test_missing_trace_fails_under_ci(monkeypatch):
    monkeypatch.setattr(conftest, "UNDER_CI", True)
    monkeypatch.setattr(conftest, "SHARED_TRACES", REPO / "no-such-traces")
    with pytest.raises(pytest.fail.Exception, match="CI=true: a missing input fails the test"):
        conftest.shared_trace("a/b.json.gz")


def test_no_traces_folder_still_gives_the_parametrized_test_one_case(monkeypatch):
    monkeypatch.setattr(conftest, "SHARED_TRACES", REPO / "no-such-traces")
    assert conftest.shared_trace_names() == [conftest.NO_SHARED_TRACES]  # not pytest's silent empty set


@pytest.mark.parametrize(("ci", "outcome"), [("true", "1 failed"), ("", "1 skipped")])
def test_ci_variable_and_traces_folder_come_from_the_environment(tmp_path, ci, outcome):
    test = tmp_path / "test_needs_trace.py"
    test.write_text(textwrap.dedent("""
        from tests.conftest import shared_trace

        def test_it():
            shared_trace("x.json.gz")
    """))
    env = {"PATH": "/usr/bin:/bin", "CI": ci, "BWDIAG_SHARED_TRACES": str(tmp_path / "none"),
           "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:warnings",
                           str(test)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert outcome in proc.stdout, proc.stdout + proc.stderr
