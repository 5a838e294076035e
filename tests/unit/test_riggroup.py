"""tests/riggroup.py's choice of the tests that go to the rig's one worker."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from riggroup import INTEGRATION, uses_rig


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
