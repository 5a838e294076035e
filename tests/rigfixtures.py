"""pytest fixtures for hc's integration-test rig (tests/rig/): fake hosts in network
namespaces with their own sshd, and a private Slurm cluster with a slurmd in each.

How to use
----------
Load this module as a pytest plugin named ``rigfixtures``. pytest's default
("prepend") import mode puts ``tests/`` on sys.path when it imports
``tests/conftest.py`` (as long as there is no ``tests/__init__.py``), so either

    # tests/conftest.py
    pytest_plugins = ["rigfixtures"]

or, without a conftest, ``PYTHONPATH=tests python3 -m pytest -p rigfixtures ...``.
(``tests/integration/test_rig_selftest.py`` also names it in its own
``pytest_plugins`` so that it runs standalone; pytest loads a plugin only once.)
``from rigfixtures import *`` in a conftest works too, but a plugin is cleaner.

Mark rig tests with ``@pytest.mark.rig``; run only them with ``-m rig`` or skip them
with ``-m "not rig"``. Without root, namespaces or Slurm the fixtures skip the test
with the reason from ``rig_available()`` (e.g. "not root").

Fixtures
--------
netns_rig        NetnsRig with 4 hosts node1..node4 (MTU 9000 everywhere unless
                 $HC_RIG_MTUS says otherwise), up once a session, torn down at its end.
slurm_rig        SlurmRig on netns_rig (recording prolog/epilog hooks,
                 PrologFlags=Alloc), stopped at session end (before netns_rig).
                 Both are the rig of the test's group: in an xdist worker the torch-free
                 group (tests/riggroup.py's `rig-waits`) gets a second rig (SECOND_RIG,
                 SECOND_SLURM) so it runs beside the first's tests; in one process, and
                 for every other test, the first rig. A session brings a rig up on the
                 first test that asks for it.
fresh_netns_rig  function: netns_rig after reset() -- MTUs, links, sshd, fake IB and
                 local/bin back to how up() left them. Use it in tests that change hosts.
fresh_slurm_rig  function: slurm_rig after reset() of both rigs -- no jobs, all nodes
                 idle, baseline config (a test may call reconfigure(prolog=...)).

    @pytest.mark.rig
    def test_drain(fresh_slurm_rig):
        s = fresh_slurm_rig
        s.drain("node2", "hc: test")
        assert s.wait_node_state("node2", "drained") == ("drained", "hc: test")

    @pytest.mark.rig
    def test_mtu(fresh_netns_rig):
        fresh_netns_rig.set_mtu("node3", "eth0", 1500)
        ...

Rig tests share a rig per session, so they must not run in parallel processes
(pytest-xdist) unless each worker gets its own rig (HC_RIG_PREFIX/SUBNET/BRIDGE/DIR and
HC_SLURM_DIR/HC_SLURM_CTLD_PORT): tests/riggroup.py sends the tests on one rig to one
worker, and this module gives each of its two groups its own rig.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:  # makes the ``rig`` package importable in every setup
    sys.path.insert(0, _TESTS)

from rig import (  # noqa: E402 (after the sys.path line above)
    NetnsRig,
    RigError,
    RigTimeout,
    SlurmRig,
    rig_available,
    wait_for,
)

__all__ = [
    "NetnsRig",
    "RigError",
    "RigTimeout",
    "SlurmRig",
    "fresh_netns_rig",
    "fresh_slurm_rig",
    "netns_rig",
    "rig_available",
    "slurm_rig",
    "wait_for",
]


def _require(need_slurm: bool = False) -> None:
    ok, reason = rig_available(need_slurm=need_slurm)
    if not ok:
        pytest.skip(f"test rig unavailable: {reason}")


# the second rig, for the torch-free rig tests in an xdist worker of their own: names apart
# from the first rig's (hct, 10.98.0, hctbr0, port 16917), bin/sandbox's (hcs, 10.97.0,
# 16997) and test_rig_selftest's own (hctx, 10.98.2). Its fabric network, where a test asks
# for one, is the next /24 (10.96.1)
SECOND_GROUP = "rig-waits"  # tests/riggroup.py's RIG_WAITS_GROUP
SECOND_RIG: dict[str, Any] = {"rig_dir": "/tmp/hc-test-rig/waits/netns", "prefix": "hcw",
                              "subnet": "10.96.0", "bridge": "hcwbr0"}
SECOND_SLURM: dict[str, Any] = {"slurm_dir": "/tmp/hc-test-rig/waits/slurm", "ctld_port": 16927}


def rig_name(request: pytest.FixtureRequest) -> str:
    """Which rig the test runs on: "second" for the torch-free group in an xdist worker
    (beside the first rig's worker), else "first"."""
    mark = request.node.get_closest_marker("xdist_group")
    group = mark.args[0] if mark is not None and mark.args else None
    return "second" if group == SECOND_GROUP and os.environ.get("PYTEST_XDIST_WORKER") else "first"


class Rigs:
    """The session's rigs by name, each brought up on the first test that asks for it and
    down at the session's end (Slurm before its hosts). One that failed to come up fails
    every later test that asks for it at once, with the first error (as a session fixture's
    error does), not after another attempt each."""

    def __init__(self) -> None:
        self.netns: dict[str, NetnsRig] = {}
        self.slurm: dict[str, SlurmRig] = {}
        self.failed: dict[tuple[str, str], Exception] = {}

    def _make(self, kind: str, name: str, made: dict[str, Any], up: Any) -> Any:
        if name in made:
            return made[name]
        if (kind, name) in self.failed:
            raise RigError(f"the {name} {kind} rig did not come up: {self.failed[kind, name]}")
        try:
            made[name] = up()
        except Exception as e:
            self.failed[kind, name] = e
            raise
        return made[name]

    def netns_rig(self, name: str) -> NetnsRig:
        _require()
        hosts = int(os.environ.get("HC_RIG_HOSTS", "4"))
        names = SECOND_RIG if name == "second" else {}
        return self._make("netns", name, self.netns, lambda: NetnsRig.up(hosts=hosts, **names))

    def slurm_rig(self, name: str) -> SlurmRig:
        net = self.netns_rig(name)
        _require(need_slurm=True)
        names = SECOND_SLURM if name == "second" else {}
        return self._make("slurm", name, self.slurm, lambda: SlurmRig.up(net, **names))

    def down(self) -> None:
        try:
            for rig in self.slurm.values():
                rig.down()
        finally:
            for net in self.netns.values():
                net.down()


@pytest.fixture(scope="session")
def rigs() -> Iterator[Rigs]:
    """The session's rigs (netns_rig and slurm_rig pick the test's)."""
    made = Rigs()
    try:
        yield made
    finally:
        made.down()


@pytest.fixture
def netns_rig(request: pytest.FixtureRequest, rigs: Rigs) -> NetnsRig:
    """4 namespace hosts, the same for the whole session (the test's group's rig)."""
    return rigs.netns_rig(rig_name(request))


@pytest.fixture
def slurm_rig(request: pytest.FixtureRequest, rigs: Rigs) -> SlurmRig:
    """Slurm with one slurmd per netns host, the same for the whole session (the test's
    group's rig)."""
    return rigs.slurm_rig(rig_name(request))


@pytest.fixture
def fresh_netns_rig(netns_rig: NetnsRig) -> NetnsRig:
    """netns_rig, reset to its initial state before the test."""
    netns_rig.reset()
    return netns_rig


@pytest.fixture
def fresh_slurm_rig(netns_rig: NetnsRig, slurm_rig: SlurmRig) -> SlurmRig:
    """slurm_rig (and its hosts), reset to the initial state before the test."""
    netns_rig.reset()
    slurm_rig.reset()
    return slurm_rig
