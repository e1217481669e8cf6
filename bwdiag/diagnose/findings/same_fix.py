"""Findings one fix resolves together: the ``torch.compile`` target each finding's fix names.

Compiling a model removes the Python between its ops (a ``host_bound`` finding) *and* fuses the
elementwise chains inside it (its ``fusion`` findings): one line of code, several findings. Ranked
one by one, each finding shows its own saving, which is what the list must add up without counting
a kernel twice; but a user who applies the top finding's fix gets all of them, and ``bwdiag diff``
(or a benchmark) measures all of them. So each finding whose fix also resolves others names them
(``Finding.same_fix``) and carries the saving of the set applied together
(``Finding.fix_saving_us``: re-timed on the dependency graph where there is one, each node changed
once; else the what-if's subtraction).

A fix's *scope* is read from its first line, the line to paste (the rules write them:
``model = torch.compile(model)``, ``train_step = torch.compile(train_step)``,
``loss_fn = torch.compile(loss_fn)``, ``fn = torch.compile(fn)``, ``self.model =
torch.compile(self.model)``, ``TrainingArguments(..., torch_compile=True)``). One scope covers another
when compiling the first compiles the second's code too:

- the same target covers itself (``self.model`` and the HF Trainer's are the model), except ``fn``:
  "the function that runs these ops" may be a different function each time;
- on a training trace, ``train_step`` — forward, loss and backward — covers every target;
- a ``mode`` that captures CUDA graphs (``reduce-overhead``, ``max-autotune``) covers the plain mode,
  never the other way round: plain compiling does not replay graphs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

#: ``lhs = torch.compile(target[, mode=...])`` on the fix's first line.
_COMPILE = re.compile(r"^\s*(?:self\.)?[\w.]+\s*=\s*torch\.compile\(\s*(?:self\.)?(?P<target>[\w.]+)(?P<args>[^)]*)\)")
_HF_COMPILE = re.compile(r"^\s*TrainingArguments\(.*torch_compile\s*=\s*True")
_GRAPH_MODES = re.compile(r"mode\s*=\s*[\"'](?:reduce-overhead|max-autotune)")
#: Targets that name "some function": never assumed to be the same one twice.
_UNNAMED = frozenset({"fn"})
#: The whole training step: covers every target on a training trace.
_WHOLE_STEP = "train_step"


@dataclass(frozen=True)
class CompileScope:
    """What a fix compiles: its target (``model``, ``train_step``, ``loss_fn``, ``fn``, …) and whether
    its mode captures CUDA graphs."""

    target: str
    graphs: bool = False


def compile_scope(fix: str | None) -> CompileScope | None:
    """The scope of a fix whose first line compiles something; None for any other fix."""
    first = (fix or "").strip().splitlines()[:1]
    if not first:
        return None
    if _HF_COMPILE.match(first[0]):
        return CompileScope("model")
    m = _COMPILE.match(first[0])
    if m is None:
        return None
    return CompileScope(m.group("target"), bool(_GRAPH_MODES.search(m.group("args"))))


def covers(a: CompileScope, b: CompileScope, training: bool) -> bool:
    """Whether applying fix ``a`` also applies fix ``b`` (module docstring)."""
    if b.graphs and not a.graphs:
        return False
    if training and a.target == _WHOLE_STEP:
        return True
    return a.target == b.target and a.target not in _UNNAMED


def same_fix_sets(fixes: Sequence[str | None], training: bool) -> list[tuple[int, ...]]:
    """Per fix, the positions of the *other* fixes it also applies (empty for most)."""
    scopes = [compile_scope(f) for f in fixes]
    return [tuple(j for j, b in enumerate(scopes) if j != i and b is not None and covers(a, b, training))
            if a is not None else () for i, a in enumerate(scopes)]
