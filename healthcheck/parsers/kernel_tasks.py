"""What the kernel says of a process beside the GPU driver's lines: a task the hung-task
detector saw blocked, and a process that crashed on a segfault.

Real lines (tests/fixtures/corpus/xid-dmesg/libnccl-segfault.txt; the hung tasks quoted
in gpud's scan, tests/fixtures/field/repos/xid/xid119-gsp-rpc-timeout-quoted-in-gpud-scan-output.txt):

    pt_main_thread[2536443]: segfault at 7f797fe00000 ip 00007f7c7ac69996 sp 00007f7c12fd7c30 error 4
        in libnccl.so.2[7f7c7ac00000+d3d3000]                                      (one line)
    INFO: task nvidia-smi:3228970 blocked for more than 120 seconds.

A GPU process blocked in the kernel for minutes (nvidia-smi, the job's python) is how a
wedged driver shows outside its own lines; a segfault names the library a rank died in,
what hc's dead-rank hint tells an operator to look for. Facts beside the Xids, as the AER
events are: no check judges them here.

Linear: each pattern is tried once per line after a plain-text guard, every repeat bounded.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.lazyre import lazy_compile
from healthcheck.parsers.kernlog import Stamp

TASKS_MAX = 1000  # hung tasks and segfaults kept each (a flood repeats itself)
HUNG_MARKER = " blocked for more than "
SEGFAULT_MARKER = ": segfault at "
# the process name is the kernel's comm (at most 16 bytes; a hung task's may hold blanks, a
# segfault's is read only without: its line has no other mark where the name starts)
_HUNG = lazy_compile(r"INFO: task (?P<process>[^\n]{1,16}?):(?P<pid>\d{1,10}) blocked for more than "
                   r"(?P<seconds>\d{1,10}) seconds", re.ASCII)
_SEGFAULT = lazy_compile(r"(?<!\S)(?P<process>[^\s\[\]]{1,16})\[(?P<pid>\d{1,10})\]: segfault at "
                       r"(?P<address>[0-9a-fA-F]{1,16}) ip [0-9a-fA-F]{1,16} sp [0-9a-fA-F]{1,16} "
                       r"error (?P<error>\d{1,4})(?: in (?P<library>[^\s\[]{1,128}))?", re.ASCII)


class HungTask(msgspec.Struct, frozen=True, omit_defaults=True):
    """`INFO: task nvidia-smi:3228970 blocked for more than 120 seconds.`"""

    process: str
    pid: int
    seconds: int  # blocked for more than this
    line: str
    time: float | None = None
    uptime_s: float | None = None


class Segfault(msgspec.Struct, frozen=True, omit_defaults=True):
    """`pt_main_thread[2536443]: segfault at 7f79.. ip .. sp .. error 4 in libnccl.so.2[..]`."""

    process: str
    pid: int
    address: str  # the faulting address, hex as printed
    error: int  # the page fault's error code (4: a user-mode read of an unmapped page)
    line: str
    library: str | None = None  # the object the instruction pointer was in: "libnccl.so.2"
    time: float | None = None
    uptime_s: float | None = None


class TaskReader:
    """Reads hung-task and segfault lines one by one (`read`); keeps them in log order."""

    def __init__(self) -> None:
        self.hung: list[HungTask] = []
        self.segfaults: list[Segfault] = []

    def read(self, body: str, line: str, stamp: Stamp) -> str | None:
        """What the line was ("hung-task", "segfault"), None when neither."""
        if HUNG_MARKER in body:
            m = _HUNG.search(body)
            if m is not None:
                if len(self.hung) < TASKS_MAX:
                    self.hung.append(HungTask(process=m.group("process"), pid=int(m.group("pid")),
                                              seconds=int(m.group("seconds")), line=line, time=stamp.time,
                                              uptime_s=stamp.uptime_s))
                return "hung-task"
        if SEGFAULT_MARKER in body:
            return self._segfault(body, line, stamp)
        return None

    def _segfault(self, body: str, line: str, stamp: Stamp) -> str | None:
        m = _SEGFAULT.search(body)
        if m is None:
            return None
        if len(self.segfaults) < TASKS_MAX:
            self.segfaults.append(Segfault(process=m.group("process"), pid=int(m.group("pid")),
                                           address=m.group("address"), error=int(m.group("error")), line=line,
                                           library=m.group("library"), time=stamp.time, uptime_s=stamp.uptime_s))
        return "segfault"
