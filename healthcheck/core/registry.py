"""The check registry: one decorator registers a check, in one place.

A check is a plain function that receives facts (typed values a probe gathered and a
parser made) and the node's limits, and returns findings and metrics. It never prints,
exits, sleeps, drains or reads a config file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Union

from healthcheck.core.catalogue import FindingSpec
from healthcheck.core.model import Finding, Metric

TIERS = ("quick", "standard", "deep")
# Contexts that are not tiers: the epilogue runs what a job may have left behind.
CONTEXTS = ("epilogue",)

CheckOutput = Iterable[Union[Finding, Metric]]
CheckFn = Callable[..., CheckOutput]


class NotApplicable(Exception):
    """Raised by a check when it does not apply to this node (its status becomes SKIP)."""


@dataclass(frozen=True)
class CheckSpec:
    name: str  # family.aspect
    fn: CheckFn
    tiers: frozenset[str]
    needs: tuple[str, ...]  # fact names, passed to fn positionally in this order
    findings: tuple[FindingSpec, ...]
    budget_s: float
    summary: str = field(default="")
    # limits -> reason to skip before any fact is gathered (keeps the prologue cheap)
    applies: Optional[Callable[[Any], Optional[str]]] = None
    # facts passed after `needs` (and before limits) that may be missing: None when
    # they could not be gathered, instead of making the check ERROR
    optional: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def finding_ids(self) -> frozenset[str]:
        return frozenset(spec.id for spec in self.findings)


REGISTRY: dict[str, CheckSpec] = {}


def tiers_from(lowest: str) -> frozenset[str]:
    """Tiers are cumulative: a quick check also runs in standard and deep."""
    return frozenset(TIERS[TIERS.index(lowest) :])


def check(
    name: str,
    *,
    tier: str | Iterable[str],
    needs: Iterable[str],
    findings: Iterable[FindingSpec],
    budget_s: float = 2.0,
    applies: Optional[Callable[[Any], Optional[str]]] = None,
    optional: Iterable[str] = (),
) -> Callable[[CheckFn], CheckFn]:
    """Register `fn` as check `name`.

    `tier` is the lowest tier the check runs in (tiers are cumulative) or an explicit
    set of tiers and contexts. The first line of the function's docstring states the
    invariant the check guards and is shown by `hc checks list`.
    """
    if isinstance(tier, str):
        tiers = tiers_from(tier) if tier in TIERS else frozenset({tier})
    else:
        tiers = frozenset(tier)
    unknown = tiers - set(TIERS) - set(CONTEXTS)
    if unknown:
        raise ValueError(f"check {name}: unknown tier(s) {sorted(unknown)}")

    def register(fn: CheckFn) -> CheckFn:
        if name in REGISTRY:
            raise ValueError(f"check {name} registered twice")
        doc = (fn.__doc__ or "").strip().splitlines()
        REGISTRY[name] = CheckSpec(
            name=name,
            fn=fn,
            tiers=tiers,
            needs=tuple(needs),
            findings=tuple(findings),
            budget_s=budget_s,
            summary=doc[0] if doc else "",
            applies=applies,
            optional=tuple(optional),
        )
        return fn

    return register


def select(tier: str, names: Iterable[str] = ()) -> list[CheckSpec]:
    """The registered checks for `tier` (or context), optionally narrowed to `names`.

    A name may be a whole family ("ib") or one check ("ib.port_state").
    """
    from healthcheck.checks import load_all

    load_all()
    wanted = list(names)
    families = {spec.family for spec in REGISTRY.values()}
    unknown = [w for w in wanted if w not in REGISTRY and w not in families]
    if unknown:
        from healthcheck.core.errors import UsageError

        raise UsageError(f"unknown check or family: {', '.join(unknown)} (see hc checks list)")
    chosen = []
    for spec in sorted(REGISTRY.values(), key=lambda s: s.name):
        if tier not in spec.tiers:
            continue
        if wanted and not any(spec.name == w or spec.family == w for w in wanted):
            continue
        chosen.append(spec)
    return chosen
