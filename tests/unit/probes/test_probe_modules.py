"""A run loads only the probe modules of the facts its checks need (probes.FACT_MODULES):
the table agrees with what the modules register, and a quick tier imports neither the
bandwidth, DCGM and ib_write_bw probes, nor a local run the agentless ones, nor the
parsers and launchers they import."""

from __future__ import annotations

import subprocess
import sys

from support import REPO

from healthcheck import probes
from healthcheck.core.facts import DEFAULT_PROVIDERS


def test_every_fact_is_listed_with_the_module_that_provides_it():
    probes.load_all()
    registered = {key: provider.fn.__module__.removeprefix("healthcheck.probes.")
                  for key, provider in DEFAULT_PROVIDERS.by_key.items()
                  if provider.fn.__module__.startswith("healthcheck.probes.")}
    assert set(probes.FACT_MODULES) == {fact for fact, _ in registered}
    assert set(probes.TRANSPORT_MODULES) <= set(registered)
    listed = {(fact, transport): probes.TRANSPORT_MODULES.get((fact, transport), probes.FACT_MODULES[fact])
              for fact, transport in registered}
    assert listed == registered


QUICK_RUN = """
import sys
from healthcheck.core.config import load_config
from healthcheck.orchestrate.localrun import check_this_node
check_this_node(load_config(None), node="n1", tier="quick")
print(" ".join(m for m in ("healthcheck.probes.bw", "healthcheck.probes.dcgm", "healthcheck.probes.ib_write_bw",
                           "healthcheck.probes.gpu_agentless", "healthcheck.probes.ib_agentless",
                           "healthcheck.parsers.nccl_tests", "healthcheck.parsers.nvidia_smi",
                           "healthcheck.parsers.ibstat", "healthcheck.runners.launch") if m in sys.modules))
"""


def test_a_quick_run_imports_no_deep_probe():
    done = subprocess.run([sys.executable, "-c", QUICK_RUN], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ""
