"""The package layers only point down, and no two packages or modules import each other.

Layers, top to bottom (docs/ARCHITECTURE.md)::

    cli  →  capture  →  diff  →  pipeline  →  engine  →  report  →  diagnose  →  {costs, hardware}  →  trace
                                                            (leaves: bwdiag.errors, bwdiag.cache, bwdiag._version)

A module may import its own layer's modules and any layer below it; ``costs`` and ``hardware``
share a layer and do not import each other. Every import counts: module level, inside functions,
under ``TYPE_CHECKING``. A hidden function-level import still points the dependency up, and a
cycle hidden that way only waits for someone to move the import to the top of the file.

The walk is over source text (``ast``), so it needs no torch, no traces and imports nothing.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "bwdiag"

# Top to bottom: each layer's parts (the first dotted name under ``bwdiag``). ``bwdiag`` itself
# (``<root>``) is the public entry whose ``bwdiag.profile`` loads capture, so it sits with the CLI.
# Parts that share a layer (costs, hardware) do not import each other.
LAYER_ORDER: tuple[tuple[str, ...], ...] = (
    ("<root>", "__main__", "cli", "cli_views", "interrupts"),
    ("integrations",),  # framework callbacks over capture (bwdiag.profile)
    ("capture",),
    ("diff",),
    ("pipeline",),
    ("engine",),  # where the map runs: local worker processes or Ray (bwdiag.engine)
    ("report",),
    ("diagnose",),
    ("costs", "hardware"),
    ("trace",),
    ("errors", "cache", "_version", "units"),
)
LAYERS: dict[str, int] = {p: len(LAYER_ORDER) - i for i, parts in enumerate(LAYER_ORDER) for p in parts}
# One layer, one unit: the CLI entry modules may import each other.
_UNIT = {"<root>": "cli", "__main__": "cli", "cli_views": "cli", "interrupts": "cli"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@lru_cache(maxsize=1)
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return _modules()[name].name == "__init__.py"


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not _is_package(importer):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _target(name: str) -> str | None:
    """The deepest bwdiag module that ``import name`` executes (None outside bwdiag)."""
    mods = _modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


@lru_cache(maxsize=1)
def _edges() -> dict[str, dict[str, int]]:
    """importer → {imported module: line of the first such import}."""
    mods = _modules()
    out: dict[str, dict[str, int]] = {m: {} for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, node)
                # ``from pkg import sub`` imports the submodule when there is one, else a name of pkg.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            for t in targets:
                tgt = _target(t)
                if tgt and tgt != mod:
                    out[mod].setdefault(tgt, node.lineno)
    return out


def _layer_part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def _part(module: str) -> str:
    """The package (or top-level module) a module belongs to, for layers and package cycles."""
    part = _layer_part(module)
    return _UNIT.get(part, part)


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (iterative DFS, deterministic order)."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for start in sorted(graph):
        if state.get(start):
            continue
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph.get(start, ())))]
        path = [start]
        state[start] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            nxt = todo.pop(0)
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, sorted(graph.get(nxt, ()))))
    return None


def _all_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles found one at a time, cutting the closing edge of each, so every one is reported."""
    g = {k: set(v) for k, v in graph.items()}
    found = []
    while (cyc := _find_cycle(g)) is not None:
        found.append(cyc)
        g[cyc[-2]].discard(cyc[-1])
    return found


def _where(a: str, b: str) -> str:
    return f"{_modules()[a].relative_to(PACKAGE_DIR.parent)}:{_edges()[a][b]}"


def test_every_module_has_a_layer():
    unknown = sorted({_layer_part(m) for m in _modules()} - set(LAYERS))
    assert not unknown, f"give these parts of bwdiag a layer in tests/test_layers.py: {unknown}"


def test_the_walk_sees_function_level_imports():
    # The walker itself: bwdiag/__init__.py loads capture only inside __getattr__.
    assert "bwdiag.capture.context" in _edges()["bwdiag"]


def test_the_walk_resolves_relative_imports_and_finds_cycles():
    # bwdiag/costs/__init__.py: ``from .categories import ...``
    assert "bwdiag.costs.categories" in _edges()["bwdiag.costs"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    assert len(_all_cycles({"a": {"b"}, "b": {"a", "c"}, "c": {"b"}})) == 2


def test_imports_point_down():
    bad = []
    for mod, targets in _edges().items():
        for tgt in targets:
            a, b = _part(mod), _part(tgt)
            if a != b and LAYERS[b] >= LAYERS[a]:
                bad.append(f"{mod} ({a}) -> {tgt} ({b})   at {_where(mod, tgt)}")
    assert not bad, "imports that point up (or sideways) the layers:\n  " + "\n  ".join(bad)


def test_no_cycle_between_packages():
    graph: dict[str, set[str]] = {}
    for mod, targets in _edges().items():
        for tgt in targets:
            if _part(mod) != _part(tgt):
                graph.setdefault(_part(mod), set()).add(_part(tgt))
    cycles = _all_cycles(graph)

    def show(cyc: list[str]) -> str:
        links = []
        for a, b in zip(cyc, cyc[1:]):
            ex = next((m, t) for m, ts in _edges().items() for t in ts
                      if _part(m) == a and _part(t) == b)
            links.append(f"{a} -> {b} (e.g. {ex[0]} -> {ex[1]} at {_where(*ex)})")
        return " -> ".join(cyc) + "\n    " + "\n    ".join(links)

    assert not cycles, "package cycles:\n  " + "\n  ".join(show(c) for c in cycles)


def test_no_cycle_between_modules():
    graph = {m: set(ts) for m, ts in _edges().items()}
    cycles = _all_cycles(graph)

    def show(cyc: list[str]) -> str:
        return " -> ".join(cyc) + "\n    " + "\n    ".join(
            f"{a} -> {b} at {_where(a, b)}" for a, b in zip(cyc, cyc[1:]))

    assert not cycles, "module cycles:\n  " + "\n  ".join(show(c) for c in cycles)
