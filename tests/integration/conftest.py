"""Fixtures shared by the integration tests on the rig."""

from __future__ import annotations

import pytest
from test_slurm_hooks import HcCluster


@pytest.fixture
def hc(fresh_netns_rig, slurm_rig, tmp_path) -> HcCluster:
    """hc installed into the rig's real Slurm: config, wrappers, settings, GPU stand-ins.

    Slurm is restarted once, straight into the hooks' config (use_hooks -> reconfigure), not
    first reset to the baseline (fresh_slurm_rig, itself a restart after the last test's
    hooks) and then restarted again: a restart is the clean state reset() gives (slurm-up.sh
    wipes the cluster's directory: no jobs, every node idle, no hook flags or events), and
    reset() puts the baseline back for the next test that asks for fresh_slurm_rig."""
    cluster = HcCluster(tmp_path, fresh_netns_rig, slurm_rig)
    cluster.write_config()
    cluster.install_hooks()
    cluster.use_hooks()
    return cluster
