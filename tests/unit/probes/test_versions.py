"""`hc --version`: hc's version and the torch, NCCL and NVIDIA driver versions it can see,
read from fake roots and stand-in metadata here, from the real ldconfig where it can be,
and never failing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError
from pathlib import Path

import pytest
from support import FIXTURES, REPO, run_hc

from healthcheck import __version__
from healthcheck.probes import versions
from healthcheck.probes.versions import (
    Found,
    driver_version,
    nccl_versions,
    parse_driver_version,
    torch_version,
    version_lines,
)
from healthcheck.runners.base import CommandResult

VERSIONS = FIXTURES / "versions"
# `ldconfig -N -X -v` as it prints a directory with NCCL (the parser's format; see test_parsers_gpu_misc)
LDCONFIG_WITH_NCCL = ("/usr/lib/x86_64-linux-gnu: (from /etc/ld.so.conf.d/x86_64-linux-gnu.conf:3)\n"
                      "\tlibnccl.so.2 -> libnccl.so.2.21.5\n\tlibc.so.6 -> libc-2.36.so\n")
LDCONFIG_WITHOUT = "/usr/lib/x86_64-linux-gnu: (from /etc/ld.so.conf.d/x86_64-linux-gnu.conf:3)\n\tlibc.so.6 -> libc.so.6\n"


def metadata(**installed: str):
    """importlib.metadata.version over a fixed set of distributions."""

    def version(name: str) -> str:
        if name in installed:
            return installed[name]
        raise PackageNotFoundError(name)

    return version


def ldconfig(stdout: str = "", returncode: int | None = 0, stderr: str = "", **flags: bool) -> versions.Run:
    """A runner that answers any command as ldconfig would have."""
    return lambda argv: CommandResult(tuple(argv), returncode, stdout, stderr, 0.01, **flags)


def fake_root(tmp_path: Path, files: dict[str, str]) -> Path:
    for absolute, text in files.items():
        path = tmp_path / absolute.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


# ------------------------------------------------------------------- the driver


@pytest.mark.parametrize("fixture, version", [
    ("proc-driver-nvidia-version-515.76.txt", "515.76"),
    ("proc-driver-nvidia-version-open-555.58.02.txt", "555.58.02"),
])
def test_driver_version_from_proc(tmp_path, fixture, version):
    root = fake_root(tmp_path, {"/proc/driver/nvidia/version": (VERSIONS / fixture).read_text()})
    assert driver_version(root) == Found(version, "/proc/driver/nvidia/version")


@pytest.mark.parametrize("line, version", [
    # the open modules on ARM, and a proprietary banner of the same form as the kernel log's
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.65.06  Release Build", "580.65.06"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023", "535.104.05"),
    ("580.159.03\n", "580.159.03"),  # /sys/module/nvidia/version
    ("", None),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  Release Build\n", None),
    ("GCC version:  gcc version 7.5.0\nNVRM version: NVIDIA UNIX x86_64 Kernel Module  515.76\n", None),  # not the first line
    ("\x00\xff" * 5000, None),
])
def test_parse_driver_version(line, version):
    assert parse_driver_version(line) == version


def test_driver_version_falls_back_to_sysfs(tmp_path):
    root = fake_root(tmp_path, {"/proc/driver/nvidia/version": "garbled\n", "/sys/module/nvidia/version": "580.159.03\n"})
    assert driver_version(root) == Found("580.159.03", "/sys/module/nvidia/version")


def test_no_driver_is_not_found_naming_what_was_looked_at(tmp_path):
    found = driver_version(tmp_path)
    assert found.version is None
    assert "/proc/driver/nvidia/version" in found.where and "/sys/module/nvidia/version" in found.where
    assert found.text().startswith("not found (")


def test_a_fifo_planted_as_the_version_file_is_not_read(tmp_path):
    # opening a FIFO for reading blocks until a writer comes: --version must not hang on one
    fifo = tmp_path / "proc/driver/nvidia/version"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    fake_root(tmp_path, {"/sys/module/nvidia/version": "570.86.15\n"})
    assert driver_version(tmp_path) == Found("570.86.15", "/sys/module/nvidia/version")


# ------------------------------------------------------------------------ torch


def test_torch_version_from_metadata_without_importing_it():
    assert torch_version(metadata(torch="2.11.0+cu130")) == Found("2.11.0+cu130", "package metadata")
    absent = torch_version(metadata())
    assert absent.version is None and sys.prefix in absent.where


def test_garbled_metadata_is_not_found():
    assert torch_version(metadata(torch="x" * 500)).version is None
    assert torch_version(metadata(torch="")).version is None


# ------------------------------------------------------------------------- NCCL


def test_nccl_from_the_wheel_and_the_system_library():
    found = nccl_versions(metadata(**{"nvidia-nccl-cu13": "2.28.9"}), ldconfig(LDCONFIG_WITH_NCCL))
    assert found == [Found("2.28.9", "nvidia-nccl-cu13 wheel"),
                     Found("2.21.5", "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5")]


@pytest.mark.parametrize("run, why", [
    (ldconfig(LDCONFIG_WITHOUT), "ldconfig lists no libnccl.so"),
    (ldconfig(returncode=None, not_found=True), "ldconfig not found"),
    (ldconfig("partial", returncode=None, timed_out=True), "did not answer"),
    (ldconfig("", returncode=2, stderr="ldconfig: bad option"), "exit 2"),
    (ldconfig("garbage without a directory line\n"), "no library directory"),
])
def test_no_nccl_is_not_found_with_why(run, why):
    [found] = nccl_versions(metadata(), run)
    assert found.version is None and why in found.where and "no nvidia-nccl wheel" in found.where


def test_ldconfig_exit_1_still_lists_what_it_could_read():
    # ldconfig exits 1 when one listed directory is unreadable; the rest stands (as in probes/gpu.py)
    [found] = nccl_versions(metadata(), ldconfig(LDCONFIG_WITH_NCCL, returncode=1))
    assert found.version == "2.21.5"


@pytest.mark.skipif(not shutil.which("gcc") or not shutil.which("ldconfig"), reason="needs gcc and ldconfig")
def test_real_ldconfig_finds_a_libnccl_built_here(tmp_path):
    """The real ldconfig over a directory holding a shared library whose SONAME is libnccl.so.2."""
    src = tmp_path / "nccl.c"
    src.write_text("int ncclGetVersion(int *v) { *v = 22105; return 0; }\n")
    lib = tmp_path / "libnccl.so.2.21.5"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o", str(lib), str(src)], check=True)
    # -n: only the directories named; the real command reads every configured one the same way
    found = nccl_versions(metadata(), versions._run_ldconfig, ("ldconfig", "-N", "-X", "-n", "-v", str(tmp_path)))
    assert found == [Found("2.21.5", str(lib))]


# ------------------------------------------------------------ the whole command


def test_version_lines_name_each_component():
    lines = version_lines("9.9.9", root=Path("/nonexistent-root"), metadata=metadata(torch="2.13.0+cpu"),
                          run=ldconfig(LDCONFIG_WITHOUT))
    assert lines[0] == "hc, version 9.9.9"
    by_label = dict(line.split(": ", 1) for line in lines[1:])
    assert set(by_label) == {"python", "torch", "NCCL", "NVIDIA driver"}
    assert by_label["torch"] == "2.13.0+cpu (package metadata)"
    assert by_label["NCCL"].startswith("not found (") and by_label["NVIDIA driver"].startswith("not found (")


def test_version_lines_never_raise():
    def broken_metadata(name: str) -> str:
        raise RuntimeError("a corrupt METADATA file")

    def broken_run(argv):
        raise OSError("fork failed")

    lines = version_lines("1.0", root=Path("/nonexistent-root"), metadata=broken_metadata, run=broken_run)
    assert lines[0] == "hc, version 1.0" and len(lines) == 5
    assert "torch: not found" in lines[2]  # a metadata error is "not there", like a missing package
    assert lines[3].startswith("NCCL: unknown (OSError: fork failed")


def test_hc_version_prints_every_line_and_imports_no_torch():
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr))\n"
            "from healthcheck.cli import main\nmain(['--version'])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HC_")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0] == f"hc, version {__version__}"
    assert [line.split(":", 1)[0] for line in lines[1:]] == ["python", "torch", "NCCL", "NVIDIA driver"]
    assert r.stderr.decode().strip().splitlines()[-1] == "NO-TORCH"


def test_hc_version_via_the_entry_point():
    r = run_hc("--version")
    assert r.returncode == 0 and r.stdout.startswith(f"hc, version {__version__}\n".encode())
    assert b"NVIDIA driver: " in r.stdout and r.stderr == b""
