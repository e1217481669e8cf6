"""`bwdiag run x.py ARGS` against `python x.py ARGS`: stdout, stderr (minus `bwdiag: ` lines), exit.

The scripts here do not import torch: what is tested is the run contract (argv, sys.path, __file__,
exit statuses, tracebacks), which must hold before any capture starts. They run in a few hundred ms.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import os, sys
    print("argv", sys.argv)
    print("path0", sys.path[0])
    print("file", __file__, __name__, __spec__, __package__)
    print("cwd", os.getcwd())
    print("to stderr", file=sys.stderr)
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "exit":
        sys.exit(int(sys.argv[2]))
    if mode == "exit-msg":
        sys.exit("fatal: " + sys.argv[2])
    if mode == "raise":
        def inner():
            raise ValueError("boom " + sys.argv[2])
        inner()
    if mode == "chained":
        try:
            {}["k"]
        except KeyError as err:
            raise RuntimeError("while handling") from err
    if mode == "atexit":
        import atexit
        atexit.register(lambda: print("atexit ran", flush=True))
    if mode == "interrupt":
        import atexit
        atexit.register(lambda: print("atexit ran", flush=True))
        raise KeyboardInterrupt
    if mode == "argparse":
        import argparse
        p = argparse.ArgumentParser(description="the script's own help")
        p.add_argument("--lr", type=float, required=True)
        print("lr", p.parse_args(sys.argv[2:]).lr)
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=60)


def _own_lines_removed(stderr: str) -> str:
    return "".join(l for l in stderr.splitlines(keepends=True) if not l.startswith("bwdiag: "))


@pytest.fixture()
def script(tmp_path: Path) -> Path:
    sub = tmp_path / "sub"
    sub.mkdir()
    path = sub / "x.py"
    path.write_text(SCRIPT)
    return path


def _compare(script: Path, *args: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    cwd = script.parent.parent
    rel = str(script.relative_to(cwd))
    plain = _run([sys.executable, rel, *args], cwd)
    ours = _run([sys.executable, "-m", "bwdiag", "run", rel, *args], cwd)
    assert ours.stdout == plain.stdout
    assert _own_lines_removed(ours.stderr) == plain.stderr
    assert ours.returncode == plain.returncode
    return plain, ours


@pytest.mark.parametrize(
    "args, status",
    [
        ((), 0),
        (("exit", "3"), 3),
        (("exit", "0"), 0),
        (("exit-msg", "disk full"), 1),
        (("raise", "at step 4"), 1),
        (("chained",), 1),
        (("argparse", "--lr", "3e-4"), 0),
        (("argparse", "--help"), 0),
        (("argparse",), 2),  # argparse's own usage error
        (("atexit",), 0),  # the script's atexit handlers run after a normal end, as under python
    ],
)
def test_run_matches_python(script: Path, args: tuple[str, ...], status: int) -> None:
    plain, ours = _compare(script, *args)
    assert plain.returncode == status
    # The script saw what python gives it (not bwdiag's argv or folder).
    assert f"argv ['sub/x.py'{''.join(', ' + repr(a) for a in args)}]" in ours.stdout
    assert f"path0 {script.parent}" in ours.stdout
    assert f"file {script} __main__ None None" in ours.stdout
    if args == ("atexit",):  # bwdiag's own quick exit (after analyze) must never skip the script's handlers
        assert ours.stdout.endswith("atexit ran\n")


def test_exception_traceback_has_no_bwdiag_frames(script: Path) -> None:
    _, ours = _compare(script, "raise", "now")
    tb = _own_lines_removed(ours.stderr)
    assert tb.splitlines()[-1] == "ValueError: boom now"
    assert "bwdiag" not in tb and "runpy" not in tb and "click" not in tb
    assert tb.count('File "') == 2  # <module> and inner(), as under python


def test_script_help_passes_through(script: Path) -> None:
    plain, ours = _compare(script, "argparse", "--help")
    assert "the script's own help" in ours.stdout
    assert "usage: x.py" in ours.stdout


def test_keyboard_interrupt_exits_by_sigint_after_atexit(script: Path) -> None:
    plain, ours = _compare(script, "interrupt")
    assert plain.returncode == -signal.SIGINT
    assert "atexit ran" in ours.stdout
    assert _own_lines_removed(ours.stderr).splitlines()[-1] == "KeyboardInterrupt"


def test_module_mode_matches_python_dash_m(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(SCRIPT)
    plain = _run([sys.executable, "-m", "pkg.mod", "exit", "4"], tmp_path)
    ours = _run([sys.executable, "-m", "bwdiag", "run", "-m", "pkg.mod", "exit", "4"], tmp_path)
    assert plain.returncode == ours.returncode == 4
    address = re.compile(r"0x[0-9a-f]+")  # __spec__ shows its loader's id
    assert address.sub("0x", ours.stdout) == address.sub("0x", plain.stdout)
    assert f"argv ['{pkg / 'mod.py'}', 'exit', '4']" in ours.stdout
    assert f"path0 {tmp_path}" in ours.stdout
    raised = _run([sys.executable, "-m", "bwdiag", "run", "-m", "pkg.mod", "raise", "x"], tmp_path)
    assert raised.returncode == 1
    assert raised.stderr.splitlines()[-1] == "ValueError: boom x"


@pytest.mark.parametrize("name", ["no.such.module", "nosuch", "pkg.missing", "pkg"])
def test_a_module_that_cannot_run_gets_pythons_one_line(tmp_path: Path, name: str) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")  # a package without __main__
    plain = _run([sys.executable, "-m", name], tmp_path)
    ours = _run([sys.executable, "-m", "bwdiag", "run", "-m", name], tmp_path)
    assert plain.returncode == ours.returncode == 1
    assert ours.stderr == plain.stderr and len(plain.stderr.splitlines()) == 1
    assert ours.stdout == plain.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg"]  # no output folder left


def test_unwritable_output_fails_before_the_script_starts(tmp_path: Path) -> None:
    marker = tmp_path / "script-ran"
    (tmp_path / "s.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = _run(
        [sys.executable, "-m", "bwdiag", "run", "-o", str(blocker / "out"), "s.py"], tmp_path
    )
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bwdiag: error: cannot create output folder")
    assert not marker.exists()


def test_existing_report_needs_force(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text("print('ran')\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("old")
    refused = _run([sys.executable, "-m", "bwdiag", "run", "-o", "out", "s.py"], tmp_path)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "report.html" in refused.stderr and "--force" in refused.stderr
    forced = _run([sys.executable, "-m", "bwdiag", "run", "--force", "-o", "out", "s.py"], tmp_path)
    assert forced.returncode == 0 and forced.stdout == "ran\n"


def test_missing_script_and_bad_options_are_one_line_errors(tmp_path: Path) -> None:
    missing = _run([sys.executable, "-m", "bwdiag", "run", "nope.py"], tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.startswith("bwdiag: error: can't open file") and missing.stderr.count("\n") == 1
    (tmp_path / "s.py").write_text("print('ran')\n")
    for bad, words in [
        (["--active", "0"], "active must be >= 1"),
        (["--wait", "-1"], "wait must be >= 0"),
        (["--step-on", "epoch"], "unknown step marker"),
        (["--step-on", "time:-2"], "positive number of seconds"),
    ]:
        result = _run([sys.executable, "-m", "bwdiag", "run", *bad, "s.py"], tmp_path)
        assert result.returncode == 2, bad
        assert result.stdout == ""
        assert result.stderr.startswith("bwdiag: error: ") and words in result.stderr


def test_no_torch_script_leaves_no_folder(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text("print('ran')\n")
    result = _run([sys.executable, "-m", "bwdiag", "run", "s.py"], tmp_path)
    assert result.returncode == 0
    assert "nothing was recorded" in result.stderr
    assert not list(tmp_path.glob("bwdiag-*"))
