"""bin/install as the README's first command runs it (issue 18 C.9), then `hc node --local`
from what it installed, on Debian's python3 that refuses pip: hc's venv is built on
an interpreter every user can run, never on the first python3 on PATH (pyenv's, under
root's home: "bad interpreter: Permission denied" for everyone else), and its last line
stands on its own. Needs root (another user runs the result) and Debian's /usr/bin/python3."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import REPO

SYSTEM_PYTHON = Path("/usr/bin/python3")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user can pass through, as /opt is (pytest's tmp_path is root's alone)."""
    if os.geteuid() != 0 or not SYSTEM_PYTHON.exists() or not shutil.which("runuser"):
        pytest.skip("needs root, /usr/bin/python3 and runuser")
    path = Path(tempfile.mkdtemp(prefix="hc-install-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def private_python(tmp_path: Path) -> Path:
    """A python3 only root can reach: a link in a directory closed to others (as pyenv's under /root)."""
    private = tmp_path / "private-bin"
    private.mkdir()
    private.chmod(0o700)
    (private / "python3").symlink_to(SYSTEM_PYTHON)
    return private / "python3"


def as_nobody(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", "nobody", "--", *argv], capture_output=True, text=True, timeout=120,
                          cwd="/")


STALE = "stale_module_of_an_old_install.py"


def checkout_with_an_old_build(tmp_path: Path) -> Path:
    """A copy of the checkout whose setuptools build/ still holds a module the sources no
    longer have, as an earlier `pip install .` from it left one (setuptools packs its
    build/lib whole: six deleted modules were installed that way)."""
    copy = tmp_path / "checkout"
    shutil.copytree(REPO, copy, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "tests", "*.egg-info", "__pycache__", ".*_cache"))
    stale = copy / "build" / "lib" / "healthcheck" / STALE
    stale.parent.mkdir(parents=True)
    stale.write_text("raise SystemExit('an old build')\n")
    return copy


def test_hc_is_built_on_the_system_python_whatever_python3_comes_first_on_path(tmp_path, shared_dir):
    # the README's first command on Debian 12, whose python3 refuses `pip install` (PEP 668):
    # bin/install makes a venv instead, and hc runs from it with the embedded config. One
    # install for both contracts: each costs ~40 s of pip in CI
    if list(Path("/usr/lib").glob("python3*/EXTERNALLY-MANAGED")):
        refused = subprocess.run([str(SYSTEM_PYTHON), "-m", "pip", "install", "--dry-run", str(REPO)],
                                 capture_output=True)
        said = refused.stderr + refused.stdout
        assert refused.returncode != 0 and (b"externally-managed-environment" in said or b"No module named pip" in said)
    first_on_path = private_python(tmp_path)
    prefix = shared_dir / "hc"
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = f"{first_on_path.parent}:{env['PATH']}"
    checkout = checkout_with_an_old_build(tmp_path)
    r = subprocess.run([str(checkout / "bin" / "install"), "--prefix", str(prefix)], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "home = /usr/bin" in (prefix / "pyvenv.cfg").read_text()
    other = as_nobody(str(prefix / "bin" / "hc"), "--version")
    assert other.returncode == 0 and other.stdout.startswith("hc, version"), other.stderr
    lines = r.stdout.splitlines()
    # --version's lines, then bin/install's own on a line of its own
    assert lines[0].startswith("hc, version") and lines[-1].startswith("bin/install: "), lines
    assert lines[-1].endswith(f"(HC_BIN={prefix}/bin/hc)") and lines[:-1] == other.stdout.splitlines()
    assert_man_page_found(prefix)
    assert_nothing_of_setuptools_at_start_up(prefix)
    installed = list(prefix.glob("lib/python3*/site-packages/healthcheck"))
    assert installed and not list(installed[0].rglob(STALE))  # the sources, not what build/ kept
    node = subprocess.run([str(prefix / "bin" / "hc"), "node", "--local", "--format", "json"], capture_output=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if not k.startswith("HC_")})
    assert node.returncode == 0, node.stderr


def assert_nothing_of_setuptools_at_start_up(prefix: Path) -> None:
    """The venv's setuptools (ensurepip's) is gone: its distutils-precedence.pth imported
    _distutils_hack at every start of hc, a prologue's too; hc's libraries stand without it
    (pip check) and pip itself still runs, for upgrades."""
    python = str(prefix / "bin" / "python")
    started = subprocess.run([python, "-c", "import sys; print(sorted(sys.modules))"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    assert "_distutils_hack" not in started and "setuptools" not in started, started
    assert not list(prefix.glob("lib/python3*/site-packages/distutils-precedence.pth"))
    for argv in (["-m", "pip", "--version"], ["-m", "pip", "check"]):
        done = subprocess.run([python, *argv], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)


def assert_man_page_found(prefix: Path) -> None:
    """`man hc` finds the page for a user with the prefix's bin on PATH (man-db looks beside
    each PATH directory); where there is no `man`, the page is where it would look."""
    page = prefix / "share" / "man" / "man1" / "hc.1"
    assert page.read_bytes() == (REPO / "docs" / "man" / "hc.1").read_bytes()
    assert page.stat().st_mode & 0o777 == 0o644  # every user reads it
    if shutil.which("man") is None:
        return
    env = {k: v for k, v in os.environ.items() if k not in ("MANPATH", "MANOPT")}
    env["PATH"] = f"{prefix / 'bin'}:/usr/bin:/bin"
    found = subprocess.run(["man", "-w", "hc"], env=env, capture_output=True, text=True, timeout=60)
    assert found.returncode == 0 and Path(found.stdout.strip()) == page, (found.stdout, found.stderr)


def test_an_interpreter_other_users_cannot_run_is_refused_for_a_shared_prefix(tmp_path, shared_dir):
    python = private_python(tmp_path)
    prefix = shared_dir / "hc"
    r = subprocess.run([str(REPO / "bin" / "install"), "--prefix", str(prefix)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHON=str(python)), timeout=120)
    assert r.returncode == 4, (r.stdout, r.stderr)
    assert str(python) in r.stderr and "other users" in r.stderr and "\n" not in r.stderr.strip()
    assert not prefix.exists()  # nothing half-built
