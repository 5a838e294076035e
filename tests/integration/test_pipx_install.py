"""`pipx install .` for real: Debian's pipx builds hc's wheel from a copy of this checkout
into a throw-away PIPX_HOME, and the `hc` it puts on PATH runs `--version` and
`node --local`. The dependencies come from pip's configured indexes (PyPI)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support import REPO

from healthcheck import __version__

pytestmark = pytest.mark.slow
# touches no rig (tests/conftest.py): runs beside the rig's tests, in any worker
USES_RIG = False

# what `pipx install .` needs of the checkout: pyproject.toml names README.md, and
# healthcheck/configs is a link to ../configs (the embedded default config and fabrics)
SOURCE = ("pyproject.toml", "README.md", "healthcheck", "configs")
# pip's words for an index it could not reach (not for a requirement nothing satisfies)
OFFLINE = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable",
           "Max retries exceeded")


def copy_source(dest: Path) -> Path:
    """The checkout's packaging inputs, links kept: a build in the checkout itself would
    write build/ and *.egg-info there, under the feet of whoever runs tests beside it."""
    dest.mkdir()
    for name in SOURCE:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def pipx_hc(tmp_path_factory) -> tuple[Path, Path]:
    """(the `hc` pipx installed, PIPX_HOME)."""
    pipx = shutil.which("pipx")
    if pipx is None:
        pytest.skip("needs pipx (Debian: apt-get install pipx; tests/rig/install.sh installs it)")
    tmp = tmp_path_factory.mktemp("pipx")
    home, bindir = tmp / "home", tmp / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "PIPX_", "VIRTUAL_ENV"))}
    env.update(PIPX_HOME=str(home), PIPX_BIN_DIR=str(bindir), PIPX_MAN_DIR=str(tmp / "man"))
    r = subprocess.run([pipx, "install", str(copy_source(tmp / "src"))], capture_output=True, env=env, timeout=900)
    said = (r.stdout + r.stderr).decode(errors="replace")
    if r.returncode != 0 and any(word in said for word in OFFLINE):
        pytest.skip(f"pip could not reach its package index: {said.strip().splitlines()[-1][:200]}")
    assert r.returncode == 0, said[-3000:]
    return bindir / "hc", home


def hc_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM", "VIRTUAL_ENV"))}


def test_pipx_installed_hc_names_its_version_and_runs_from_its_own_venv(pipx_hc):
    hc, home = pipx_hc
    r = subprocess.run([str(hc), "--version"], capture_output=True, env=hc_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0] == f"hc, version {__version__}"
    assert str(home) in lines[1]  # python: ... the interpreter of pipx's venv, not this checkout's
    assert [line.split(":", 1)[0] for line in lines[1:]] == ["python", "torch", "NCCL", "NVIDIA driver"]


def test_pipx_installed_hc_checks_this_node(pipx_hc):
    hc, _ = pipx_hc
    r = subprocess.run([str(hc), "node", "--local", "--format", "json"], capture_output=True, env=hc_env(),
                       timeout=120)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["schema"].startswith("hc.report/") and len(report["nodes"]) == 1
    # the embedded default config came with the wheel (healthcheck/configs is a link in the checkout)
    assert report["config_path"].startswith(str(pipx_hc[1])) and report["config_path"].endswith("default.yaml")


def test_pipx_venv_dependencies_are_consistent(pipx_hc):
    hc, _ = pipx_hc
    # the venv's own pip: every installed distribution's requirements (hc's bounds included) hold
    pip = hc.resolve().parent / "pip"
    python = hc.resolve().parent / "python"
    argv = [str(pip), "check"] if pip.exists() else [str(python), "-m", "pip", "check"]
    r = subprocess.run(argv, capture_output=True, env=hc_env(), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
