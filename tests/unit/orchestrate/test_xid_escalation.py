"""Xid escalation across reboots, replayed from real captures.

Scenario (labelled as such): the real Xid 79 capture tests/fixtures/corpus/xid-dmesg/
xid79-with-nvswitch-sxid-20034.txt is read by gpu.xid as the kernel log of one node in
successive boots; only the boot id (/proc/sys/kernel/random/boot_id) differs between
them, and the clean log of a healthy boot is a real kernel line. The history is a real
SQLite history in tmp_path.
"""

from __future__ import annotations

import datetime as dt

import msgspec
from support import CORPUS, FIXTURES

from healthcheck.actions.policy import decide
from healthcheck.actions.slurm import SlurmNode
from healthcheck.checks import gpu as g
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.config.schema import DrainPolicy
from healthcheck.core.model import CheckResult, Finding, Metric, NodeResult
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status, worst
from healthcheck.orchestrate.escalate import escalate, escalated_report
from healthcheck.orchestrate.multirun import _escalated
from healthcheck.parsers.xid import parse_kernel_log
from healthcheck.report.build import make_report
from healthcheck.report.history import History
from healthcheck.report.recurrence import ALL_GPUS, GpuReset, Repair

H100 = Config(EMBEDDED_DEFAULT).fabric("h100-ndr400")
XID79 = (CORPUS / "xid-dmesg" / "xid79-with-nvswitch-sxid-20034.txt").read_text()
CLEAN = "[    0.000000] Linux version 6.1.0-18-amd64\n"
POLICY = DrainPolicy(max_drain_fraction=0.3)
T0 = dt.datetime(2026, 11, 20, tzinfo=dt.timezone.utc)


def node_in_boot(boot: str | None, text: str = XID79) -> NodeResult:
    log = msgspec.structs.replace(parse_kernel_log(text), source="dmesg", source_lines=len(text.splitlines()),
                                  boot_id=boot)
    out = list(g.xid(kernel_gpu_log=log, gpus=None, limits=H100))
    findings = [stamp(f, check="gpu.xid", node="gpu017") for f in out if isinstance(f, Finding)]
    metrics = [m for m in out if isinstance(m, Metric)]
    status = worst([Status.PASS, *(f.status for f in findings)])
    return NodeResult(node="gpu017", fabric="h100-ndr400", status=status, findings=findings, metrics=metrics,
                      checks=[CheckResult("gpu.xid", status, 0.1)])


def run(history: History, boot: str | None, hour: int, text: str = XID79) -> NodeResult:
    """One `hc node` run of the node in `boot`: escalated from the history, then recorded."""
    notes: list[str] = []
    (node,) = escalate([node_in_boot(boot, text)], history.xid_boots, notes, history.gpu_resets)
    at = T0 + dt.timedelta(hours=hour)
    history.record(make_report(command="node", tier="quick", config_digest="d", config_path="c", started=at,
                               finished=at, nodes=[node]))
    return node


def recurring(node: NodeResult) -> list[Finding]:
    return [f for f in node.findings if f.id == "gpu.E025"]


def boot(n: int) -> str:
    return f"{n:08x}-706b-4a39-af73-980b0a22eb84"


def test_two_recurrences_after_reboots_escalate_to_hardware_inspection(tmp_path) -> None:
    with History(tmp_path / "h.db") as history:
        assert not recurring(run(history, boot(1), 0))
        assert not recurring(run(history, boot(1), 1))  # the same boot's log again: no recurrence
        assert not recurring(run(history, boot(2), 2))  # one recurrence after a reboot: not yet
        third = run(history, boot(3), 3)
    (f,) = recurring(third)
    assert f.status is Status.FAIL and f.suggested_action == "rma" and f.value == 2
    assert "3 boots" in f.message and "hardware inspection" in f.message and "reboot the node" in f.message
    assert third.status is Status.FAIL and f.check == "gpu.xid" and f.node == "gpu017"


def test_a_clean_boot_between_does_not_count_and_a_repair_restarts_the_count(tmp_path) -> None:
    with History(tmp_path / "h.db") as history:
        run(history, boot(1), 0)
        run(history, boot(2), 1, CLEAN)
        assert not recurring(run(history, boot(3), 2))
        history.record_repair(Repair("gpu017", "2026-11-20T02:30:00.000Z", "reseated GPU 0000:91:00.0", "ops"))
        assert not recurring(run(history, boot(4), 3))
        assert not recurring(run(history, boot(5), 4))  # one recurrence since the repair
        assert recurring(run(history, boot(6), 5))


def test_no_boot_id_counts_nothing_and_says_so(tmp_path) -> None:
    with History(tmp_path / "h.db") as history:
        for hour in range(3):  # three runs whose boot id was not read: none is a boot of its own
            run(history, None, hour)
        notes: list[str] = []
        (node,) = escalate([node_in_boot(None)], history.xid_boots, notes)
        assert not recurring(node) and notes and "boot id not read" in notes[0]
        assert not recurring(run(history, boot(1), 4))  # nor were they counted as boots once one is known


def test_an_unreadable_history_escalates_nothing_and_says_why(tmp_path) -> None:
    bad = tmp_path / "h.db"
    bad.write_bytes(b"not a database" * 100)
    notes: list[str] = []
    node = node_in_boot(boot(1))
    (out,) = _escalated([node], History(bad), notes)
    assert out == node and notes and "Xid recurrences not counted" in notes[0]


def test_the_escalation_stays_until_a_repair_then_a_passing_run_resumes(tmp_path) -> None:
    states = {f"n{i}": SlurmNode(f"n{i}", "idle") for i in range(9)}
    with History(tmp_path / "h.db") as history:
        for n in range(3):
            escalated = run(history, boot(n), n)
        plan = decide([escalated], {**states, "gpu017": SlurmNode("gpu017", "idle")}, POLICY, cluster_size=10, resume=True)
        reason = next(iter(plan.drain))
        assert "gpu.E025" in reason and plan.drain[reason] == ["gpu017"]
        drained = {**states, "gpu017": SlurmNode("gpu017", "drained", reason, "2026-11-20T02:10:00")}
        rebooted = {"gpu017": (T0 + dt.timedelta(hours=3, minutes=50)).timestamp()}  # for the repair
        # rebooted, not repaired: the log is clean, the fault is not: still FAILs, stays drained
        clean = run(history, boot(3), 3, CLEAN)
        assert [f.status for f in recurring(clean)] == [Status.FAIL] and "no repair is on record" in \
            recurring(clean)[0].message
        assert {c.name: c.status for c in clean.checks}["gpu.xid"] is Status.FAIL
        assert decide([clean], drained, POLICY, cluster_size=10, resume=True, boot_times=rebooted).resume == []
        history.record_repair(Repair("gpu017", "2026-11-20T03:30:00.000Z", "replaced the GPU", "ops"))
        repaired = run(history, boot(4), 4, CLEAN)
        assert not recurring(repaired) and repaired.status is Status.PASS
        back = decide([repaired], drained, POLICY, cluster_size=10, resume=True, boot_times=rebooted)
        assert back.resume == ["gpu017"], (back.keep, back.stays_drained)


def test_no_escalation_where_gpu_xid_did_not_judge_the_node(tmp_path) -> None:
    with History(tmp_path / "h.db") as history:
        for n in range(3):
            run(history, boot(n), n)
        node = node_in_boot(boot(9), CLEAN)
        errored = msgspec.structs.replace(node, status=Status.ERROR, checks=[CheckResult("gpu.xid", Status.ERROR, 0.1)])
        (out,) = escalate([errored], history.xid_boots, [])
        assert not recurring(out) and out.status is Status.ERROR  # never a FAIL made of an ERROR


def test_a_health_runs_report_is_escalated_from_the_configured_history(tmp_path) -> None:
    at = T0 + dt.timedelta(hours=5)
    report = make_report(command="health", tier="quick", config_digest="d", config_path="c", started=at, finished=at,
                         nodes=[node_in_boot(boot(3), CLEAN)])
    notes: list[str] = []
    assert escalated_report(report, None, notes) == report and not notes  # none kept: as it is
    assert escalated_report(report, History(tmp_path / "h.db"), notes) == report and not notes  # none yet
    assert not (tmp_path / "h.db").exists()  # and escalation did not create it
    with History(tmp_path / "h.db") as history:
        for n in range(3):
            run(history, boot(n), n)
    with History(tmp_path / "h.db") as history:
        out = escalated_report(report, history, notes)
    assert out.status is Status.FAIL and report.status is Status.PASS
    assert out.summary["FAIL"] == 1 and out.summary["PASS"] == 0
    assert any(row["id"] == "gpu.E025" for row in out.findings_summary) and not notes
    (tmp_path / "h.db").write_bytes(b"not a database" * 100)
    assert escalated_report(report, History(tmp_path / "h.db"), notes) == report
    assert "Xid recurrences not counted" in notes[0]


def test_pruned_runs_take_their_xid_rows_with_them(tmp_path) -> None:
    with History(tmp_path / "h.db") as history:
        for n in range(3):
            run(history, boot(n), n)
        assert len(history.xid_boots("gpu017")[("0000:91:00.0", 79)]) == 3
        history.prune(1)
        assert history.xid_boots("gpu017")[("0000:91:00.0", 79)] == [boot(2)]


# A GPU reset without a reboot. Scenario (labelled as such): the real journal capture
# tests/fixtures/kernel-log/journal-short-iso-xid48-63-94.txt (Xid 48, 63, 94 on 0000:19:00 at
# 2024-11-15T12:02:03Z) is the node's log in one boot; after each reset its Xid lines are logged
# again: the same lines with the time moved past the reset.
JOURNAL = (FIXTURES / "kernel-log" / "journal-short-iso-xid48-63-94.txt").read_text()
ONE_BOOT = boot(7)


def logged_again(hour: int) -> str:
    """The capture's lines as the kernel logs them again at `hour`:02:03 that day (after a reset)."""
    again = "".join(line.replace("2024-11-15T12:", f"2024-11-15T{hour:02d}:") + "\n"
                    for line in JOURNAL.splitlines() if "Xid" in line)
    return JOURNAL + again


def reset(history: History, hour: int, gpu: str = ALL_GPUS) -> None:
    history.record_gpu_reset(GpuReset("gpu017", gpu, f"2024-11-15T{hour:02d}:00:00.000Z", "ops"))


def test_an_xid_logged_again_after_two_gpu_resets_escalates_without_a_reboot(tmp_path) -> None:
    with History(tmp_path / "h.db") as history:
        assert not recurring(run(history, ONE_BOOT, 0, JOURNAL))
        reset(history, 13)
        assert not recurring(run(history, ONE_BOOT, 1, logged_again(14)))  # one recurrence after a reset
        reset(history, 15)
        third = run(history, ONE_BOOT, 2, logged_again(16))
        resets = history.gpu_resets("gpu017")
    found = {f.component: f for f in recurring(third)}
    assert set(found) == {f"0000:19:00.0:xid{code}:recurring" for code in (48, 63, 94)}
    f = found["0000:19:00.0:xid48:recurring"]
    assert f.status is Status.FAIL and f.value == 2 and "after the GPU reset of 2024-11-15T15:00:00Z" in f.message
    assert [r.at for r in resets] == ["2024-11-15T13:00:00.000Z", "2024-11-15T15:00:00.000Z"]


def test_a_reset_counts_only_for_an_xid_logged_after_it_and_only_for_its_gpu(tmp_path) -> None:
    with History(tmp_path / "h.db") as history:
        run(history, ONE_BOOT, 0, JOURNAL)
        reset(history, 13)
        assert not recurring(run(history, ONE_BOOT, 1, JOURNAL))  # the log still holds the old lines only
        reset(history, 15)
        assert not recurring(run(history, ONE_BOOT, 2, JOURNAL))
        assert [len(b) for b in history.xid_boots("gpu017").values()] == [1, 1, 1]  # one epoch each: no recurrence
    with History(tmp_path / "other.db") as history:  # resets of another GPU are no boundary for 0000:19:00.0
        run(history, ONE_BOOT, 0, JOURNAL)
        reset(history, 13, "GPU3")
        run(history, ONE_BOOT, 1, logged_again(14))
        reset(history, 15, "GPU3")
        assert not recurring(run(history, ONE_BOOT, 2, logged_again(16)))


def test_an_xid_without_times_is_placed_by_its_boot_only(tmp_path) -> None:
    # the Xid 79 capture has uptime stamps and no boot time here: when it was logged is not known
    with History(tmp_path / "h.db") as history:
        run(history, ONE_BOOT, 0)
        for hour in (1, 2):
            history.record_gpu_reset(GpuReset("gpu017", ALL_GPUS, f"2026-11-20T0{hour}:00:00.000Z", "ops"))
            assert not recurring(run(history, ONE_BOOT, hour))
