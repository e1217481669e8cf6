"""Packaging: every package and data file reaches a non-editable install."""

from __future__ import annotations

import tomllib

from tests.conftest import REPO


def test_every_package_is_listed_for_setuptools():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "bwdiag").rglob("__init__.py")}
    assert on_disk <= listed, f"add to pyproject [tool.setuptools] packages: {sorted(on_disk - listed)}"
    assert config["package-dir"]["bwdiag.templates"] == "templates"
    assert (REPO / "templates" / "report.html.j2").exists()
