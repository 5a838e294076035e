"""Run the node scenarios through hc and score what it said against their truth.

A faulty node is caught when hc gives every (finding ID, status) of its truth; flagged under
another ID or status only, it is a wrong finding; with no WARN or FAIL, missed. A healthy
node with any WARN or FAIL is flagged; with a FAIL it would have been drained. ERROR ("could
not judge") is shown but is neither: it never drains.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .scenarios import Scenario

REPO = Path(__file__).resolve().parents[2]
NCCL_STANDINS = REPO / "tests" / "standins" / "nccl-tests"
NODE_NAME = "gpu017"
FLAGS = ("WARN", "FAIL")
GOAL = "every fault caught, no healthy node drained"
FAMILIES = ("gpu", "ib", "net", "bw")


@dataclass(frozen=True)
class Outcome:
    """What hc said of one scenario: its findings (ID, status, component), or why it could not run."""

    scenario: Scenario
    found: tuple[tuple[str, str, str], ...] = ()
    error: str = ""

    @property
    def flags(self) -> set[tuple[str, str]]:
        return {(i, s) for i, s, _ in self.found if s in FLAGS}

    @property
    def drained(self) -> bool:
        return any(s == "FAIL" for _, s in self.flags)

    @property
    def result(self) -> str:
        """caught | wrong | missed for a faulty node; clean | flagged | DRAINED for a healthy one."""
        if self.error:
            return "not run"
        if self.scenario.healthy:
            return "DRAINED" if self.drained else ("flagged" if self.flags else "clean")
        if set(self.scenario.expect) <= self.flags:
            return "caught"
        return "wrong" if self.flags else "missed"


# ------------------------------------------------------------------ running one


def fabric_text(sc: Scenario, tmp: Path) -> str:
    text = f"extends: {sc.fabric}\n"
    if sc.how == "local":
        text += f"gpu:\n  xid: {{source: file, file: {tmp / 'kern.log'}}}\n"
    if sc.nccl:
        text += (f"bandwidth:\n  sizes: [8G]\n  repeats: 2\n"
                 f"  all_reduce:\n    single_node: {{busbw_min_gbytes_per_s: {{8G: 228}}}}\n"
                 f"    ib_loopback: {{busbw_min_gbytes_per_s: {{8G: 18}}}}\n"
                 f"  nccl_tests:\n    bin_dir: {NCCL_STANDINS}\n    timeout_s: 60\n"
                 f"    env: {{HC_STANDIN_SCENARIO: {sc.nccl}, HC_STANDIN_STATE: {tmp}/state}}\n"
                 f"  torch: {{enabled: false}}\n")
    return text + sc.fabric_extra


def write_config(sc: Scenario, tmp: Path) -> Path:
    (tmp / "kern.log").write_text(sc.kernel_log)
    fabrics = tmp / "fabrics"
    fabrics.mkdir()
    (fabrics / "node.yaml").write_text(fabric_text(sc, tmp))
    # deep checks ask Slurm whether a job runs on the node first: a stand-in sinfo says it is idle
    sinfo = tmp / "sinfo"
    sinfo.write_text(f"#!/bin/sh\necho '{NODE_NAME}|idle|Unknown|none'\n")
    sinfo.chmod(0o755)
    cfg = tmp / "hc.yaml"
    cfg.write_text(f"fabric_dirs: [{fabrics}]\ndefault_fabric: node\nhistory: {{path: null}}\n"
                   f"slurm:\n  state_dir: {tmp}/state\n  audit_log: {tmp}/audit.jsonl\n  report_dir: {tmp}/reports\n"
                   f"  sinfo: {sinfo}\n")
    return cfg


def run_local(sc: Scenario, tmp: Path, cfg: Path) -> Outcome:
    """The real `hc node --local` in a subprocess, its GPUs the scenario's NVML recording."""
    assert sc.nvml is not None, sc.name
    (tmp / "nvml.json").write_text(sc.nvml)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    env.update({"HC_NODE_NAME": NODE_NAME, "HC_NVML_REPLAY": str(tmp / "nvml.json"),
                "HC_CACHE_DIR": str(tmp / "cache")})
    argv = [sys.executable, "-m", "healthcheck", "node", "--local", "--config", str(cfg), "--checks",
            ",".join(sc.checks), "--tier", sc.tier, "--format", "json"]
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    if r.returncode not in (0, 1, 2, 3):
        return Outcome(sc, error=f"hc exited {r.returncode}: {r.stderr.strip()[-300:]}")
    report = json.loads(r.stdout)
    found = [(f["id"], f["status"], f.get("component", "")) for n in report["nodes"] for f in n["findings"]]
    return Outcome(sc, tuple(sorted(set(found))))


def stub(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def agentless_tools(sc: Scenario, tmp: Path) -> Path:
    """A PATH directory whose tools print the scenario's captures (absent tools stay absent)."""
    bin_dir = tmp / "bin"
    caps = tmp / "captures"
    bin_dir.mkdir()
    caps.mkdir()

    def capture(name: str, text: str) -> Path:
        path = caps / name
        path.write_text(text)
        return path

    if sc.smi is not None:
        stub(bin_dir, "nvidia-smi", f"exec /bin/cat {capture('nvidia-smi-q', sc.smi)}\n")
    stub(bin_dir, "dmesg", f"exec /bin/cat {capture('dmesg', sc.kernel_log)}\n")
    stub(bin_dir, "ibstat", f"exec /bin/cat {capture('ibstat', sc.ibstat)}\n" if sc.ibstat is not None else "exit 0\n")
    if sc.ibstat is not None:
        # perfquery -x -C CA -P PORT: the CA's own capture, else the default
        cases = "".join(f"  {ca}) exec /bin/cat {capture(f'perfquery-{ca}', text)};;\n"
                        for ca, text in sc.perfquery.items() if ca != "*")
        default = sc.perfquery.get("*")
        tail = f"  *) exec /bin/cat {capture('perfquery', default)};;\n" if default else "  *) exit 1;;\n"
        stub(bin_dir, "perfquery", f'case "$3" in\n{cases}{tail}esac\n')
    if sc.ip_link is not None:
        stub(bin_dir, "ip", f"exec /bin/cat {capture('ip-link', sc.ip_link)}\n")
    return bin_dir


def run_engine(sc: Scenario, tmp: Path, cfg: Path) -> Outcome:
    """The engine over the scenario's transport: agentless (ssh providers, stand-in tools) or
    deep (local providers, the nccl-tests stand-in, an 8-GPU /proc under a root of its own)."""
    from healthcheck.core.config.loader import load_config
    from healthcheck.core.facts import ProbeContext
    from healthcheck.core.registry import select
    from healthcheck.orchestrate.engine import run_checks
    from healthcheck.runners.local import LocalRunner

    node = load_config(cfg).for_node(NODE_NAME)
    if sc.how == "agentless":
        path = f"{agentless_tools(sc, tmp)}:/usr/bin:/bin"
        ctx = ProbeContext(runner=LocalRunner(env={"PATH": path}), transport="ssh", timeout_s=10)
        result, _ = run_checks(node, select(sc.tier, sc.checks), ctx, mode="agentless", budget_floor=10)
    else:
        root = tmp / "root"
        for i in range(8):
            (root / "proc/driver/nvidia/gpus" / f"0000:{i + 1:02x}:00.0").mkdir(parents=True)
        ctx = ProbeContext(runner=LocalRunner(), root=root, timeout_s=120)
        result, _ = run_checks(node, select(sc.tier, sc.checks), ctx)
    found = {(f.id, f.status.value, f.component) for f in result.findings}
    return Outcome(sc, tuple(sorted(found)))


def run(sc: Scenario) -> Outcome:
    """One scenario through hc, in a temporary directory of its own."""
    with tempfile.TemporaryDirectory(prefix=f"hc-node-{sc.name}-") as name:
        tmp = Path(name)
        cfg = write_config(sc, tmp)
        try:
            return run_local(sc, tmp, cfg) if sc.how == "local" else run_engine(sc, tmp, cfg)
        except Exception as exc:  # a scenario that cannot run says why; the others go on
            return Outcome(sc, error=f"{type(exc).__name__}: {exc}")


# ------------------------------------------------------------------ scoring


@dataclass(frozen=True)
class Tally:
    """One row of the summary: a check family's (or every family's) counts."""

    label: str
    faulty: int = 0
    caught: int = 0
    missed: int = 0
    wrong: int = 0
    healthy: int = 0
    flagged: int = 0
    drained: int = 0
    not_run: int = 0

    @property
    def met(self) -> bool:
        return self.caught == self.faulty and self.drained == 0 and self.not_run == 0

    def row(self) -> list[str]:
        return [self.label, str(self.faulty), str(self.caught), str(self.missed), str(self.wrong), str(self.healthy),
                str(self.flagged), str(self.drained), "met" if self.met else "MISSED"]

    def words(self) -> str:
        text = (f"faulty {self.faulty}: caught {self.caught}, missed {self.missed}, wrong ID {self.wrong}; "
                f"healthy {self.healthy}: flagged {self.flagged}, drained {self.drained}")
        return text + (f"; {self.not_run} not run" if self.not_run else "")


TALLY_HEADERS = ["FAMILY", "FAULTY", "CAUGHT", "MISSED", "WRONG ID", "HEALTHY", "FLAGGED", "DRAINED", "GOAL MET"]
TABLE_HEADERS = ["SCENARIO", "NODE", "HOW", "FAULT", "TRUTH", "HC SAYS", "RESULT"]


def tally(label: str, outcomes: Iterable[Outcome]) -> Tally:
    counts = dict.fromkeys(("faulty", "caught", "missed", "wrong", "healthy", "flagged", "drained", "not_run"), 0)
    for o in outcomes:
        counts["healthy" if o.scenario.healthy else "faulty"] += 1
        result = o.result
        key = {"caught": "caught", "missed": "missed", "wrong": "wrong", "not run": "not_run"}.get(result)
        if key:
            counts[key] += 1
        if result in ("flagged", "DRAINED"):
            counts["flagged"] += 1
        if result == "DRAINED":
            counts["drained"] += 1
    return Tally(label, **counts)


def truth_words(sc: Scenario) -> str:
    if sc.healthy:
        return "healthy"
    return ", ".join(f"{i} {s}" for i, s in sc.expect) + (" (drain)" if sc.drains else " (warn only)")


def says_words(o: Outcome) -> str:
    if o.error:
        return o.error[:120]
    said = sorted({(i, s) for i, s, _ in o.found if s in (*FLAGS, "ERROR")})
    return ", ".join(f"{i} {s}" for i, s in said) or "PASS"


@dataclass(frozen=True)
class Score:
    """The outcomes of a set, and its summary per check family and overall."""

    outcomes: tuple[Outcome, ...]

    def family(self, fam: str) -> Tally:
        return tally(fam, (o for o in self.outcomes if fam in o.scenario.families))

    def overall(self) -> Tally:
        return tally("overall", self.outcomes)

    def tallies(self) -> list[Tally]:
        fams = [f for f in FAMILIES if any(f in o.scenario.families for o in self.outcomes)]
        return [*(self.family(f) for f in fams), self.overall()]

    def table(self) -> list[list[str]]:
        return [[o.scenario.name, o.scenario.kind, o.scenario.how, o.scenario.family, truth_words(o.scenario),
                 says_words(o), o.result] for o in self.outcomes]

    def by_fault(self) -> list[list[str]]:
        """Per fault family: nodes, caught, missed, wrong."""
        rows = []
        for fault in dict.fromkeys(o.scenario.family for o in self.outcomes if not o.scenario.healthy):
            t = tally(fault, (o for o in self.outcomes if o.scenario.family == fault))
            rows.append([fault, o_family(self, fault), str(t.faulty), str(t.caught), str(t.missed),
                         str(t.wrong)])
        return rows


def o_family(score: Score, fault: str) -> str:
    return next(o.scenario.families[0] for o in score.outcomes if o.scenario.family == fault)


FAULT_HEADERS = ["FAULT FAMILY", "CHECKS", "NODES", "CAUGHT", "MISSED", "WRONG ID"]


def score_all(scenarios: Iterable[Scenario], progress: Callable[[Outcome], None] | None = None) -> Score:
    outcomes = []
    for sc in scenarios:
        o = run(sc)
        if progress:
            progress(o)
        outcomes.append(o)
    return Score(tuple(outcomes))


def main() -> int:
    """Run the whole set and print its tables (`python -m node_scenarios.harness` from tests/)."""
    from tabulate import tabulate

    from .scenarios import scenarios

    score = score_all(scenarios(), progress=lambda o: print(f"  {o.scenario.name}: {o.result}", file=sys.stderr))
    print(tabulate([t.row() for t in score.tallies()], headers=TALLY_HEADERS))
    print()
    print(tabulate(score.by_fault(), headers=FAULT_HEADERS))
    print()
    print(tabulate(score.table(), headers=TABLE_HEADERS))
    return 0 if score.overall().met else 1


if __name__ == "__main__":
    sys.exit(main())
