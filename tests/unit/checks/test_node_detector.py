"""The node detector's CI subset (tests/node_scenarios/, issue 23 section 6): a handful of the
labelled scenarios replayed through hc, each fault caught under its own finding ID and
status, no healthy node flagged; and the scorer's arithmetic. `bin/bench --only "node
detector"` runs the whole set."""

from __future__ import annotations

import pytest
from node_scenarios import harness
from node_scenarios.scenarios import CI_SUBSET, HEALTHY, Scenario, by_name, scenarios


@pytest.mark.parametrize("name", CI_SUBSET)
def test_each_scenario_of_the_subset_gets_its_truth(name):
    sc = by_name(name)
    outcome = harness.run(sc)
    assert not outcome.error, outcome.error
    if sc.healthy:
        assert outcome.result == "clean", harness.says_words(outcome)
    else:
        assert outcome.result == "caught", (harness.truth_words(sc), harness.says_words(outcome))
        assert outcome.drained == sc.drains  # a WARN-only truth never drains, a FAIL truth does


def test_the_subset_covers_every_way_in_and_both_truths():
    subset = [by_name(n) for n in CI_SUBSET]
    assert {s.how for s in subset} >= {"local", "agentless"}
    assert {s.healthy for s in subset} == {True, False}
    assert {f for s in subset if not s.healthy for f in s.families} >= {"gpu", "ib", "net"}


def test_every_truth_names_a_finding_hc_declares():
    from healthcheck.checks import load_all
    from healthcheck.core.catalogue import CATALOGUE

    load_all()
    for sc in scenarios():
        assert sc.healthy == (not sc.expect), sc.name
        for fid, status in sc.expect:
            assert fid in CATALOGUE and status in ("WARN", "FAIL"), (sc.name, fid)


def outcome(family: str, expect: tuple, found: tuple) -> harness.Outcome:
    sc = Scenario("s", family, "node", "local", "", expect=expect)
    return harness.Outcome(sc, tuple((i, s, "") for i, s in found))


def test_the_scorer_tells_caught_wrong_missed_flagged_and_drained():
    fail = (("gpu.E010", "FAIL"),)
    cases = [
        (outcome("ecc", fail, fail), "caught"),
        (outcome("ecc", fail, (("gpu.E010", "WARN"),)), "wrong"),  # the right ID, but it would not drain
        (outcome("ecc", fail, (("gpu.E011", "FAIL"),)), "wrong"),
        (outcome("ecc", fail, (("hc.E001", "ERROR"),)), "missed"),  # could not judge is no catch
        (outcome(HEALTHY, (), (("hc.E001", "ERROR"),)), "clean"),
        (outcome(HEALTHY, (), (("gpu.E011", "WARN"),)), "flagged"),
        (outcome(HEALTHY, (), (("gpu.E011", "FAIL"),)), "DRAINED"),
    ]
    assert [o.result for o, _ in cases] == [want for _, want in cases]
    score = harness.Score(tuple(o for o, _ in cases))
    overall = score.overall()
    assert (overall.faulty, overall.caught, overall.wrong, overall.missed) == (4, 1, 2, 1)
    assert (overall.healthy, overall.flagged, overall.drained) == (3, 2, 1)
    assert not overall.met
    assert harness.Score(tuple(o for o, want in cases if want in ("caught", "clean", "flagged"))).overall().met
