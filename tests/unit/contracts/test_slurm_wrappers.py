"""The Slurm wrappers installed as people install them (issue 18 C.8): copied without
hc-env.sh, linked from a checkout, with a settings file that is missing, broken or calls
`exit`, with an HC_BIN that is not there. Whatever happens, a wrapper exits only by its
contract (prolog 0 or 2, epilog 0, health hc's code or 3), and says loudly when no node
is checked. Run here with /bin/sh and the environment slurmd gives (none); the same on
real Slurm is integration/test_slurm_contract.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import REPO

SLURM = REPO / "slurm"
WRAPPERS = ("prolog.sh", "epilog.sh", "healthcheck.sh")
HOOK = {"prolog.sh": "prologue", "epilog.sh": "epilogue", "healthcheck.sh": "health"}


def fake_hc(tmp_path: Path, rc: int = 0) -> Path:
    """An hc that notes its command and exits rc."""
    hc = tmp_path / "bin" / "hc"
    hc.parent.mkdir(exist_ok=True)
    hc.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/ran\nexit {rc}\n')
    hc.chmod(0o755)
    return hc


def run(wrapper: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """As slurmd runs it: by its absolute path, with no PATH and nothing else we did not give."""
    return subprocess.run([str(wrapper)], env=env or {}, capture_output=True, text=True, timeout=30, cwd="/")


def ran(tmp_path: Path) -> list[str]:
    return (tmp_path / "ran").read_text().splitlines() if (tmp_path / "ran").exists() else []


def install(tmp_path: Path, how: str, settings: str) -> Path:
    """The wrappers in tmp_path/hooks: copied alone (no hc-env.sh), or linked from the checkout;
    the settings file beside them."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in WRAPPERS:
        if how == "copied alone":
            shutil.copy(SLURM / name, hooks / name)
        else:
            (hooks / name).symlink_to(SLURM / name)
    (hooks / "hc-slurm.env").write_text(settings)
    return hooks


@pytest.mark.parametrize("how", ["copied alone", "linked from the checkout"])
@pytest.mark.parametrize("name", WRAPPERS)
def test_a_wrapper_copied_alone_or_linked_runs_hc_from_its_settings(tmp_path, how, name):
    hc = fake_hc(tmp_path)
    hooks = install(tmp_path, how, f"HC_BIN={hc}\nHC_CONFIG=/etc/hc/x.yaml\n")
    r = run(hooks / name)
    assert r.returncode == 0, r.stderr
    assert ran(tmp_path) == [HOOK[name]]


@pytest.mark.parametrize("how", ["copied alone", "linked from the checkout"])
@pytest.mark.parametrize(("rc", "prolog", "epilog", "health"), [(0, 0, 0, 0), (2, 2, 0, 2), (1, 0, 0, 1), (137, 0, 0, 137)])
def test_hcs_own_exit_goes_through_its_contract(tmp_path, how, rc, prolog, epilog, health):
    hooks = install(tmp_path, how, f"HC_BIN={fake_hc(tmp_path, rc)}\n")
    assert [run(hooks / n).returncode for n in WRAPPERS] == [prolog, epilog, health]


BROKEN = {
    "a syntax error": "HC_BIN=/x\nif then fi (\n",
    "an exit": "exit 7\n",
    "a directory in its place": None,
    "a readonly clash": "readonly PATH\nPATH=/nowhere\n",
}


@pytest.mark.parametrize("how", ["copied alone", "linked from the checkout"])
@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_settings_file_never_changes_how_a_wrapper_exits(tmp_path, how, case):
    hooks = install(tmp_path, how, BROKEN[case] or "")
    if BROKEN[case] is None:
        (hooks / "hc-slurm.env").unlink()
        (hooks / "hc-slurm.env").mkdir()
    codes = [run(hooks / n).returncode for n in WRAPPERS]
    assert codes[:2] == [0, 0] and codes[2] in (0, 1, 2, 3, 4, 5), codes


@pytest.mark.parametrize("content", ["if then fi (\n", "exit 2\n"])
def test_a_broken_hc_env_sh_beside_the_wrappers_never_changes_how_they_exit(tmp_path, content):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in WRAPPERS:
        shutil.copy(SLURM / name, hooks / name)
    (hooks / "hc-env.sh").write_text(content)
    assert [run(hooks / n).returncode for n in WRAPPERS][:2] == [0, 0]
    assert run(hooks / "healthcheck.sh").returncode == 3


@pytest.mark.parametrize("how", ["copied alone", "linked from the checkout"])
@pytest.mark.parametrize("hc_bin", ["/nonexistent/hc", "not-an-hc-anywhere", "a file that is not executable"])
def test_an_hc_bin_that_is_not_there_is_said_loudly_and_the_contract_kept(tmp_path, how, hc_bin):
    if hc_bin.startswith("a file"):
        hc_bin = str(tmp_path / "hc.txt")
        Path(hc_bin).write_text("not a program")
    hooks = install(tmp_path, how, f"HC_BIN='{hc_bin}'\n")
    for name, code in zip(WRAPPERS, (0, 0, 3), strict=True):
        r = run(hooks / name)
        assert r.returncode == code, (name, r.stderr)
        assert f"HC_BIN={hc_bin} is not an executable file" in r.stderr and "NOT checked" in r.stderr, r.stderr


def test_the_three_wrappers_read_their_settings_alike():
    """One block, copied into each (a wrapper must work alone): it cannot drift in one."""
    blocks = {n: re.search(r"# --- settings.*?# --- end of settings ---\n", (SLURM / n).read_text(), re.S)
              for n in WRAPPERS}
    assert all(blocks.values()) and len({b.group(0) for b in blocks.values() if b}) == 1


def test_the_example_settings_name_the_hc_bin_install_puts_in_place():
    """The example said /usr/local/bin/hc where bin/install puts /opt/hc/bin/hc: as is, no node was checked."""
    example = dict(line.split("#")[0].strip().split("=", 1) for line in
                   (SLURM / "hc-slurm.env.example").read_text().splitlines() if re.match(r"^[A-Z_]+=", line))
    prefix = re.search(r"^prefix=(\S+)$", (REPO / "bin" / "install").read_text(), re.M).group(1)
    docs = "".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    assert example["HC_BIN"] == f"{prefix}/bin/hc" == "/opt/hc/bin/hc"
    assert set(re.findall(r"HC_BIN=(/[^\s`]+)", docs)) == {example["HC_BIN"]}  # every path they name


def test_the_docs_install_command_installs_every_file_with_its_mode(tmp_path):
    """docs/slurm.md's commands, run into tmp_path instead of /etc: the four files of slurm/,
    executable, and the settings file; the wrappers then run hc from it."""
    section = (REPO / "docs" / "slurm.md").read_text()
    block = re.search(r"```sh\n(install .*?)```", section, re.S).group(1)
    lines = [line.replace("/etc/", f"{tmp_path}/etc/") for line in block.strip().splitlines()]
    assert len(lines) == 2 and all(line.startswith("install ") for line in lines)
    subprocess.run(["sh", "-ec", "\n".join(lines)], cwd=REPO, check=True, timeout=30)
    hooks = tmp_path / "etc" / "slurm" / "hc"
    assert sorted(p.name for p in hooks.iterdir()) == sorted([*WRAPPERS, "hc-env.sh"])
    assert all(os.access(hooks / n, os.X_OK) for n in WRAPPERS)
    settings = tmp_path / "etc" / "hc" / "slurm.env"
    assert "HC_BIN=/opt/hc/bin/hc" in settings.read_text()
    settings.write_text(settings.read_text().replace("/opt/hc/bin/hc", str(fake_hc(tmp_path))))
    for name in WRAPPERS:
        assert run(hooks / name, {"HC_SETTINGS": str(settings)}).returncode == 0
    assert ran(tmp_path) == ["prologue", "epilogue", "health"]
