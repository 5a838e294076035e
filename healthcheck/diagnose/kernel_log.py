"""The node's kernel log in the job's window: OOM kills (with the Slurm job the kernel's
`oom-kill:` line names from the killed task's memory cgroup), NVIDIA Xid and SXid lines
(parsers.xid) and mlx5 link events, read through hc's kernel-log reader
(probes.gpu.read_kernel_log: /dev/kmsg, then `dmesg --time-format iso`, then the journal
since the window's start), bounded in time and size. The window starts at `since` when
given, else at the earliest start (/proc/PID/stat) of the job's processes on this node,
else at SLURM_JOB_START_TIME where the collector runs in the job (`job_window`). Lines
stamped before the window, and lines with no time at all, are dropped (counted): stale
events must not make a diagnosis. A log no source could read, or a window no process
says, is a note in the result (`KernelLog.note`), never an exception."""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from healthcheck.core.errors import ParseError
from healthcheck.core.facts import ProbeContext, ProbeError
from healthcheck.core.inputs import clip
from healthcheck.diagnose.nodeschema import KernelLine, KernelLog
from healthcheck.diagnose.procs import cgroup_job, machine_boot_time, parse_int, process_start
from healthcheck.parsers.kernlog import split_prefix
from healthcheck.parsers.xid import parse_kernel_log
from healthcheck.probes.gpu import MAX_SINCE, Source, command_source, kmsg_source, read_kernel_log
from healthcheck.runners.local import LocalRunner

KERNEL_TIMEOUT_S = 5.0  # for one kernel-log source (dmesg, journalctl)
MAX_KERNEL_TEXT = 32 << 20  # characters of a kernel log looked at (the ring buffer is far smaller)
MAX_KERNEL_EVENTS = 200  # kept per node (the first in the window; the rest counted)
KERNEL_SLACK_S = 1.0  # a line stamped this much before the window still counts (clock rounding)
KERNEL_FIX = ("run the collector as root or with CAP_SYSLOG (kernel.dmesg_restrict=1 refuses others /dev/kmsg "
              "and dmesg), or add its user to the systemd-journal group")
# mm/oom_kill.c: "%s: Killed process %d (%s) total-vm:..." with %s "Out of memory" (and
# " (oom_kill_allocating_task)") or "Memory cgroup out of memory"; kernels before 4.19 also
# print the bare "Killed process N (comm)" after "Kill process N (comm) score S or sacrifice child"
_OOM_KILLED = re.compile(r"Killed process (?P<pid>\d{1,10}) \((?P<name>[^)]{0,64})\)")
# 4.19+: "oom-kill:constraint=...,oom_memcg=...,task_memcg=/slurm/uid_0/job_5/step_0/task_0,task=python3,pid=1234,"
_OOM_INFO = re.compile(r"oom-kill:\S{0,2048}?task_memcg=(?P<memcg>[^,\s]{0,1024})\S{0,512}?,pid=(?P<pid>\d{1,10})")
_LINK_WORDS = re.compile(r"\blink (?:is )?(?:down|up)\b|\bport module event\b|\bport (?:\d{1,3} )?state\b"
                         r"|\bphysical port state\b|\bstate change\b|\bport \d{1,3} change\b", re.I)
_LINK_DEVICE = re.compile(r"mlx5_core (?P<pci>[0-9a-fA-F:.]{7,16})(?: (?P<ifname>[^\s:]{1,32}))?:"
                          r"|\b(?P<ib>mlx5_\d{1,3})\b")
_KERNEL_WORDS = ("Killed process", "oom-kill:", "NVRM", "SXid", "mlx5")


def kernel_sources(timeout_s: float = KERNEL_TIMEOUT_S, since: float | None = None, root: str = "/") -> list[Source]:
    """hc's kernel-log sources, in order: /dev/kmsg, `dmesg --time-format iso`, plain dmesg,
    the journal (from `since` only, so a long boot's journal is not read whole)."""

    ctx = ProbeContext(runner=LocalRunner(), root=Path(root), timeout_s=timeout_s)
    journal: tuple[str, ...] = ("journalctl", "-k", "-b", "-o", "short-iso", "--no-pager", "-q")
    if since is not None:
        journal += ("--since", f"@{int(since)}")
    return [kmsg_source(ctx), command_source(ctx, ("dmesg", "--time-format", "iso")),
            command_source(ctx, ("dmesg",)), command_source(ctx, journal)]


def kernel_events(text: str, since: float, *, boot: float | None = None, year: int | None = None,
                  max_events: int = MAX_KERNEL_EVENTS) -> tuple[list[KernelLine], int, int, int]:
    """The OOM kills, Xid/SXid and mlx5 link events of a kernel log stamped at or after
    `since` (less KERNEL_SLACK_S): (events in log order, dropped before the window, dropped
    without a time, dropped past max_events)."""
    lines = text[:MAX_KERNEL_TEXT].split("\n")
    found: list[tuple[int, KernelLine]] = []
    nvidia: list[tuple[int, str]] = []
    oom_job: dict[int, str] = {}
    for number, raw in enumerate(lines, 1):
        if not any(w in raw for w in _KERNEL_WORDS):
            continue
        line = raw[:4096]
        if "NVRM" in line or "SXid" in line:
            nvidia.append((number, raw))
            continue
        stamp, body = split_prefix(line, boot, year)
        m = _OOM_INFO.search(body)
        if m:
            job = cgroup_job(m.group("memcg"))
            if job is not None:
                oom_job[int(m.group("pid"))] = job
            continue
        m = _OOM_KILLED.search(body)
        if m:
            pid = int(m.group("pid"))
            found.append((number, KernelLine("oom-kill", clip(body.strip(), 300), number, stamp.time, pid=pid,
                                             process=m.group("name"), job=oom_job.get(pid))))
            continue
        if "mlx5" in body and _LINK_WORDS.search(body):
            d = _LINK_DEVICE.search(body)
            device = (d.group("ib") or " ".join(x for x in (d.group("pci"), d.group("ifname")) if x)) if d else ""
            found.append((number, KernelLine("link", clip(body.strip(), 300), number, stamp.time, device=device)))
    if nvidia:
        found.extend(_nvidia_events(nvidia, boot, year))
    found.sort(key=lambda x: x[0])
    kept: list[KernelLine] = []
    before = untimed = over = 0
    for _, e in found:
        if e.time is None:
            untimed += 1
        elif e.time < since - KERNEL_SLACK_S:
            before += 1
        elif len(kept) >= max_events:
            over += 1
        else:
            kept.append(e)
    return kept, before, untimed, over


def _nvidia_events(nvidia: list[tuple[int, str]], boot: float | None, year: int | None) \
        -> list[tuple[int, KernelLine]]:
    try:
        # whole lines, each with its line end (a text without one may end inside its last word: not read)
        log = parse_kernel_log("".join(raw + "\n" for _, raw in nvidia), boot_time=boot, year=year)
    except ParseError:
        return []
    numbers: dict[str, list[int]] = {}
    for number, raw in nvidia:
        numbers.setdefault(raw, []).append(number)

    def number_of(raw: str) -> int:
        left = numbers.get(raw)
        return left.pop(0) if left else 0

    out: list[tuple[int, KernelLine]] = []
    for x in log.xids:
        n = number_of(x.line)
        out.append((n, KernelLine("xid", clip(split_prefix(x.line, None, None)[1].strip(), 300), n, x.time,
                                  pid=x.pid, process=x.process or "", xid=x.code, pci_bus_id=x.pci_bus_id or "")))
    seen: set[tuple[int, str | None]] = set()
    for sx in log.sxids:
        n = number_of(sx.line)
        if sx.severity is None and (sx.code, sx.pci_bus_id) in seen:
            continue  # its "Severity ..." / "Data {...}" lines repeat the event
        seen.add((sx.code, sx.pci_bus_id))
        out.append((n, KernelLine("xid", clip(split_prefix(sx.line, None, None)[1].strip(), 300), n, sx.time,
                                  xid=sx.code, pci_bus_id=sx.pci_bus_id or "", device=sx.switch or "")))
    for f in log.faults:
        n = number_of(f.line)
        out.append((n, KernelLine("xid", clip(split_prefix(f.line, None, None)[1].strip(), 300), n, f.time,
                                  pci_bus_id=f.pci_bus_id or "")))
    return out


def read_kernel(since: float | None, *, since_from: str = "", sources: Sequence[Source] | None = None,
                timeout_s: float = KERNEL_TIMEOUT_S, boot: float | None = None, year: int | None = None) -> KernelLog:
    """The node's kernel events in the window from `since` (see the module's docstring). A
    log no source could read, or no window, is a KernelLog with `note`, never an exception."""
    start = time.monotonic()
    if since is not None and not (math.isfinite(since) and 0 <= since <= MAX_SINCE):
        return KernelLog(note=f"kernel log not read: since={since!r} is not a usable time")
    if since is None:
        return KernelLog(note="kernel log not read: the job's start is not known on this node (no process of it "
                              "here); give --since")
    srcs = list(sources) if sources is not None else kernel_sources(timeout_s, since)
    try:
        text, name, count = read_kernel_log(srcs)
    except (ProbeError, OSError) as exc:
        why = exc.message if isinstance(exc, ProbeError) else str(exc)
        return KernelLog(since=since, since_from=since_from, note=f"kernel log unreadable ({clip(why, 600)}); "
                         f"fix: {KERNEL_FIX}", duration_s=round(time.monotonic() - start, 3))
    if boot is None:  # raw "[uptime]" stamps (/dev/kmsg, plain dmesg) need it
        boot = machine_boot_time()
    events, before, untimed, over = kernel_events(text, since, boot=boot, year=year)
    notes = []
    if untimed:
        notes.append(f"{untimed} event(s) without a time could not be placed in the job's window: left out")
    if over:
        notes.append(f"{over} more event(s) past the first {MAX_KERNEL_EVENTS}: left out")
    if len(text) > MAX_KERNEL_TEXT:
        notes.append(f"only the first {MAX_KERNEL_TEXT} characters of the kernel log were read")
    return KernelLog(since=since, since_from=since_from, source=name, lines=count, events=tuple(events),
                     dropped_before=before, dropped_untimed=untimed, dropped_over=over,
                     note="; ".join(notes) or None, duration_s=round(time.monotonic() - start, 3))


def job_window(pids: Iterable[int], *, job_id: str | None, proc: str = "/proc",
               env: Mapping[str, str] | None = None) -> tuple[float | None, str]:
    """The job's start on this node: the earliest start of its processes here, else
    SLURM_JOB_START_TIME where this collector runs inside the job; (None, "") when neither says."""
    boot = machine_boot_time(proc)
    best: tuple[float, int] | None = None
    for pid in dict.fromkeys(pids):
        t = process_start(pid, proc, boot) if boot is not None else None
        if t is not None and (best is None or t < best[0]):
            best = (t, pid)
    if best is not None:
        return best[0], f"process {best[1]}"
    env = os.environ if env is None else env
    start = parse_int(env.get("SLURM_JOB_START_TIME"))
    if start and job_id is not None and env.get("SLURM_JOB_ID") == str(job_id):
        return float(start), "SLURM_JOB_START_TIME"
    return None, ""
