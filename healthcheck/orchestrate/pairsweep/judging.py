"""Judging the tests of one sweep: a tool's figure is short against the fabric's pair floor
where it sets one, else against its peers, the sweep's other tests (`Judging`); a short
test runs again, keeping each tool's better attempt (`again`, `better`); a judged test
becomes the GroupResult the report shows and the `Result` localization judges
(`judged_test`, `group_result`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from healthcheck.analyses.pairs import TEST_FAILED, TEST_NOT_RUN
from healthcheck.bandwidth.localize import Result
from healthcheck.bandwidth.peers import peer_threshold
from healthcheck.bandwidth.schedule import Test
from healthcheck.core.model import GroupResult
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status
from healthcheck.orchestrate.pairsweep.measure import Measured
from healthcheck.orchestrate.pairsweep.plan import PairPlan


@dataclass(eq=False)  # compared and hashed by identity: two tests of the same members are two records
class Record:
    """One test of the sweep: the best attempt of each tool so far, and where its results went."""

    test: Test
    got: list[Measured]
    attempts: int
    group: int = -1  # its GroupResult in run.groups
    result: int | None = None  # its Result in run.results (None: no tool gave a figure)


class Judging:
    """Whether a tool's figure is short: against the fabric's pair floor where it sets one (the
    known-good figure: `hc baseline` learns it from earlier sweeps), which decides whatever the
    number of nodes; else against every test of the sweep so far (`peers.peer_threshold`:
    robust where the slow node is in half the tests or more, as with three or four nodes).
    A test's figure is its best attempt's, and changes when it is run again."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction
        self._figures: dict[str, dict[Record, tuple[tuple[str, ...], float]]] = {}  # tool -> test -> figure
        self._cached: dict[str, float | None] = {}

    def note(self, rec: Record) -> None:
        """The test's figures (its best attempts) as peers of the others."""
        for m in rec.got:
            if m.value is not None and m.floor is None and not m.against and not m.not_applicable:
                self._figures.setdefault(m.tool, {})[rec] = (tuple(rec.test.members), m.value)
                self._cached.pop(m.tool, None)

    def forget(self, rec: Record) -> None:
        """No longer a peer: its result is not used (a job took a member while it ran)."""
        for tool, figures in self._figures.items():
            if figures.pop(rec, None) is not None:
                self._cached.pop(tool, None)

    def reference(self, m: Measured) -> float | None:
        if m.floor is not None:
            return m.floor
        if m.tool not in self._cached:
            self._cached[m.tool] = peer_threshold(self._figures.get(m.tool, {}).values(), self.fraction)
        return self._cached[m.tool]

    def short(self, m: Measured) -> bool:
        ref = self.reference(m)
        return m.against or (m.value is not None and ref is not None and m.value < ref)

    def short_test(self, got: list[Measured]) -> bool:
        return any(self.short(m) for m in got)


def run_again(recs: list[Record], measure: Any, judging: Judging) -> bool:
    """Run these tests once more, in rounds of tests with no node in common, keeping each
    tool's better attempt (a test `measure` held back, a job having taken a member, keeps
    what it had); False where there was nothing to run."""
    left = list(recs)
    while left:
        busy: set[str] = set()
        batch = []
        for rec in left:
            if not busy.intersection(rec.test.members):
                batch.append(rec)
                busy.update(rec.test.members)
        left = [rec for rec in left if rec not in batch]
        got = measure({"-".join(rec.test.members): rec.test for rec in batch})
        for rec in batch:
            new = got.get("-".join(rec.test.members))
            if new is None:
                continue
            rec.got = [better(old, other, judging.short) for old, other in zip(rec.got, new, strict=True)]
            rec.attempts += 1
            judging.note(rec)
    return bool(recs)


def judged_test(rec: Record, judging: Judging, plan: PairPlan) -> tuple[GroupResult, Result | None]:
    """The test's GroupResult and, where a tool gave a figure, the Result localization judges."""
    test, got = rec.test, rec.got
    judged = [m for m in got if m.value is not None]
    unjudged = [m for m in got if m.value is None and not m.not_applicable]
    problems = "; ".join(f"{m.tool}: {m.why}" for m in unjudged)
    if not judged:
        return group_result(test, Status.ERROR, got, problems or "no test applies", plan), None
    short = [m for m in judged if judging.short(m)]
    # a test that fell short is WARN: the verdict (culprit node FAIL, slow link WARN) is the analysis's
    status = Status.ERROR if unjudged else Status.WARN if short else Status.PASS
    lead = judged[0]  # the first tool the fabric lists that gave a figure
    # with no floor the lead's figure is judged again against every test of the sweep
    # (localize.judge_by_peers), unless the tool failed itself or another tool made the test short
    peers = lead.floor is None and not lead.against and all(m is lead for m in short)
    result = Result(members=tuple(test.members), value=lead.value or 0.0, passed=not short,
                    threshold=judging.reference(lead), kind=lead.kind, purpose=test.purpose,
                    limit_key=lead.limit_key if lead.floor is not None else "", peers=peers)
    return group_result(test, status, got, problems, plan), result


def better(old: Measured, new: Measured, short: Any) -> Measured:
    """Of two attempts of one tool, the one to keep: one with a figure over one without, a
    passing one over a short one, else the higher figure."""
    if new.value is None:
        return old
    if old.value is None:
        return new
    if short(old) != short(new):
        return new if short(old) else old
    return new if new.value > old.value else old


def group_result(test: Test, status: Status, measured: list[Measured], reason: str, plan: PairPlan) -> GroupResult:
    """One test as the report shows it: its figures, bw.E107 (ERROR) where `reason` says a
    tool gave nothing, with what its launcher printed, and bw.E108 (WARN) for a tool's failure."""

    members = list(test.members)
    metrics = [m for got in measured for m in got.metrics]
    findings = []
    if reason:
        # each tool that gave nothing: what its launcher printed, whole (Open MPI's banners), not one line
        said = "\n\n".join(f"[{m.tool}]\n{m.evidence}" for m in measured
                            if m.value is None and not m.not_applicable and m.evidence)
        findings.append(stamp(TEST_NOT_RUN(Status.ERROR, reason[:1000], component="pair", evidence=said or None),
                              check="bw.pairs", members=tuple(members)))
    for got in measured:
        if got.against:  # evidence against the pair; which node (or the link) is the analysis's to say
            findings.append(stamp(TEST_FAILED(Status.WARN, got.why[:1000], component=got.tool,
                                              evidence=got.evidence or None), check="bw.pairs",
                                  members=tuple(members)))
    name = "-".join(members) + ("" if test.purpose == "screen" else f" ({test.purpose})")
    return GroupResult(kind="pair" if len(members) == 2 else "group", name=name, members=members, status=status,
                       findings=findings, metrics=metrics)
