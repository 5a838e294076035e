"""tests/riggroup.py's choice of the tests that go to the rigs' workers, and which rig
(tests/rigfixtures.py) each group's tests get."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import rigfixtures
from riggroup import INTEGRATION, RIG_GROUP, RIG_WAITS_GROUP, rig_group, uses_rig
from support import REPO


class Item:
    """What uses_rig reads of a pytest item: its marks, fixtures, path and module."""

    def __init__(self, *, rig_mark: bool = False, fixtures: tuple[str, ...] = (), integration: bool = True,
                 uses_rig_attr: bool | None = None) -> None:
        self.fixturenames = list(fixtures)
        self.path = (INTEGRATION if integration else Path(__file__).parent) / "test_x.py"
        self.module = types.SimpleNamespace()
        if uses_rig_attr is not None:
            self.module.USES_RIG = uses_rig_attr
        self._marks = {"rig": pytest.mark.rig.mark} if rig_mark else {}

    def get_closest_marker(self, name: str):
        return self._marks.get(name)


def test_a_module_with_a_rig_of_its_own_stays_out_of_the_rig_worker_though_marked_rig():
    # the sandbox's fresh-clone test: needs root and Slurm (marked), shares no rig
    assert not uses_rig(Item(rig_mark=True, uses_rig_attr=False))


def test_a_rig_fixture_puts_a_test_in_the_rig_worker_whatever_its_module_says():
    assert uses_rig(Item(fixtures=("fresh_slurm_rig",), uses_rig_attr=False, integration=False))


def test_marked_or_under_integration_is_the_rig_unless_the_module_says_otherwise():
    assert uses_rig(Item(rig_mark=True, integration=False))
    assert uses_rig(Item())
    assert not uses_rig(Item(uses_rig_attr=False))
    assert not uses_rig(Item(integration=False))


def test_the_torch_free_rig_files_run_on_the_second_rig_and_the_rest_on_the_first():
    waits, torch = Item(), Item()
    waits.path = INTEGRATION / "test_slurm_hooks.py"
    torch.path = INTEGRATION / "test_diagnose_live_rig.py"
    assert rig_group(waits) == RIG_WAITS_GROUP
    assert rig_group(torch) == RIG_GROUP
    assert RIG_GROUP != RIG_WAITS_GROUP


class Request:
    """What rig_name reads of a fixture request: the test's xdist_group mark."""

    def __init__(self, group: str | None) -> None:
        marks = {"xdist_group": pytest.mark.xdist_group(group).mark} if group else {}
        self.node = types.SimpleNamespace(get_closest_marker=marks.get)


def test_the_second_group_gets_the_second_rig_only_in_an_xdist_worker(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert rigfixtures.SECOND_GROUP == RIG_WAITS_GROUP
    assert rigfixtures.rig_name(Request(RIG_WAITS_GROUP)) == "second"
    assert rigfixtures.rig_name(Request(RIG_GROUP)) == "first"
    assert rigfixtures.rig_name(Request(None)) == "first"
    # in one process the groups run one after the other: one rig serves both
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert rigfixtures.rig_name(Request(RIG_WAITS_GROUP)) == "first"


def test_the_second_rig_shares_no_name_with_the_first_or_the_sandboxes():
    second = rigfixtures.SECOND_RIG
    sandbox = (REPO / "bin" / "sandbox").read_text()
    assert second["prefix"] != "hct" and f"HC_RIG_PREFIX={second['prefix']} " not in sandbox
    assert second["subnet"] != "10.98.0" and f"HC_RIG_SUBNET={second['subnet']} " not in sandbox
    assert second["bridge"] != "hctbr0" and second["rig_dir"] != "/tmp/hc-test-rig/netns"
    assert rigfixtures.SECOND_SLURM["ctld_port"] not in (16917, 16997)


class Config:
    """What xdist's loadgroup scheduler reads of pytest's config."""

    option = types.SimpleNamespace(tx=["3*popen"], dist="loadgroup")

    def getoption(self, name: str):
        return getattr(self.option, name)

    getvalue = getoption


class Node:
    def __init__(self) -> None:
        self.sent: list[list[int]] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.append(indices)


def test_the_rig_groups_go_out_first_whatever_their_size():
    pytest.importorskip("xdist")
    from riggroup import pytest_xdist_make_scheduler

    scheduler = pytest_xdist_make_scheduler(Config(), None)
    units = {"tests/unit/parsers/test_big.py": 200, RIG_WAITS_GROUP: 75, "tests/unit/x.py::t": 1, RIG_GROUP: 54}
    ids = [f"{unit}::{i}" for unit, size in units.items() for i in range(size)]
    for unit, size in units.items():
        scheduler.workqueue[unit] = {f"{unit}::{i}": False for i in range(size)}
    nodes = [Node(), Node(), Node()]
    for node in nodes:
        scheduler.registered_collections[node] = ids
        scheduler._assign_work_unit(node)
    assert [list(scheduler.assigned_work[n]) for n in nodes] == [
        [RIG_GROUP], [RIG_WAITS_GROUP], ["tests/unit/parsers/test_big.py"]]
