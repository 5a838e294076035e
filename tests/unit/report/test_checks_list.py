"""`hc checks list` as a library: the view of one tier, its JSON and its tables, in-process."""

from __future__ import annotations

from healthcheck.core import catalogue
from healthcheck.core.registry import current
from healthcheck.report.checks_list import catalogue_json, catalogue_table, catalogue_view


def test_a_tier_lists_only_its_checks_and_analyses() -> None:
    registry = current()
    everything = catalogue_view(None)
    assert {s.name for s in everything.checks} == set(registry.all_checks())
    assert {a.name for a in everything.analyses} == set(registry.all_analyses())
    quick = catalogue_view("quick")
    assert quick.checks and all("quick" in s.tiers for s in quick.checks)
    assert all("quick" in a.tiers for a in quick.analyses)
    left_out = {s.name for s in everything.checks} - {s.name for s in quick.checks}
    assert left_out, "some check does not run in the quick tier"
    assert [s.name for s in quick.checks] == sorted(s.name for s in quick.checks)


def test_ids_no_check_emits_are_always_listed_and_credited_to_their_family() -> None:
    registry = current()
    emitted = {f.id for s in [*registry.all_checks().values(), *registry.all_analyses().values()] for f in s.findings}
    orphans = set(catalogue.CATALOGUE) - emitted
    assert orphans
    view = catalogue_view("quick")
    assert orphans <= {f.id for f in view.findings}
    doc = catalogue_json("quick")
    by_id = {f["id"]: f for f in doc["findings"]}
    orphan = sorted(orphans)[0]
    assert by_id[orphan]["checks"] == [f"({orphan.split('.')[0]})"]
    # an ID a listed check emits names that check
    check = view.checks[0]
    assert check.name in by_id[check.findings[0].id]["checks"]
    assert {c["name"] for c in doc["checks"]} == {s.name for s in view.checks}
    assert all(c["scope"] == "node" for c in doc["checks"])


def test_the_table_is_the_producers_then_a_blank_line_then_the_ids() -> None:
    text = catalogue_table("quick")
    producers, ids = text.split("\n\n", 1)
    assert producers.split()[:5] == ["CHECK", "SCOPE", "TIERS", "BUDGET", "INVARIANT"]
    assert ids.split()[:4] == ["ID", "MEANING", "ACTION", "HINT"]
