"""The findings rules, in the order they run, and what each one skips.

Every rule is a pure function ``rule(ctx: RuleContext) -> list[RuleResult]`` in its own module: it
reads the context (the diagnosis, the per-rank tables, the typed timeline facts), returns its
findings each paired with what it acts on (:meth:`RuleContext.finding`), and changes nothing. A rule
with no evidence returns ``[]``.

``RULES`` below is the whole registry. A rule runs after every rule above it; ``skips`` names earlier
rules whose claimed activities this rule must not report again: :func:`run_rules` passes those rules'
results to it as ``ctx.prior``, and it reads them through ``ctx.claimed(rank_pos)``. That is the only
way results flow between rules. (Which findings overlap in *saving* is the what-if's business, not a
rule's: :mod:`.whatif` counts every kernel once.) The order also breaks ties: findings of equal
saving keep registry order.

Adding a rule:

1. write ``findings/<name>.py`` with one function ``def my_rule(ctx: RuleContext) -> list[RuleResult]``
   importing only :mod:`.base` (context and result), :mod:`.helpers` (shared helpers; a helper a
   second rule needs moves there — no rule imports another rule module) and packages outside
   ``findings/``; timeline facts come through the context's properties, never the diagnosis' sections directly;
2. add one line to ``RULES`` where it should run, ``Rule("my_rule", my_rule)`` (and its import
   above), with ``skips=("attention", ...)`` if it must leave alone what earlier rules claimed;
3. test it on a hand-built context (``tests/rule_context.py``, ``tests/test_rules_unit.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from bwdiag.diagnose.findings.attention import attention_materialisation
from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.batching import small_kernels
from bwdiag.diagnose.findings.comm_volume import communication_volume
from bwdiag.diagnose.findings.dispatch import host_overhead
from bwdiag.diagnose.findings.conversions import dtype_round_trips, layout_conversions
from bwdiag.diagnose.findings.fusion import fusion
from bwdiag.diagnose.findings.host import data_loader, host_bound, pageable_memcpy, sync_points
from bwdiag.diagnose.findings.host_ops import slow_host_work
from bwdiag.diagnose.findings.kv_cache import kv_cache_quantization
from bwdiag.diagnose.findings.launch import launch_overhead
from bwdiag.diagnose.findings.optimizer import per_parameter_optimizer
from bwdiag.diagnose.findings.overlap import exposed_collectives
from bwdiag.diagnose.findings.precision import bf16_to_fp8, fp32_on_vector_units
from bwdiag.diagnose.findings.quantization import weight_only_quantization
from bwdiag.diagnose.findings.sharding import fsdp_sharding


@dataclass(frozen=True)
class Rule:
    """One registry entry: a name later rules refer to, the function, and the rules it skips."""

    name: str
    fn: Callable[[RuleContext], list[RuleResult]]
    skips: tuple[str, ...] = ()

    def __call__(self, ctx: RuleContext) -> list[RuleResult]:
        return self.fn(ctx)


RULES: tuple[Rule, ...] = (
    # Rules that claim specific kernels run first: eager attention (the kernels between the bmms),
    # the per-parameter optimizer step, layout and cast conversions.
    Rule("attention", attention_materialisation),
    Rule("optimizer", per_parameter_optimizer),
    Rule("batching", small_kernels),
    Rule("layout", layout_conversions),
    Rule("cast", dtype_round_trips),
    # The generic fusion rule leaves what those reported alone (a chain through the softmax of an
    # eager attention is "use SDPA", not "fuse these ops"). Batching claims matrix kernels, which no
    # fusable run holds: nothing to skip.
    Rule("fusion", fusion, skips=("attention", "optimizer", "layout", "cast")),
    # GPU idle by cause. host_bound and launch_overhead split the same unexplained host wait by
    # helpers.looks_launch_bound (a fact of the trace, not a claim): exactly one of them reports it.
    Rule("sync", sync_points),
    Rule("data_loader", data_loader),
    # One op's own host work (a planner, a cache miss): left out of the wait the next two split.
    Rule("slow_host_work", slow_host_work),
    Rule("host_bound", host_bound),
    # CPU traces: the time between ops on the main thread (outside DataLoader spans, which
    # data_loader reports); it reads the optimizer rule's results only to point at its fix.
    Rule("host_overhead", host_overhead, skips=("optimizer",)),
    Rule("pageable_memcpy", pageable_memcpy),
    Rule("launch_overhead", launch_overhead),
    Rule("overlap", exposed_collectives),
    # What shrinks the collectives themselves (bf16 payloads) and, on gloo, the blocking ones.
    Rule("comm_volume", communication_volume),
    # FSDP's backward re-gathers (FULL_SHARD) → SHARD_GRAD_OP, from the trace's own all-gathers.
    Rule("fsdp_sharding", fsdp_sharding),
    Rule("fp32_tensor_cores", fp32_on_vector_units),
    Rule("fp8", bf16_to_fp8),
    Rule("weight_quantization", weight_only_quantization),
    Rule("kv_cache", kv_cache_quantization),
)


def check_order(rules: tuple[Rule, ...]) -> None:
    """Names are unique and every rule a rule skips runs before it (a programming error otherwise)."""
    seen: set[str] = set()
    for r in rules:
        if r.name in seen:
            raise ValueError(f"findings rule {r.name!r} is registered twice")
        late = [s for s in r.skips if s not in seen]
        if late:
            raise ValueError(f"findings rule {r.name!r} skips {late}, which must run before it in RULES")
        seen.add(r.name)


check_order(RULES)


def run_rules(ctx: RuleContext, rules: tuple[Rule, ...] = RULES) -> list[RuleResult]:
    """Every rule's results, in registry order; each rule sees the results of the rules it skips."""
    check_order(rules)
    by_rule: dict[str, tuple[RuleResult, ...]] = {}
    out: list[RuleResult] = []
    for r in rules:
        view = replace(ctx, prior={name: by_rule[name] for name in r.skips})
        by_rule[r.name] = tuple(r(view))
        out.extend(by_rule[r.name])
    return out
