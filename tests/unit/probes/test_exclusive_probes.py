"""The seams bandwidth tests need: exclusive providers (alone, after the others, one at a
time, under the run's deadline), a timed-out command's partial output as evidence, a
hang as evidence for checks that declare it, env/cwd for the local runner, and
registries a test owns.

Every throw-away check and provider here lives in a Registry the test owns: nothing is
registered process-wide. Times are only compared with each other, never with a number.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from healthcheck.core.catalogue import FindingSpec
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.facts import (
    PARTIAL_OUTPUT_BYTES,
    ProbeContext,
    ProbeError,
    ProbeKind,
    current_providers,
    prefetch_commands,
    provider_for,
)
from healthcheck.core.registry import DEFAULT, REGISTRY, Registry, select, using
from healthcheck.core.status import Status
from healthcheck.orchestrate.engine import run_checks
from healthcheck.report.build import make_report, utc_now
from healthcheck.report.jsonio import encode
from healthcheck.runners.base import CommandResult
from healthcheck.runners.local import LocalRunner

CFG = Config(EMBEDDED_DEFAULT)
# Findings built directly, not declared in the process-wide catalogue (they would leak).
BW_SLOW = FindingSpec("bw.E901", "test: bandwidth below the floor", "none")
BW_HUNG = FindingSpec("bw.E902", "test: the bandwidth test hung", "none")
HANGS = ("sh", "-c", "echo started; exec sleep 60")


def ctx() -> ProbeContext:
    return ProbeContext(runner=LocalRunner())


def node():
    return CFG.for_node("gpu017")


def by_check(result) -> dict[str, Any]:
    return {c.name: c for c in result.checks}


def found(result) -> list[tuple[str, Status]]:
    return sorted((f.id, f.status) for f in result.findings)


class Log:
    """Start/end of each provider, in the order they happened."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, float]] = []
        self.lock = threading.Lock()

    def add(self, what: str, fact: str) -> None:
        with self.lock:
            self.events.append((what, fact, time.monotonic()))

    def order(self) -> list[tuple[str, str]]:
        return [(w, f) for w, f, _ in self.events]

    def at(self, what: str, fact: str) -> float:
        return next(t for w, f, t in self.events if (w, f) == (what, fact))


def recording(reg: Registry, log: Log, fact: str, *, exclusive: bool = False, body=None) -> None:
    """Register a throw-away provider of `fact` that logs its start and end around `body`."""

    @reg.provides(fact, "local", exclusive=exclusive)
    def provider(ctx: ProbeContext) -> Any:
        log.add("start", fact)
        try:
            return body(ctx) if body is not None else fact
        finally:
            log.add("end", fact)


def needing(reg: Registry, name: str, facts: tuple[str, ...], *, budget: float = 2.0,
            hang_finding: FindingSpec | None = None) -> None:
    """Register a throw-away check that needs `facts` and passes when it gets them."""
    import inspect

    def passes(**given: Any) -> list:
        return []

    # facts reach a check by keyword: its parameters are its facts' names and limits
    keyword = inspect.Parameter.KEYWORD_ONLY
    passes.__signature__ = inspect.Signature([inspect.Parameter(f, keyword) for f in (*facts, "limits")])
    reg.check(name, tier="deep", needs=facts, findings=(BW_SLOW,), budget_s=budget,
              hang_finding=hang_finding)(passes)


# -- 1. exclusive providers -------------------------------------------------------------

def test_exclusive_providers_run_after_the_concurrent_ones_one_at_a_time():
    reg, log = Registry(), Log()
    both = threading.Barrier(2, timeout=5)  # the concurrent two only pass it together

    def meet(ctx):
        both.wait()
        return "ok"

    recording(reg, log, "nvml_a", body=meet)
    recording(reg, log, "nvml_b", body=meet)
    recording(reg, log, "bw_allreduce", exclusive=True)
    recording(reg, log, "bw_ib_write", exclusive=True)
    needing(reg, "bw.allreduce", ("bw_allreduce", "nvml_a"))
    needing(reg, "bw.ib_write", ("nvml_b", "bw_ib_write"))
    with using(reg):
        result, abandoned = run_checks(node(), reg.select("deep"), ctx())
    assert not abandoned and result.status is Status.PASS
    order = log.order()
    concurrent_ends = [order.index(("end", f)) for f in ("nvml_a", "nvml_b")]
    first_exclusive = min(order.index(("start", f)) for f in ("bw_allreduce", "bw_ib_write"))
    assert max(concurrent_ends) < first_exclusive, order
    # each exclusive provider ends before the next one starts: nothing overlaps it
    tail = order[first_exclusive:]
    assert tail in ([("start", "bw_allreduce"), ("end", "bw_allreduce"), ("start", "bw_ib_write"), ("end", "bw_ib_write")],
                    [("start", "bw_ib_write"), ("end", "bw_ib_write"), ("start", "bw_allreduce"), ("end", "bw_allreduce")])


def test_an_exclusive_provider_gets_at_most_what_is_left_before_the_deadline():
    reg, log = Registry(), Log()
    seen: dict[str, float] = {}

    def slow(ctx):
        threading.Event().wait(0.2)  # the concurrent phase spends part of the run's time
        return 1

    def measure(ctx):
        seen["timeout_s"] = ctx.timeout_s
        return 1

    recording(reg, log, "nvml_a", body=slow)
    recording(reg, log, "bw_allreduce", exclusive=True, body=measure)
    needing(reg, "bw.allreduce", ("nvml_a", "bw_allreduce"), budget=30)
    deadline = time.monotonic() + 5
    with using(reg):
        result, _ = run_checks(node(), reg.select("deep"), ctx(), deadline=deadline)
    assert result.status is Status.PASS
    # the exclusive phase (and its timeout) starts only once the concurrent one has ended: what
    # was left then bounds it, whatever the load between that moment and the provider's start
    assert 0 < seen["timeout_s"] <= deadline - log.at("end", "nvml_a")
    assert seen["timeout_s"] < 30


def test_after_an_abandoned_exclusive_provider_the_next_is_not_started():
    reg, log = Registry(), Log()
    release = threading.Event()
    recording(reg, log, "bw_a", exclusive=True, body=lambda ctx: release.wait(30))  # stuck in-process
    recording(reg, log, "bw_b", exclusive=True)
    needing(reg, "bw.a", ("bw_a",), budget=0.3)
    needing(reg, "bw.b", ("bw_b",), budget=0.3)
    try:
        with using(reg):
            result, abandoned = run_checks(node(), reg.select("deep"), ctx())
    finally:
        release.set()
    assert abandoned
    assert ("start", "bw_b") not in log.order()
    checks = by_check(result)
    assert checks["bw.a"].status is Status.ERROR and checks["bw.b"].status is Status.ERROR
    assert found(result) == [("hc.E002", Status.ERROR), ("hc.E002", Status.ERROR)]
    assert "was not started" in checks["bw.b"].reason and "bw_a" in checks["bw.b"].reason


def test_an_exclusive_provider_is_not_started_past_the_deadline():
    reg, log = Registry(), Log()
    recording(reg, log, "nvml_a", body=lambda ctx: threading.Event().wait(0.4))
    recording(reg, log, "bw_a", exclusive=True)
    needing(reg, "bw.a", ("nvml_a", "bw_a"), budget=5)
    with using(reg):
        result, _ = run_checks(node(), reg.select("deep"), ctx(), deadline=time.monotonic() + 0.2)
    assert ("start", "bw_a") not in log.order()
    assert found(result) == [("hc.E002", Status.ERROR)]
    assert "deadline had passed" in result.findings[0].message


def test_exclusive_providers_are_not_prefetched_in_a_batch():
    reg = Registry()
    reg.provides("shared", "ssh", prefetch=lambda ctx: [("cat", "/proc/meminfo")])(lambda ctx: 1)
    reg.provides("bw", "ssh", prefetch=lambda ctx: [("ib_write_bw",)], exclusive=True)(lambda ctx: 1)
    with using(reg):
        assert prefetch_commands(["shared", "bw"], ProbeContext(runner=LocalRunner(), transport="ssh")) == [
            ("cat", "/proc/meminfo")
        ]


# -- 2. partial output on timeout -------------------------------------------------------

def test_a_timed_out_command_keeps_what_it_printed():
    result = LocalRunner().run(HANGS, timeout_s=0.3)
    assert result.timed_out and result.stdout == "started\n"


def test_partial_output_survives_a_grandchild_that_holds_the_pipes(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    # setsid: the grandchild leaves the process group, survives the kill and keeps stdout open
    argv = ("sh", "-c", f"echo started; setsid sleep 60 & echo $! > {pid_file}; exec sleep 60")
    try:
        result = LocalRunner().run(argv, timeout_s=0.3)
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)  # the one process this test started
    assert result.timed_out and result.stdout.startswith("started")


def test_a_timeout_probe_error_carries_the_partial_output():
    with pytest.raises(ProbeError) as info:
        ProbeContext(runner=LocalRunner(), timeout_s=0.3).run_checked(HANGS)
    err = info.value
    assert err.kind is ProbeKind.TIMEOUT and err.is_hang
    assert "did not finish within 0.3s" in err.message
    assert "--- stdout before it was stopped ---\nstarted\n" in err.evidence


def test_partial_output_is_bounded_to_its_tail():
    argv = ("sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x; echo; echo last-line; exec sleep 60")
    with pytest.raises(ProbeError) as info:
        ProbeContext(runner=LocalRunner(), timeout_s=1.0).run_checked(argv)
    evidence = info.value.evidence
    assert evidence.endswith("last-line\n") and "(last 64 KiB)" in evidence
    assert PARTIAL_OUTPUT_BYTES < len(evidence.encode()) < PARTIAL_OUTPUT_BYTES + 200


def test_partial_output_reaches_the_report_as_hc_e002_evidence():
    reg = Registry()
    reg.provides("bw_sweep", "local", exclusive=True)(lambda ctx: ctx.run_checked(HANGS))
    needing(reg, "bw.sweep", ("bw_sweep",), budget=0.5)
    with using(reg):
        result, abandoned = run_checks(node(), reg.select("deep"), ctx())
    assert not abandoned  # the runner killed the command: nothing stuck
    (f,) = result.findings
    assert (f.id, f.status) == ("hc.E002", Status.ERROR) and "started" in f.evidence
    report = make_report(command="node --local", tier="deep", config_digest="x", config_path="x",
                         started=utc_now(), finished=utc_now(), nodes=[result])
    assert b"--- stdout before it was stopped ---\\nstarted\\n" in encode(report)


# -- 3. a hang as evidence ----------------------------------------------------------------

def test_a_hang_is_fail_under_the_declared_finding_with_the_partial_output():
    reg = Registry()
    reg.provides("bw_sweep", "local", exclusive=True)(lambda ctx: ctx.run_checked(HANGS))
    needing(reg, "bw.sweep", ("bw_sweep",), budget=0.5, hang_finding=BW_HUNG)
    with using(reg):
        result, _ = run_checks(node(), reg.select("deep"), ctx())
    (f,) = result.findings
    assert (f.id, f.status, result.status) == ("bw.E902", Status.FAIL, Status.FAIL)
    assert "started" in f.evidence and "did not finish" in f.message
    assert by_check(result)["bw.sweep"].status is Status.FAIL


def test_a_hang_is_error_by_default():
    reg = Registry()
    reg.provides("bw_sweep", "local")(lambda ctx: ctx.run_checked(HANGS))
    needing(reg, "bw.sweep", ("bw_sweep",), budget=0.5)
    with using(reg):
        result, _ = run_checks(node(), reg.select("deep"), ctx())
    assert found(result) == [("hc.E002", Status.ERROR)] and result.status is Status.ERROR


def test_an_in_process_hang_is_evidence_too_and_is_abandoned():
    reg, release = Registry(), threading.Event()
    reg.provides("bw_sweep", "local", exclusive=True)(lambda ctx: release.wait(30))
    needing(reg, "bw.sweep", ("bw_sweep",), budget=0.3, hang_finding=BW_HUNG)
    try:
        with using(reg):
            result, abandoned = run_checks(node(), reg.select("deep"), ctx())
    finally:
        release.set()
    assert abandoned and found(result) == [("bw.E902", Status.FAIL)]


def test_a_timeout_the_runs_deadline_caused_is_no_evidence():
    reg = Registry()
    reg.provides("bw_sweep", "local", exclusive=True)(lambda ctx: ctx.run_checked(HANGS))
    needing(reg, "bw.sweep", ("bw_sweep",), budget=30, hang_finding=BW_HUNG)
    with using(reg):
        result, _ = run_checks(node(), reg.select("deep"), ctx(), deadline=time.monotonic() + 0.4)
    (f,) = result.findings
    assert (f.id, f.status) == ("hc.E002", Status.ERROR) and "started" in f.evidence


def test_other_probe_errors_stay_error_for_a_check_that_declares_hangs():
    reg = Registry()

    @reg.provides("bw_sweep", "local")
    def fails(ctx):
        raise ProbeError(ProbeKind.FAILED, "nccl-tests: no GPUs", "cuda error")

    needing(reg, "bw.sweep", ("bw_sweep",), budget=0.5, hang_finding=BW_HUNG)
    with using(reg):
        result, _ = run_checks(node(), reg.select("deep"), ctx())
    assert found(result) == [("hc.E003", Status.ERROR)]


def test_the_hang_finding_is_declared_by_the_check():
    reg = Registry()
    needing(reg, "bw.sweep", ("bw_sweep",), hang_finding=BW_HUNG)
    assert reg.checks["bw.sweep"].finding_ids == {"bw.E901", "bw.E902"}


def test_probe_kinds_are_typed_and_still_compare_as_their_names():
    err = ProbeError("timeout", "x")
    assert err.kind is ProbeKind.TIMEOUT and err.kind == "timeout" and str(err.kind) == "timeout"
    assert f"{err.kind}" == "timeout"
    with pytest.raises(ValueError):
        ProbeError("exploded", "x")


# -- 4. env and cwd -----------------------------------------------------------------------

def test_local_runner_env_adds_to_its_environment_and_cwd_is_honoured(tmp_path):
    runner = LocalRunner(env={"PATH": "/usr/bin:/bin", "KEEP": "kept"})
    result = runner.run(("sh", "-c", 'echo "$KEEP $NCCL_DEBUG $(pwd)"'), timeout_s=5,
                        env={"NCCL_DEBUG": "INFO"}, cwd=str(tmp_path))
    assert result.stdout.strip() == f"kept INFO {tmp_path}"
    missing = runner.run(("true",), timeout_s=5, cwd=str(tmp_path / "nope"))
    assert missing.error and "nope" in missing.error and not missing.not_found


def test_run_checked_passes_env_and_cwd_only_when_given(tmp_path):
    class OldRunner:  # a runner that predates env/cwd (as batch.PrefetchingRunner does)
        def run(self, argv: tuple[str, ...], *, timeout_s: float, input: str | None = None) -> CommandResult:
            return CommandResult(tuple(argv), 0, "old\n", "", 0.0)

    assert ProbeContext(runner=OldRunner()).run_checked(("x",)).stdout == "old\n"
    result = ProbeContext(runner=LocalRunner()).run_checked(("sh", "-c", "echo $HC_T; pwd"),
                                                            env={"HC_T": "1"}, cwd=str(tmp_path))
    assert result.stdout.split() == ["1", str(tmp_path)]


# -- 9. registries a test owns ----------------------------------------------------------

def test_a_registry_a_test_owns_leaks_nothing():
    reg = Registry()
    needing(reg, "bw.own", ("bw_own",))
    reg.provides("bw_own", "local")(lambda ctx: 1)
    with using(reg):
        assert [s.name for s in select("deep")] == ["bw.own"]
        assert provider_for("bw_own", "local")(ctx()) == 1
        assert current_providers() is reg.providers
    assert "bw.own" not in REGISTRY and "bw.own" not in {s.name for s in select("deep")}
    assert current_providers() is DEFAULT.providers
    with pytest.raises(ProbeError) as info:
        provider_for("bw_own", "local")
    assert info.value.kind is ProbeKind.MISSING


def test_a_registry_over_the_default_sees_the_real_checks_and_providers():
    reg = Registry(base=DEFAULT)
    reg.provides("bw_own", "local")(lambda ctx: 1)
    with using(reg):
        names = {s.name for s in select("quick")}
        assert "net.mtu" in names and provider_for("meminfo", "local") is not None
        assert provider_for("bw_own", "local")(ctx()) == 1
    assert "bw_own" not in {fact for fact, _ in DEFAULT.providers.by_key}


def test_using_restores_the_previous_registry_after_an_error():
    reg = Registry()
    with pytest.raises(RuntimeError):
        with using(reg):
            raise RuntimeError("boom")
    assert current_providers() is DEFAULT.providers and select("quick")


def test_fact_name_collision_inside_a_registry_is_refused():
    reg = Registry()
    reg.provides("x", "local")(lambda ctx: 1)
    with pytest.raises(ValueError, match="two providers"):
        reg.provides("x", "local")(lambda ctx: 2)
