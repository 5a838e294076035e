"""Fixtures shared by the integration tests on the rig."""

from __future__ import annotations

import pytest
from test_slurm_hooks import HcCluster


@pytest.fixture
def hc(fresh_netns_rig, fresh_slurm_rig, tmp_path) -> HcCluster:
    """hc installed into the rig's real Slurm: config, wrappers, settings, GPU stand-ins."""
    cluster = HcCluster(tmp_path, fresh_netns_rig, fresh_slurm_rig)
    cluster.write_config()
    cluster.install_hooks()
    cluster.use_hooks()
    return cluster
