"""Node basics in the spirit of LBNL NHC: memory, free space, mounts, services.

A path hc may not look at, or a process list other users' processes are hidden from,
is an ERROR (could not judge), never the FAIL of a path "missing" or a service "down".
"""

from __future__ import annotations

from healthcheck.core import catalogue
from healthcheck.core.catalogue import finding
from healthcheck.core.config.docs import key_str
from healthcheck.core.config.schema import Fabric
from healthcheck.core.model import Limit, Metric
from healthcheck.core.registry import CheckOutput, check
from healthcheck.core.status import Status
from healthcheck.parsers.procfs import DiskSpace, MemInfo, Mounts, Processes

GIB = 1024**3

MEMORY_LOW = finding(
    "sys.E001",
    "the node has less memory than the fabric's figure",
    "A DIMM failed or was disabled by the BIOS: check the BMC's SEL and dmidecode -t memory; reseat or "
    "replace the DIMM.",
    action="rma",
)
DISK_LOW = finding(
    "sys.E002",
    "a path has less free space than the fabric requires",
    "Clean up the path (old job files in /tmp or /scratch, core dumps, logs) or grow the filesystem.",
    action="clean-up",
)
PATH_MISSING = finding(
    "sys.E003",
    "a path the fabric requires free space on does not exist or cannot be read",
    "Create or mount the path; if statvfs failed, the filesystem may be hung or gone.",
    action="investigate",
)
MOUNT_MISSING = finding(
    "sys.E004",
    "a required filesystem is not mounted",
    "Mount it (mount -a, or restart the automounter) and find out why it dropped (dmesg, the NFS/Lustre "
    "client logs).",
    action="investigate",
)
SERVICE_DOWN = finding(
    "sys.E005",
    "a required service is not running",
    "Start it (systemctl start NAME) and read its log; nvidia-fabricmanager must run before CUDA jobs "
    "can use NVSwitch.",
    action="investigate",
)


@check(
    "sys.memory",
    evidence_metrics=("mem_total_gib",),
    tier="quick",
    needs=("meminfo",),
    findings=(MEMORY_LOW,),
    budget_s=1.0,
    applies=lambda limits: None if limits.sys.mem_total_min_gib is not None else "no memory figure configured",
)
def memory(meminfo: MemInfo, limits: Fabric) -> CheckOutput:
    """The node has at least the fabric's total memory."""
    total_gib = meminfo.total_kib * 1024 / GIB
    yield Metric("mem_total_gib", round(total_gib, 1), "GiB")
    minimum = limits.sys.mem_total_min_gib
    if minimum is not None and total_gib < minimum:
        yield MEMORY_LOW.fail(
            f"memory total is {total_gib:.1f} GiB, expected at least {minimum:g}",
            value=round(total_gib, 1),
            unit="GiB",
            limit=Limit(">=", minimum, "sys.mem_total_min_gib"),
        )


@check(
    "sys.disk",
    evidence_metrics=("free_gib",),
    tier="quick",
    needs=("disk_space",),
    findings=(DISK_LOW, PATH_MISSING, catalogue.TOOL_FAILED),
    budget_s=2.0,
    applies=lambda limits: None if limits.sys.disk_free_min_gib else "no free-space limits configured",
)
def disk(disk_space: DiskSpace, limits: Fabric) -> CheckOutput:
    """Every configured path exists and has at least its configured free space."""
    measured = {entry.path: entry for entry in disk_space.paths}
    for path, minimum in limits.sys.disk_free_min_gib.items():
        entry = measured.get(path)
        if entry is None or entry.unreadable:
            why = entry.unreadable if entry is not None else "not measured"
            yield catalogue.TOOL_FAILED(Status.ERROR, f"{path} cannot be measured ({why}): its free space is unknown",
                                        component=path)
            continue
        if not entry.exists:
            yield PATH_MISSING.fail(f"{path} does not exist", component=path)
            continue
        if entry.free_bytes is None:
            yield PATH_MISSING.fail(f"{path} cannot be read: {entry.error}", component=path)
            continue
        free_gib = entry.free_bytes / GIB
        yield Metric("free_gib", round(free_gib, 2), "GiB", component=path)
        if free_gib < minimum:
            yield DISK_LOW.fail(
                f"{path} has {free_gib:.2f} GiB free, expected at least {minimum:g}",
                component=path,
                value=round(free_gib, 2),
                unit="GiB",
                limit=Limit(">=", minimum, key_str(("sys", "disk_free_min_gib", path))),
            )


@check(
    "sys.mounts",
    tier="quick",
    needs=("mounts",),
    findings=(MOUNT_MISSING,),
    budget_s=1.0,
    applies=lambda limits: None if limits.sys.mounts else "no required mounts configured",
)
def mounts(mounts: Mounts, limits: Fabric) -> CheckOutput:
    """Every required mount point is mounted."""
    for mountpoint in limits.sys.mounts:
        if not mounts.at(mountpoint.rstrip("/") or "/"):
            yield MOUNT_MISSING.fail(
                f"{mountpoint} is not mounted", component=mountpoint, limit=Limit("present", mountpoint, "sys.mounts")
            )


@check(
    "sys.services",
    tier="quick",
    needs=("processes",),
    findings=(SERVICE_DOWN, catalogue.TOOL_FAILED),
    budget_s=2.0,
    applies=lambda limits: None if limits.sys.services else "no required services configured",
)
def services(processes: Processes, limits: Fabric) -> CheckOutput:
    """Every service the fabric requires has its process running."""
    for service, process in limits.sys.services.items():
        if process not in processes.names and processes.incomplete:
            yield catalogue.TOOL_FAILED(
                Status.ERROR, f"{service}: no process {process} seen, but the process list is incomplete "
                f"({processes.incomplete}): cannot tell whether it runs", component=service)
        elif process not in processes.names:
            yield SERVICE_DOWN.fail(
                f"{service} is not running (no process {process})",
                component=service,
                limit=Limit("present", process, key_str(("sys", "services", service))),
            )
