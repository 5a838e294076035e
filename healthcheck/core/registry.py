"""The check and analysis registries: one decorator registers a check or an analysis, in one place.

A check is a plain function that receives facts (typed values a probe gathered and a
parser made) and the node's limits, and returns findings and metrics. It never prints,
exits, sleeps, drains or reads a config file.

An analysis is the same for work whose input is many results at once: the nodes of a
run (scope "fleet"), pairs of nodes measured together ("pairs") or one node over its recorded
runs ("history"); healthcheck/analyses/
holds them. (A job's diagnosis is not one: it reads logs and stacks, not results, and
reports through diagnose/verdict.py.) It receives its scope's input and limits and yields `(who, finding)`: who is a
node's name, or a tuple of the member nodes a finding is about.
"""

from __future__ import annotations

import importlib
import keyword
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FunctionType
from typing import Any

import msgspec

from healthcheck.core.catalogue import FindingSpec, record_emitter
from healthcheck.core.errors import UsageError
from healthcheck.core.facts import DEFAULT_PROVIDERS, ProviderFn, Providers, using_providers
from healthcheck.core.model import Finding, Metric
from healthcheck.core.plugins import load_analyses, load_checks, load_checks_for
from healthcheck.core.tiers import CONTEXTS, TIERS

CheckOutput = Iterable[Finding | Metric]
CheckFn = Callable[..., CheckOutput]
# What an analysis works over: a run's nodes, pairs of nodes.
SCOPES = ("fleet", "pairs", "history")
AnalysisFn = Callable[[Any, Any], Iterable[tuple[str | tuple[str, ...], Finding]]]


class NotApplicable(Exception):
    """Raised by a check when it does not apply to this node (its status becomes SKIP)."""


class _Declared:
    """What checks and analyses share: a dotted name and the findings they declare."""

    name: str
    findings: tuple[FindingSpec, ...]

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def finding_ids(self) -> frozenset[str]:
        return frozenset(spec.id for spec in self.findings)


class CheckSpec(msgspec.Struct, _Declared, frozen=True):
    name: str  # family.aspect
    fn: CheckFn
    tiers: frozenset[str]
    needs: tuple[str, ...]  # fact names, passed to fn by keyword (its parameters bear these names)
    findings: tuple[FindingSpec, ...]
    budget_s: float
    summary: str = ""
    # limits -> reason to skip before any fact is gathered (keeps the prologue cheap)
    applies: Callable[[Any], str | None] | None = None
    # facts, passed by keyword like `needs`, that may be missing: None when they could
    # not be gathered, instead of making the check ERROR
    optional: tuple[str, ...] = ()
    # the finding (FAIL) when a needed fact's provider runs out of its whole budget: a
    # hang is evidence against the node (a bandwidth test that never completes); None:
    # such a timeout is ERROR (hc.E002), as for any check
    hang_finding: FindingSpec | None = None
    # the names of the metrics a PASS row of the table shows as its evidence ("eth0 mtu
    # 9000 bytes"), in the order they are preferred; the report does not say which check
    # measured a metric, so the check says which of its metrics speak for it
    evidence_metrics: tuple[str, ...] = ()


class AnalysisSpec(msgspec.Struct, _Declared, frozen=True):
    name: str  # family.aspect, e.g. fleet.drift
    fn: AnalysisFn  # (input of its scope, limits) -> (node or member nodes, finding)
    scope: str  # one of SCOPES
    tiers: frozenset[str]
    findings: tuple[FindingSpec, ...]
    summary: str = ""


def tiers_from(lowest: str) -> frozenset[str]:
    """Tiers are cumulative: a quick check also runs in standard and deep."""
    return frozenset(TIERS[TIERS.index(lowest) :])


def _tiers(name: str, tier: str | Iterable[str]) -> frozenset[str]:
    """The tiers and contexts of `tier` (a lowest tier, or an explicit set)."""
    if isinstance(tier, str):
        tiers = tiers_from(tier) if tier in TIERS else frozenset({tier})
    else:
        tiers = frozenset(tier)
    unknown = tiers - set(TIERS) - set(CONTEXTS)
    if unknown:
        raise ValueError(f"check {name}: unknown tier(s) {sorted(unknown)}")
    return tiers


class Registry:
    """Checks and fact providers registered together.

    The process has one (`DEFAULT`, behind `@check`, `@provides`, `select` and
    `REGISTRY`); a test builds its own, registers throw-away checks and providers with
    `reg.check` / `reg.provides`, and runs them inside `with using(reg):`, so nothing
    leaks into other tests. `Registry(base=DEFAULT)` also sees the real checks and
    providers (its own win on a clash).
    """

    def __init__(self, load: Callable[[], None] | None = None, providers: Providers | None = None,
                 base: Registry | None = None, load_analyses: Callable[[], None] | None = None,
                 load_for: Callable[[str, list[str]], bool] | None = None) -> None:
        self.checks: dict[str, CheckSpec] = {}
        self.analyses: dict[str, AnalysisSpec] = {}
        self._load_analyses = load_analyses  # imports the modules that register analyses here
        # only the process-wide registry tells the catalogue who emits what: a test's
        # throw-away checks must not leak into other tests' resume decisions
        self.records_emitters = False
        self.base = base
        if providers is None:
            providers = Providers(base=base.providers if base is not None else None)
        self.providers: Providers = providers
        self._load = load  # imports the modules that register checks here, when first needed
        # imports only the modules a select() of (tier, names) needs; False: it cannot say
        self._load_for = load_for

    def all_checks(self) -> dict[str, CheckSpec]:
        """The checks registered here and in the base (these win on a clash), by name."""
        if self._load is not None:
            self._load()
        inherited = self.base.all_checks() if self.base is not None else {}
        return {**inherited, **self.checks}

    def spec(self, name: str) -> CheckSpec | None:
        """Check `name`, loading every family only when it is not registered yet: a report
        of the checks a run selected (and so loaded) asks about those alone."""
        if self.base is None and name in self.checks:
            return self.checks[name]
        return self.all_checks().get(name)

    def check(
        self,
        name: str,
        *,
        tier: str | Iterable[str],
        needs: Iterable[str],
        findings: Iterable[FindingSpec],
        budget_s: float = 2.0,
        applies: Callable[[Any], str | None] | None = None,
        optional: Iterable[str] = (),
        hang_finding: FindingSpec | None = None,
        evidence_metrics: Iterable[str] = (),
    ) -> Callable[[CheckFn], CheckFn]:
        """Register `fn` as check `name` here (see the module-level `check`)."""
        tiers = _tiers(name, tier)
        declared = tuple(findings)
        if hang_finding is not None and hang_finding not in declared:
            declared += (hang_finding,)  # the engine emits it for the check, so it is declared
        needed, optionals = tuple(needs), tuple(optional)

        def register(fn: CheckFn) -> CheckFn:
            if name in self.checks:
                raise ValueError(f"check {name} registered twice")
            _check_signature(name, fn, needed, optionals)
            if self.records_emitters:
                _record_emitter(name, declared)
            self.checks[name] = CheckSpec(
                name=name,
                fn=fn,
                tiers=tiers,
                needs=needed,
                findings=declared,
                budget_s=budget_s,
                summary=_summary(fn),
                applies=applies,
                optional=optionals,
                hang_finding=hang_finding,
                evidence_metrics=tuple(evidence_metrics),
            )
            return fn

        return register

    def all_analyses(self) -> dict[str, AnalysisSpec]:
        """The analyses registered here and in the base (these win on a clash), in registration order."""
        if self._load_analyses is not None:
            self._load_analyses()
        inherited = self.base.all_analyses() if self.base is not None else {}
        return {**inherited, **self.analyses}

    def analysis(self, name: str, *, scope: str, tier: str | Iterable[str], findings: Iterable[FindingSpec]
                 ) -> Callable[[AnalysisFn], AnalysisFn]:
        """Register `fn` as analysis `name` here (see the module-level `analysis`)."""
        if scope not in SCOPES:
            raise ValueError(f"analysis {name}: unknown scope {scope!r} (one of {', '.join(SCOPES)})")
        tiers = _tiers(name, tier)
        declared = tuple(findings)

        def register(fn: AnalysisFn) -> AnalysisFn:
            if name in self.analyses:
                raise ValueError(f"analysis {name} registered twice")
            if self.records_emitters:
                _record_emitter(name, declared)
            self.analyses[name] = AnalysisSpec(name=name, fn=fn, scope=scope, tiers=tiers, findings=declared,
                                               summary=_summary(fn))
            return fn

        return register

    def select_analyses(self, scope: str, tier: str | None = None) -> list[AnalysisSpec]:
        """The analyses here of `scope` (that run in `tier`, if given), in registration order."""
        return [a for a in self.all_analyses().values()
                if a.scope == scope and (tier is None or tier in a.tiers)]

    def provides(self, fact: str, transport: str = "local", **kw: Any) -> Callable[[ProviderFn], ProviderFn]:
        """Register a provider of `fact` here (see `healthcheck.core.facts.provides`)."""
        return self.providers.provides(fact, transport, **kw)

    def select(self, tier: str, names: Iterable[str] = ()) -> list[CheckSpec]:
        """The checks here for `tier` (or context), optionally narrowed to `names`.

        A name may be a whole family ("ib") or one check ("ib.port_state").
        """
        wanted = list(names)
        if self.base is None and self._load_for is not None and self._load_for(tier, wanted):
            checks = dict(self.checks)  # what those modules registered: all a run of them can select
        else:
            checks = self.all_checks()
        families = {spec.family for spec in checks.values()}
        unknown = [w for w in wanted if w not in checks and w not in families]
        if unknown:
            raise UsageError(f"unknown check or family: {', '.join(unknown)} (see hc checks list)")
        chosen = []
        for spec in sorted(checks.values(), key=lambda s: s.name):
            if tier not in spec.tiers:
                continue
            if wanted and not any(spec.name == w or spec.family == w for w in wanted):
                continue
            chosen.append(spec)
        return chosen


def _summary(fn: Callable[..., Any]) -> str:
    """A docstring's first paragraph as one line (a long first sentence may wrap)."""
    first = (fn.__doc__ or "").strip().split("\n\n", 1)[0]
    return " ".join(line.strip() for line in first.splitlines())


def _check_signature(name: str, fn: CheckFn, needs: tuple[str, ...], optional: tuple[str, ...]) -> None:
    """Refuse a check whose parameters are not exactly its declared facts and `limits`.

    The engine calls `fn(**{fact: value}, limits=limits)`: a fact with no parameter of
    its name, or a parameter that names no fact, would fail on every run (or take a
    default silently), so both are caught here, when the check is registered.
    """
    declared = needs + optional
    for fact in declared:
        if not isinstance(fact, str) or not fact.isidentifier() or keyword.iskeyword(fact) or fact == "limits":
            raise ValueError(f"check {name}: fact name {fact!r} cannot be a parameter name "
                             "(facts reach a check by keyword: a Python identifier other than 'limits')")
    twice = sorted({fact for fact in declared if declared.count(fact) > 1})
    if twice:
        raise ValueError(f"check {name}: fact(s) declared twice in needs/optional: {', '.join(twice)}")
    params = _parameters(name, fn)
    problems = []
    positional_only = [p for p, kind in params if kind == "positional-only"]
    if positional_only:
        problems.append(f"positional-only parameter(s) {', '.join(positional_only)}")
    by_keyword = {p for p, kind in params if kind == "keyword"}
    missing = [fact for fact in declared if fact not in by_keyword]
    if missing:
        problems.append(f"no parameter for declared fact(s) {', '.join(missing)}")
    if "limits" not in by_keyword:
        problems.append("no parameter 'limits'")
    extra = [(kind if kind in ("*", "**") else "") + p for p, kind in params
             if p not in ("limits", *declared, *positional_only) or kind in ("*", "**")]
    if extra:
        problems.append(f"parameter(s) {', '.join(extra)} name no declared fact")
    if problems:
        where = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        raise TypeError(f"check {name} ({where}): {'; '.join(problems)} (facts reach a check by keyword: its "
                        f"parameters must be exactly its needs/optional facts ({', '.join(declared) or 'none'}) "
                        "and limits)")


# inspect.CO_VARARGS and CO_VARKEYWORDS: a code object's flags for *args and **kwargs
_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08
_INSPECT_KINDS = {"POSITIONAL_ONLY": "positional-only", "VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}


def _parameters(name: str, fn: Callable[..., Any]) -> list[tuple[str, str]]:
    """(name, kind) of each parameter of `fn`, kind "positional-only", "keyword" (positional
    or keyword, or keyword-only), "*" or "**". A plain function's are read from its code
    object, as inspect.signature reads them: importing `inspect` (ast, dis, tokenize) cost
    a prologue more than registering every check it runs. Anything else (a wrapper, a
    partial, a callable object) is asked of inspect.signature, loaded then."""
    if type(fn) is FunctionType and not hasattr(fn, "__wrapped__") and not hasattr(fn, "__signature__"):
        code = fn.__code__
        names, positional, named = code.co_varnames, code.co_argcount, code.co_argcount + code.co_kwonlyargcount
        params = [(p, "positional-only" if i < code.co_posonlyargcount else "keyword")
                  for i, p in enumerate(names[:positional])]
        if code.co_flags & _CO_VARARGS:  # its name follows the keyword-only ones; it is listed before them
            params.append((names[named], "*"))
        params.extend((p, "keyword") for p in names[positional:named])
        if code.co_flags & _CO_VARKEYWORDS:
            params.append((names[named + bool(code.co_flags & _CO_VARARGS)], "**"))
        return params
    try:
        signature = importlib.import_module("inspect").signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"check {name}: its signature cannot be read ({exc})") from None
    return [(p.name, _INSPECT_KINDS.get(p.kind.name, "keyword")) for p in signature.parameters.values()]


def _record_emitter(name: str, findings: Iterable[FindingSpec]) -> None:
    """Tell the catalogue that `name` emits these IDs (what resuming a drained node asks)."""

    for spec in findings:
        record_emitter(spec.id, name)


def _load_checks() -> None:
    load_checks()


def _load_analyses() -> None:
    load_analyses()


# The process-wide registry: every check and analysis module registers here, whatever is swapped in.
DEFAULT = Registry(load=_load_checks, providers=DEFAULT_PROVIDERS, load_analyses=_load_analyses,
                   load_for=load_checks_for)
DEFAULT.records_emitters = True
REGISTRY: dict[str, CheckSpec] = DEFAULT.checks
ANALYSES: dict[str, AnalysisSpec] = DEFAULT.analyses
_current = DEFAULT


@contextmanager
def using(registry: Registry) -> Iterator[Registry]:
    """Make `registry` the one `select()` and the engine's provider lookups use, for the block."""
    global _current
    previous, _current = _current, registry
    try:
        with using_providers(registry.providers):
            yield registry
    finally:
        _current = previous


def check(
    name: str,
    *,
    tier: str | Iterable[str],
    needs: Iterable[str],
    findings: Iterable[FindingSpec],
    budget_s: float = 2.0,
    applies: Callable[[Any], str | None] | None = None,
    optional: Iterable[str] = (),
    hang_finding: FindingSpec | None = None,
    evidence_metrics: Iterable[str] = (),
) -> Callable[[CheckFn], CheckFn]:
    """Register `fn` as process-wide check `name`.

    `tier` is the lowest tier the check runs in (tiers are cumulative) or an explicit
    set of tiers and contexts. The docstring's first paragraph states the
    invariant the check guards and is shown by `hc checks list`. The function's
    parameters are its `needs` and `optional` facts, by name, and `limits`: the engine
    passes each by keyword, and registration refuses a signature that does not match.
    `hang_finding`: a
    needed fact's provider running out of its whole budget is this finding, FAIL, with
    the probe's partial output as evidence, instead of ERROR (hc.E002).
    `evidence_metrics`: the names of the metrics it yields that a PASS row of the table
    shows as its evidence ("eth0 mtu 9000 bytes").
    """
    return DEFAULT.check(name, tier=tier, needs=needs, findings=findings, budget_s=budget_s, applies=applies,
                         optional=optional, hang_finding=hang_finding, evidence_metrics=evidence_metrics)


def analysis(name: str, *, scope: str, tier: str | Iterable[str], findings: Iterable[FindingSpec]
             ) -> Callable[[AnalysisFn], AnalysisFn]:
    """Register `fn` as process-wide analysis `name` of `scope` ("fleet", "pairs" or "history").

    `fn(input, limits)` is pure: it yields `(node, finding)` or `(members, finding)` and
    never prints, acts or reads a file; the runner stamps what it yields. Raising
    `NotApplicable` means it did not run (too few nodes, no history).
    """
    return DEFAULT.analysis(name, scope=scope, tier=tier, findings=findings)


def current() -> Registry:
    """The registry in use (DEFAULT, or a test's inside `with using(reg):`)."""
    return _current


def select(tier: str, names: Iterable[str] = ()) -> list[CheckSpec]:
    """The current registry's checks for `tier` (or context), optionally narrowed to `names`.

    A name may be a whole family ("ib") or one check ("ib.port_state").
    """
    return _current.select(tier, names)


def deep_only(spec: CheckSpec) -> bool:
    """A check of the deep tier that the standard tier does not run (a bandwidth test)."""
    return "deep" in spec.tiers and "standard" not in spec.tiers


def skip_deep_only(specs: Iterable[CheckSpec], reason: str) -> list[CheckSpec]:
    """`specs` with every deep-only check skipped for `reason` before anything is gathered."""
    def skip(_limits: object) -> str:
        return reason

    return [msgspec.structs.replace(s, applies=skip) if deep_only(s) else s for s in specs]
