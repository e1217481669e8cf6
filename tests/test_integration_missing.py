"""Without its framework, importing an integration fails with one line naming the extra to install,
as a BwdiagError that is also an ImportError; a broken framework install says what failed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import REPO

CHECK = textwrap.dedent(
    """
    import importlib, sys
    from bwdiag.errors import BwdiagError, MissingExtra
    blocked = sys.argv[1].split(",")
    for name in blocked:
        sys.modules[name] = None  # what `import name` meets when the package is not installed
    try:
        importlib.import_module(sys.argv[2])
    except ImportError as err:
        assert isinstance(err, MissingExtra) and isinstance(err, BwdiagError), type(err)
        print(str(err))
    else:
        print("imported")
    """
)


def _import(tmp_path: Path, blocked: str, module: str, extra_path: Path | None = None) -> str:
    (tmp_path / "check.py").write_text(CHECK)
    path = [str(REPO)] + ([str(extra_path)] if extra_path else [])
    result = subprocess.run([sys.executable, "check.py", blocked, module], cwd=tmp_path,
                            env={"PYTHONPATH": ":".join(path), "PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_missing_lightning_names_the_extra(tmp_path: Path) -> None:
    out = _import(tmp_path, "lightning,pytorch_lightning", "bwdiag.integrations.lightning")
    assert out == ('bwdiag.integrations.lightning needs Lightning, which is not installed: '
                   'pip install "bwdiag[lightning]"\n')


def test_missing_transformers_names_the_extra(tmp_path: Path) -> None:
    out = _import(tmp_path, "transformers", "bwdiag.integrations.transformers")
    assert out == ('bwdiag.integrations.transformers needs transformers, which is not installed: '
                   'pip install "bwdiag[transformers]"\n')


def test_a_broken_install_says_what_failed(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "transformers"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import tokenizers_that_are_not_there\n")
    out = _import(tmp_path, "_nothing_", "bwdiag.integrations.transformers", extra_path=tmp_path / "site")
    assert out == ("bwdiag.integrations.transformers could not import transformers (No module named "
                   "'tokenizers_that_are_not_there'); reinstall it: pip install \"bwdiag[transformers]\"\n")
