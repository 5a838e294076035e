"""sys.* checks and their /proc and statvfs probes."""

from __future__ import annotations

import msgspec
import pytest

from healthcheck.checks.sys import disk, memory, mounts, services
from healthcheck.core.config.schema import Fabric
from healthcheck.core.errors import ParseError
from healthcheck.core.facts import ProbeContext
from healthcheck.core.model import Finding
from healthcheck.parsers.procfs import DiskSpace, MemInfo, PathSpace, Processes, parse_meminfo, parse_mounts
from healthcheck.probes.sysinfo import disk_space, processes
from healthcheck.runners.local import LocalRunner

GIB = 1024**3

MEMINFO = """MemTotal:       2113407228 kB
MemFree:        2000000000 kB
MemAvailable:   2050000000 kB
HugePages_Total:       0
"""

MOUNTS = """sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
/dev/vda / ext4 rw,relatime 0 0
storage:/home /home nfs4 rw,relatime,vers=4.2 0 0
lustre@o2ib:/scratch /lus/scratch\\040space lustre rw 0 0
"""


def ids(out):
    return [(o.id, o.status.value, o.component) for o in out if isinstance(o, Finding)]


def limits(**sys):
    return msgspec.convert({"sys": sys}, Fabric)


def test_meminfo_parser():
    mem = parse_meminfo(MEMINFO)
    assert (mem.total_kib, mem.available_kib) == (2113407228, 2050000000)
    with pytest.raises(ParseError):
        parse_meminfo("garbage")


def test_memory_edges():
    total_gib = 2113407228 * 1024 / GIB  # ~2015.5 GiB
    mem = parse_meminfo(MEMINFO)
    assert ids(memory(meminfo=mem, limits=limits(mem_total_min_gib=1800))) == []
    assert ids(memory(meminfo=mem, limits=limits(mem_total_min_gib=round(total_gib, 1) - 0.1))) == []
    out = list(memory(meminfo=mem, limits=limits(mem_total_min_gib=2048)))
    assert ids(out) == [("sys.E001", "FAIL", "")]
    assert out[-1].limit.key == "sys.mem_total_min_gib"


def test_mounts_parser_unescapes_octal():
    parsed = parse_mounts(MOUNTS)
    assert parsed.at("/lus/scratch space")[0].fstype == "lustre"
    with pytest.raises(ParseError):
        parse_mounts("")


def test_required_mounts():
    parsed = parse_mounts(MOUNTS)
    assert ids(mounts(mounts=parsed, limits=limits(mounts=["/home", "/home/"]))) == []
    assert ids(mounts(mounts=parsed, limits=limits(mounts=["/home", "/apps"]))) == [("sys.E004", "FAIL", "/apps")]


def test_disk_edges():
    space = DiskSpace([PathSpace("/tmp", True, free_bytes=10 * GIB, total_bytes=100 * GIB),
                       PathSpace("/scratch", False), PathSpace("/nfs", True, error="Stale file handle")])
    out = list(disk(disk_space=space, limits=limits(disk_free_min_gib={"/tmp": 10, "/scratch": 1, "/nfs": 1})))
    assert ids(out) == [("sys.E003", "FAIL", "/scratch"), ("sys.E003", "FAIL", "/nfs")]
    out = list(disk(disk_space=space, limits=limits(disk_free_min_gib={"/tmp": 10.01})))
    assert ids(out) == [("sys.E002", "FAIL", "/tmp")]


def test_disk_probe_on_real_paths(tmp_path):
    ctx = ProbeContext(runner=LocalRunner(), limits=limits(disk_free_min_gib={str(tmp_path): 0.001, "/no/such/path": 1}))
    facts = disk_space(ctx)
    by_path = {p.path: p for p in facts.paths}
    assert by_path[str(tmp_path)].exists and by_path[str(tmp_path)].free_bytes > 0
    assert not by_path["/no/such/path"].exists


def test_services():
    procs = Processes(frozenset({"nv-fabricmanager", "sshd"}))
    lim = limits(services={"nvidia-fabricmanager": "nv-fabricmanager", "nvidia-persistenced": "nvidia-persistenced"})
    assert ids(services(processes=procs, limits=lim)) == [("sys.E005", "FAIL", "nvidia-persistenced")]


def test_process_probe_sees_long_names_that_comm_truncates(tmp_path):
    import subprocess
    import sys

    exe = tmp_path / "nvidia-persistenced-standin"
    exe.symlink_to(sys.executable)
    proc = subprocess.Popen([str(exe), "-c", "import time; print('ready', flush=True); time.sleep(20)"],
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"  # exec'd: its argv is in place
        names = processes(ProbeContext(runner=LocalRunner())).names
        assert "nvidia-persistenced-standin" in names  # comm would say "nvidia-persiste"
    finally:
        proc.kill()
        proc.wait()


def test_memory_metric_is_recorded():
    out = list(memory(meminfo=MemInfo(total_kib=1024 * 1024), limits=limits(mem_total_min_gib=0.5)))
    assert out[0].name == "mem_total_gib" and out[0].value == 1.0
