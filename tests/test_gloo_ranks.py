"""The retry of tests/gloo_ranks.py: once after torch's gloo teardown abort, never for other failures."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.gloo_ranks import GLOO_EXIT_ABORT, RANK_SIGABRT, run_ranks

# Fails with the given message while the counter file holds fewer than `fails` marks, then succeeds.
SCRIPT = """
import sys
from pathlib import Path
count, fails, message = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
n = len(count.read_text()) if count.exists() else 0
count.write_text("x" * (n + 1))
if n < fails:
    sys.stderr.write(message + "\\n")
    sys.exit(1)
"""


def _run(tmp_path: Path, fails: int, message: str):
    count = tmp_path / "count"
    cleared = []
    done = run_ranks([sys.executable, "-c", SCRIPT, str(count), str(fails), message],
                     before_retry=lambda: cleared.append(True), timeout=60)
    return done.returncode, len(count.read_text()), len(cleared)


def test_teardown_abort_is_retried_once(tmp_path):
    assert _run(tmp_path, 1, GLOO_EXIT_ABORT) == (0, 2, 1)
    (tmp_path / "sig").mkdir()
    assert _run(tmp_path / "sig", 1, f"exitcode  : -6 (pid: 3579)  {RANK_SIGABRT}") == (0, 2, 1)


def test_a_second_abort_and_other_failures_are_not_hidden(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert _run(tmp_path / "a", 2, GLOO_EXIT_ABORT) == (1, 2, 1)
    assert _run(tmp_path / "b", 1, "RuntimeError: a real failure") == (1, 1, 0)
