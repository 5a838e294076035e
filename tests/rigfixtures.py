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
netns_rig        session: NetnsRig with 4 hosts node1..node4 (MTU 9000 everywhere
                 unless $HC_RIG_MTUS says otherwise), torn down at session end.
slurm_rig        session: SlurmRig on netns_rig (recording prolog/epilog hooks,
                 PrologFlags=Alloc), stopped at session end (before netns_rig).
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

Rig tests share one rig per session, so they must not run in parallel processes
(pytest-xdist) unless each worker gets its own HC_RIG_PREFIX/SUBNET/BRIDGE/DIR and
HC_SLURM_DIR/HC_SLURM_CTLD_PORT: tests/riggroup.py sends them all to one worker.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture(scope="session")
def netns_rig() -> Iterator[NetnsRig]:
    """4 namespace hosts for the whole session."""
    _require()
    hosts = int(os.environ.get("HC_RIG_HOSTS", "4"))
    rig = NetnsRig.up(hosts=hosts)
    try:
        yield rig
    finally:
        rig.down()


@pytest.fixture(scope="session")
def slurm_rig(netns_rig: NetnsRig) -> Iterator[SlurmRig]:
    """Slurm with one slurmd per netns host for the whole session."""
    _require(need_slurm=True)
    rig = SlurmRig.up(netns_rig)
    try:
        yield rig
    finally:
        rig.down()


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
