"""The engine: facts gathered under budgets, ERROR (never FAIL) when a check cannot run,
findings stamped with subject, hint, limit source and a stable fingerprint."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support import make_fake_sysfs_ib, write_stub

from healthcheck.core.catalogue import FindingSpec
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.facts import ProbeContext, ProbeError
from healthcheck.core.registry import DEFAULT, CheckSpec, Registry, select, using
from healthcheck.core.status import Status
from healthcheck.orchestrate.engine import run_checks
from healthcheck.runners.local import LocalRunner

CFG = Config(EMBEDDED_DEFAULT)


def ctx_with(tmp_path: Path, path_dirs: list[Path] | None = None, root: Path | None = None) -> ProbeContext:
    env = {"PATH": ":".join(str(d) for d in (path_dirs or [])) or "/usr/sbin:/usr/bin:/sbin:/bin"}
    return ProbeContext(runner=LocalRunner(env=env), root=root or tmp_path)


def node(fabric: str = "h100-ndr400", name: str = "gpu017"):
    nc = CFG.for_node(name)
    if fabric != nc.fabric_name:
        data, prov = CFG.fabric_raw(fabric)
        from healthcheck.core.config.loader import NodeConfig, _convert
        from healthcheck.core.config.schema import Fabric

        nc = NodeConfig(node=name, fabric_name=fabric, limits=_convert(data, Fabric, prov, None), provenance=prov)
    return nc


def by_check(result):
    return {c.name: c for c in result.checks}


def test_fake_sysfs_h100_node_with_one_port_down_and_rate_low(tmp_path):
    specs = [f"mlx5_{i}" for i in range(8)]
    specs[2] = "mlx5_2:Down:Polling:40"
    specs[5] = "mlx5_5:Active:LinkUp:200"
    make_fake_sysfs_ib(tmp_path, specs, counters={"mlx5_1/1": {"symbol_error": 2000}})
    result, abandoned = run_checks(node(), select("quick", ["ib"]), ctx_with(tmp_path))
    assert not abandoned
    assert by_check(result)["ib.port_state"].status is Status.FAIL
    got = sorted((f.id, f.subject) for f in result.findings)
    assert got == [
        ("ib.E002", "gpu017:mlx5_2/1"),
        ("ib.E004", "gpu017:mlx5_5/1"),
        ("ib.E005", "gpu017:mlx5_1/1:symbol_error"),
    ]
    rate = next(f for f in result.findings if f.id == "ib.E004")
    assert rate.limit.source.endswith("configs/fabrics/h100-ndr400.yaml:" + _line("h100-ndr400", "rate_gbps"))
    assert rate.hint and rate.suggested_action == "replace-cable" and len(rate.fingerprint) == 16
    counter = next(f for f in result.findings if f.id == "ib.E005")
    assert counter.limit.source.endswith("configs/fabrics/generic.yaml:" + _line("generic", "symbol_error", 2))
    assert result.status is Status.FAIL


def _line(fabric, key, nth=1):
    lines = (EMBEDDED_DEFAULT.parent / "fabrics" / f"{fabric}.yaml").read_text().splitlines()
    hits = [i for i, line in enumerate(lines, 1) if line.strip().startswith(key + ":")]
    return str(hits[nth - 1])


def test_ports_are_discovered_not_assumed(tmp_path):
    make_fake_sysfs_ib(tmp_path, ["mlx5_0:Active:LinkUp:400:InfiniBand:MT4129:2"])
    (tmp_path / "sys/class/infiniband/mlx5_0/ports/2/state").write_text("1: DOWN\n")
    result, _ = run_checks(node("generic"), select("quick", ["ib.port_state"]), ctx_with(tmp_path))
    assert [(f.id, f.component) for f in result.findings] == [("ib.E002", "mlx5_0/2")]


def test_no_sysfs_infiniband_on_an_ib_fabric_is_fail_not_error(tmp_path):
    result, _ = run_checks(node(), select("quick", ["ib.port_state"]), ctx_with(tmp_path))
    assert [(f.id, f.status) for f in result.findings] == [("ib.E001", Status.FAIL)]


def test_fingerprint_is_stable_across_runs(tmp_path):
    make_fake_sysfs_ib(tmp_path, ["mlx5_0:Down:Polling"])
    fps = [run_checks(node(), select("quick", ["ib.port_state"]), ctx_with(tmp_path))[0].findings for _ in range(2)]
    assert [f.fingerprint for f in fps[0]] == [f.fingerprint for f in fps[1]]
    other = run_checks(node(name="gpu018"), select("quick", ["ib.port_state"]), ctx_with(tmp_path))[0].findings
    assert {f.fingerprint for f in other}.isdisjoint({f.fingerprint for f in fps[0]})


def test_missing_tool_is_error_with_reason(tmp_path):
    result, _ = run_checks(node(), select("quick", ["net.mtu"]), ctx_with(tmp_path, [tmp_path / "empty"]))
    (f,) = result.findings
    assert (f.id, f.status, result.status) == ("hc.E001", Status.ERROR, Status.ERROR)
    assert "ip not found" in f.message


def test_hung_tool_is_killed_with_its_children_and_reported_within_budget(tmp_path):
    bin_dir = tmp_path / "bin"
    pid_file = tmp_path / "child.pid"
    # the stand-in starts a child that would outlive it if only the parent were killed
    write_stub(bin_dir, "ip", f"sleep 30 &\necho $! > {pid_file}\nsleep 30\n")
    start = time.monotonic()
    result, _ = run_checks(node(), select("quick", ["net.mtu"]), ctx_with(tmp_path, [bin_dir, Path("/usr/bin"), Path("/bin")]))
    elapsed = time.monotonic() - start
    (f,) = result.findings
    assert (f.id, f.status) == ("hc.E002", Status.ERROR)
    assert elapsed < 2.0 + 1.5  # net.mtu's budget plus grace
    assert by_check(result)["net.mtu"].status is Status.ERROR
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 2
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the tool's child survived the timeout"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_tool_error_exit_is_error_with_evidence(tmp_path):
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "ip", 'echo "RTNETLINK answers: Operation not permitted" >&2\nexit 2\n')
    result, _ = run_checks(node(), select("quick", ["net.mtu"]), ctx_with(tmp_path, [bin_dir]))
    (f,) = result.findings
    assert (f.id, f.status) == ("hc.E003", Status.ERROR)
    assert "exited 2: RTNETLINK answers" in f.message and "Operation not permitted" in f.evidence


def test_unparsable_output_is_error(tmp_path):
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "ip", "printf 'Segmentation fault\\n'\n")
    result, _ = run_checks(node(), select("quick", ["net.mtu"]), ctx_with(tmp_path, [bin_dir]))
    assert [(f.id, f.status) for f in result.findings] == [("hc.E004", Status.ERROR)]


def test_binary_output_is_error_not_crash(tmp_path):
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "ip", "head -c 2000 /dev/urandom\n")
    result, _ = run_checks(node(), select("quick", ["net.mtu"]), ctx_with(tmp_path, [bin_dir]))
    assert [f.status for f in result.findings] == [Status.ERROR]


# A provider that hangs in-process (as NVML or statvfs can) and checks that misbehave,
# registered in a registry this module owns (over the real one), so nothing leaks.
REG = Registry(base=DEFAULT)


@pytest.fixture(autouse=True)
def _own_registry():
    with using(REG):
        yield


@REG.provides("test_hang", "local")
def _hang(ctx):
    time.sleep(30)


@REG.provides("test_value", "local")
def _value(ctx):
    return 42


@REG.provides("test_probe_error", "local")
def _probe_error(ctx):
    raise ProbeError("failed", "no luck", "stderr text")


# built, not declared: catalogue.finding() would add it to the process's CATALOGUE, which
# every xdist worker imports this module into, and an in-process `hc checks list` would list it
_SPEC_X = FindingSpec("test.E001", "test finding", "no hint")


def spec(name, needs, fn, budget=0.5, findings=(_SPEC_X,)):
    return CheckSpec(name=name, fn=fn, tiers=frozenset({"quick"}), needs=tuple(needs), findings=findings, budget_s=budget)


def test_in_process_hang_is_abandoned_within_budget(tmp_path):
    start = time.monotonic()
    result, abandoned = run_checks(node(), [spec("test.hang", ["test_hang"], lambda test_hang, limits: [])],
                                   ctx_with(tmp_path))
    assert abandoned and time.monotonic() - start < 1.5
    assert [(f.id, f.status) for f in result.findings] == [("hc.E002", Status.ERROR)]


def test_deadline_caps_every_budget(tmp_path):
    start = time.monotonic()
    result, abandoned = run_checks(
        node(), [spec("test.hang", ["test_hang"], lambda test_hang, limits: [], budget=20)], ctx_with(tmp_path),
        deadline=time.monotonic() + 0.3,
    )
    assert abandoned and time.monotonic() - start < 1.2


@REG.provides("test_slow", "local")
def _slow(ctx):
    time.sleep(0.4)
    return 1


def test_each_check_gets_its_own_time_not_the_whole_gathering(tmp_path):
    """A check's duration_s is the gathering of its own facts (side by side with the others'),
    not the run's: a check of a fast fact is not charged for a slow one (issue 21, 7)."""
    result, _ = run_checks(node(), [spec("test.slow", ["test_slow"], lambda test_slow, limits: [], budget=5),
                                    spec("test.fast", ["test_value"], lambda test_value, limits: [], budget=5)],
                           ctx_with(tmp_path))
    took = by_check(result)
    assert took["test.fast"].duration_s < took["test.slow"].duration_s / 4  # both were the 0.4 s of the slowest


def test_check_that_raises_is_error_hc_e005(tmp_path):
    def boom(test_value, limits):
        raise KeyError("oops")

    result, _ = run_checks(node(), [spec("test.boom", ["test_value"], boom)], ctx_with(tmp_path))
    (f,) = result.findings
    assert (f.id, f.status) == ("hc.E005", Status.ERROR) and "KeyError" in f.message and "Traceback" in f.evidence


def test_undeclared_finding_id_is_an_error(tmp_path):
    from healthcheck.checks.net import MTU_MISMATCH

    result, _ = run_checks(
        node(), [spec("test.undeclared", ["test_value"], lambda test_value, limits: [MTU_MISMATCH.fail("x")])],
        ctx_with(tmp_path),
    )
    assert [(f.id, f.status) for f in result.findings] == [("hc.E005", Status.ERROR)]


def test_probe_error_carries_evidence_and_never_fails(tmp_path):
    result, _ = run_checks(node(), [spec("test.err", ["test_probe_error"], lambda test_probe_error, limits: [])],
                           ctx_with(tmp_path))
    (f,) = result.findings
    assert (f.id, f.status, f.evidence) == ("hc.E003", Status.ERROR, "stderr text")
    assert result.status is Status.ERROR


def test_fail_outranks_error_on_a_node(tmp_path):
    checks = [
        spec("test.fail", ["test_value"], lambda test_value, limits: [_SPEC_X.fail("bad")]),
        spec("test.err", ["test_probe_error"], lambda test_probe_error, limits: []),
    ]
    result, _ = run_checks(node(), checks, ctx_with(tmp_path))
    assert result.status is Status.FAIL
    assert sorted(f.status.value for f in result.findings) == ["ERROR", "FAIL"]


def test_checks_that_do_not_apply_skip_without_gathering(tmp_path):
    def must_not_run(*a):
        raise AssertionError("gathered facts for a check that does not apply")

    s = CheckSpec(name="test.skip", fn=must_not_run, tiers=frozenset({"quick"}), needs=("test_hang",),
                  findings=(), budget_s=5, applies=lambda limits: "not configured")
    start = time.monotonic()
    result, abandoned = run_checks(node(), [s], ctx_with(tmp_path))
    assert not abandoned and time.monotonic() - start < 0.5
    assert (result.checks[0].status, result.checks[0].reason) == (Status.SKIP, "not configured")


def test_select_by_family_and_name_and_unknown():
    from healthcheck.core.errors import UsageError

    assert {s.name for s in select("quick", ["ib"])} == {"ib.port_state", "ib.counters"}
    assert [s.name for s in select("quick", ["net.mtu"])] == ["net.mtu"]
    with pytest.raises(UsageError, match="unknown check or family: nope"):
        select("quick", ["nope"])


def test_tiers_are_cumulative():
    quick = {s.name for s in select("quick")}
    standard = {s.name for s in select("standard")}
    deep = {s.name for s in select("deep")}
    assert quick <= standard <= deep and quick
