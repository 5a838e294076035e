"""`bin/sandbox up` in a fresh clone: the sandbox is a rig of its own (namespaces hcs<i>,
bridge hcsbr0, 10.97.0.0/24, Slurm on ports 16997/17201, all under /tmp/hc-sandbox) and the
clone's own .venv, so it shares nothing with the test rig (tests/rig): it runs beside the
rig's tests, in any worker (USES_RIG below; tests/riggroup.py). It still needs what the rig
needs (root, namespaces, sshd, Slurm): marked `rig`, so `-m rig` selects it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support import REPO

pytestmark = pytest.mark.rig
# its own sandbox, not the one rig per machine: not in the rig's worker (tests/riggroup.py)
USES_RIG = False


def assert_sandbox_sweep_drains_the_two_broken_nodes(up: subprocess.CompletedProcess) -> None:
    """The sandbox's own quickstart: `hc sweep --partition debug --act` (what `up` says to run)
    fails node2 (ib.E002) and node3 (net.E001), and drains both with hc's reasons."""
    env_file = Path("/tmp/hc-sandbox/env.sh")
    assert "hc sweep --partition debug --act" in up.stdout
    script = f". {env_file} && hc sweep --partition debug --act --format json && true"
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=180)
    report = json.loads(r.stdout)
    failing = {n["node"]: sorted(f["id"] for f in n["findings"] if f["status"] == "FAIL") for n in report["nodes"]
               if n["status"] == "FAIL"}
    assert failing == {"node2": ["ib.E002"], "node3": ["net.E001"]}, r.stderr
    sinfo = subprocess.run(["bash", "-c", f". {env_file} && sinfo -h -N -o '%N|%T|%E'"], capture_output=True,
                           text=True, timeout=30).stdout
    states = {line.split("|")[0]: line.split("|", 2)[1:] for line in sinfo.splitlines()}
    assert states["node2"] == ["drained", "hc: ib.E002"] and states["node3"] == ["drained", "hc: net.E001"]


def _fresh_checkout(dest: Path) -> Path:
    """What a fresh clone of this checkout holds (tracked files and new ones git does not
    ignore, as they are now), without the .venv or anything else built here."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True, timeout=60).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file() or source.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name, follow_symlinks=False)
    return dest


def test_sandbox_up_works_the_first_time_in_a_fresh_clone(tmp_path):
    """Issue 18 C.9: `bin/sandbox up` chose its Python before install.sh made the clone's
    .venv, so the first run found no hc; it asks only once the .venv is there. Then the
    sandbox does what it is for: its sweep drains the two nodes broken on purpose, and
    `down` leaves nothing (one `sandbox up`, the slow part, for both)."""
    clone = _fresh_checkout(tmp_path / "clone")
    assert not (clone / ".venv").exists()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    up = subprocess.run([str(clone / "bin/sandbox"), "up"], capture_output=True, text=True, timeout=900, env=env)
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        assert f"PATH={clone}/.venv/bin:" in Path("/tmp/hc-sandbox/env.sh").read_text()
        r = subprocess.run(["bash", "-c", ". /tmp/hc-sandbox/env.sh && hc --version"], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith("hc, version"), r.stderr
        assert_sandbox_sweep_drains_the_two_broken_nodes(up)
    finally:
        down = subprocess.run([str(clone / "bin/sandbox"), "down"], capture_output=True, text=True, timeout=120)
        assert down.returncode == 0
    assert not Path("/tmp/hc-sandbox").exists()
