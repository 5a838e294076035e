"""pytest plugin (tests/conftest.py loads it): the suite in pytest-xdist workers, the tests
that use the rig in two of them, each on its own rig.

pyproject's addopts say `-n auto --dist loadgroup`. The rig (tests/rig: network namespaces,
sshd, Slurm, the sandbox) holds state its tests change (MTUs, Slurm's config and nodes,
sshd), so the tests on one rig run one at a time in one worker. There are two rigs, made
from the same scripts under other names (tests/rigfixtures.py): the torch-free rig tests
(RIG_WAITS: Slurm's contract and hooks, SSH, MTUs, quick sweeps over SSH, the pair tools'
stand-ins, which mostly wait on Slurm, sshd and deadlines) in group `rig-waits` on the
second; the torch-heavy ones (deep sweeps, live diagnosis, hung jobs) in group `rig` on the
first. The other tests spread over the other workers, one test at a time, except that the
tests sharing a module-scoped fixture (a pipx install, a sweep's history) go together, so
it is made once.

Which tests use the rig is decided here, at collection, so nobody has to remember it: those
using a rig fixture (directly or through another fixture), and those marked `rig` or under
tests/integration, unless their module says `USES_RIG = False`. They get the
`xdist_group("rig")` (or `"rig-waits"`) mark. xdist's own loadgroup reads that mark by
renaming the test's node id, which pytest 9 no longer lets it do, so the scheduler below
groups them instead: each worker writes every grouped test's id and group to a file the
controller named, and the controller reads them when it splits the collection into units of
work (after every worker collected). The two rig groups go out first, one to a worker.

Why two rig groups and how they were split (issue 21): the rig's one worker was CI's long
pole (its tests ran ~14 minutes in series; the other workers were done minutes earlier).
The torch-free tests mostly wait, so beside the torch group they cost it little CPU; the
torch tests stay together in one group, one torch job at a time, since the diagnose and
hung-worker tests bound a wall time that more torch processes on the same cores stretch. A
test that counts processes counts its own rig's (by network namespace), not the machine's.
The sandbox's fresh-clone test is in neither group: its sandbox is a rig of its own, hc in
the clone's own .venv (no torch, a standard-tier sweep: no `hc bw serve`), and most of its
time is pip filling that .venv, work the other workers' tests already do beside the rig.

`-n auto` starts no workers for a run of a few files (a developer's `pytest tests/unit/x.py`
starts in a second, not after workers collected the whole suite), else one per CPU plus one
for the second rig group (the first shares the CPUs' count: a fourth process on two cores
starved the timing tests). PYTEST_XDIST_AUTO_NUM_WORKERS=N sets N. In one
process (`-n 0`) both groups use the first rig, one after the other.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

RIG_GROUP = "rig"  # the torch-heavy rig tests, on the first rig
RIG_WAITS_GROUP = "rig-waits"  # the torch-free ones (RIG_WAITS), on the second, beside it
RIG_GROUPS = (RIG_GROUP, RIG_WAITS_GROUP)
RIG_FIXTURES = frozenset({"netns_rig", "slurm_rig", "fresh_netns_rig", "fresh_slurm_rig"})
INTEGRATION = Path(__file__).resolve().parent / "integration"
# below this many test files a run stays in one process: each worker collects the whole run
# (~10 s for the suite on two cores) before the first test starts
XDIST_MIN_FILES = 8
# rig test files whose tests mostly wait (on Slurm, sshd, deadlines) and start no torch: they
# run in their own group on the second rig, beside the torch-heavy ones (deep sweeps, hung
# jobs, live diagnosis) on the first. test_remote_rig (quick-tier sweeps over SSH),
# test_pair_tools_rig (nccl-tests and ib_write_bw stand-ins, Python scripts) and
# test_ssh_certs_proxy_rig (`hc node` over SSH with host certificates and a ProxyCommand) and
# test_over_time_rig (healthcheck.sh runs in node2, `hc node` over SSH) start no torch either. In one process (-n 0) they run first, while nothing else takes the CPUs
RIG_WAITS = frozenset({"test_slurm_contract.py", "test_slurm_hooks.py", "test_ssh_runner_rig.py",
                       "test_rig_selftest.py", "test_netns_mtu.py", "test_remote_rig.py",
                       "test_pair_tools_rig.py", "test_ssh_certs_proxy_rig.py", "test_over_time_rig.py"})
_IDS_KEY = "hc_groups"  # in a worker's workerinput: the file to write the tests' groups to


def uses_rig(item: pytest.Item) -> bool:
    """Using a rig fixture, marked `rig`, or anywhere in tests/integration: a test there is
    taken to touch the rig's hosts or Slurm unless its module says otherwise (`USES_RIG =
    False`: the browser, pipx and node_exporter tests, and the sandbox's fresh-clone test,
    which is marked `rig` for what it needs, root and Slurm, but makes a rig of its own)."""
    if RIG_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    own = getattr(getattr(item, "module", None), "USES_RIG", None)
    if own is not None:
        return bool(own)
    return item.get_closest_marker("rig") is not None or INTEGRATION in item.path.parents


def rig_group(item: pytest.Item) -> str:
    """The rig group of a test that uses the rig: by its file (RIG_WAITS or not)."""
    return RIG_WAITS_GROUP if item.path.name in RIG_WAITS else RIG_GROUP


def shared_fixture_group(item: pytest.Item) -> str | None:
    """The module's own group where the test uses a module- (class-, package-) scoped fixture:
    its tests in one worker set the fixture up once (a pipx install, a sweep's history)."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        if defs and defs[-1].scope in ("module", "class", "package"):
            return item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the same order in every worker (xdist checks): a stable sort, files kept whole
    items.sort(key=lambda item: item.path.name not in RIG_WAITS)
    groups: dict[str, str] = {}
    for item in items:
        group = rig_group(item) if uses_rig(item) else shared_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            groups[item.nodeid] = group
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput and _IDS_KEY in workerinput:
        path = Path(f"{workerinput[_IDS_KEY]}.{workerinput['workerid']}")
        partial = Path(f"{path}.tmp")
        partial.write_text("".join(f"{group}\t{nodeid}\n" for nodeid, group in groups.items()))
        partial.replace(path)  # whole or not at all


@pytest.hookimpl(optionalhook=True)  # xdist's hooks: no error where it is not installed
def pytest_configure_node(node: Any) -> None:
    """The controller, before it starts a worker: where the worker writes the tests' groups."""
    config = node.config
    if not hasattr(config, "hc_groups_dir"):
        config.hc_groups_dir = tempfile.mkdtemp(prefix="hc-xdist-")
    node.workerinput[_IDS_KEY] = os.path.join(config.hc_groups_dir, "groups")


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "hc_groups_dir"):
        shutil.rmtree(config.hc_groups_dir, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class RigGroupScheduling(LoadGroupScheduling):
        """loadgroup, with each group one unit of work, read from the workers' files."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                folder = Path(getattr(config, "hc_groups_dir", "/nonexistent"))
                lines = [line.split("\t", 1) for f in folder.glob("groups.*") if f.suffix != ".tmp"
                         for line in f.read_text().splitlines()]
                self.groups = {nodeid: group for group, nodeid in lines}
            return self.groups.get(nodeid) or super()._split_scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            # the rig groups before any other unit, whatever their size (xdist hands out the
            # largest first), so each starts at once in a worker of its own
            for group in reversed(RIG_GROUPS):
                if group in self.workqueue:
                    self.workqueue.move_to_end(group, last=False)
            super()._assign_work_unit(node)

    return RigGroupScheduling(config, log)


class WorkerTimes:
    """Each xdist worker's busy seconds (its tests' setup, call and teardown) and tests, for
    the line CI prints at the end: which worker was the long pole, and how far the others
    were behind it (the rig groups' workers run their group first)."""

    def __init__(self) -> None:
        self.busy: dict[str, float] = {}
        self.tests: dict[str, int] = {}
        self.groups: dict[str, set[str]] = {}

    @pytest.hookimpl(optionalhook=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)
        if worker is None:
            return
        self.busy[worker] = self.busy.get(worker, 0.0) + report.duration
        if report.when == "call":
            self.tests[worker] = self.tests.get(worker, 0) + 1
        if "/integration/" in report.nodeid or report.nodeid.startswith("tests/integration/"):
            self.groups.setdefault(worker, set()).add(report.nodeid.split("::", 1)[0].rsplit("/", 1)[-1])

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.busy:
            return
        terminalreporter.write_sep("=", "busy seconds per worker")
        for worker in sorted(self.busy):
            files = len(self.groups.get(worker, ()))
            terminalreporter.write_line(f"{worker}: {self.busy[worker]:7.1f} s busy, {self.tests.get(worker, 0)} tests,"
                                        f" {files} integration files")


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller: it receives every worker's reports
        config.pluginmanager.register(WorkerTimes(), "hc-worker-times")


def _test_files(args: list[str]) -> int:
    """How many test files the command line names (a directory: the test files under it)."""
    count = 0
    for arg in args:
        path = Path(arg.split("::", 1)[0])
        if path.is_dir():
            count += sum(1 for _ in path.rglob("test_*.py"))
        elif path.exists():
            count += 1
    return count


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: none for a few files, else one per CPU and one for each rig group but the
    first: four processes on CI's two cores starved the torch jobs whose timing tests assert
    (a straggler's delay, a parser's cost per line), and the torch-free group's worker takes
    unit tests once its ~400 s of waiting is done."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    if _test_files(config.args) < XDIST_MIN_FILES:
        return 0
    return len(os.sched_getaffinity(0)) + len(RIG_GROUPS) - 1
