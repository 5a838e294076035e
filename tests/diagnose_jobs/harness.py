"""Run a labelled failing (or healthy) gloo job, ask hc for a diagnosis, score the answer.

A scenario (scenarios.py; the held-out ones in tests/fixtures/diagnose-jobs/held-out*/) is
job.py (or a job script of the set's own, Scenario.script, taking job.py's flags and writing
its markers: held-out-7's to held-out-12's are) with a fault on some ranks, a launcher
(plain processes, torchrun, mpirun, srun-labelled, or the script itself starting its ranks:
`spawn`, mp.spawn or a driver of its own; with or without `hc run`), a world size and a mode:

- live: the job is left hung (collective timeout 120 s); once every rank has reached its
  fault the harness runs `hc diagnose pids PIDS --format json` (the torchrun agent's pid
  for torchrun: it stands for its ranks), then kills the job;
- logs: the job runs with a short collective timeout (6 s) until it ends, or until a few
  seconds past the timeout after its first rank ended (a scheduler killing what is
  left), its output saved per rank (plain: rankN.log) or as the launcher's one combined
  stream (torchrun.log, mpirun.log); then `hc diagnose logs DIR --format json`.

Only what the job itself printed (and `hc run`'s log folder) is in DIR: the harness'
markers and exit codes stay outside, since a diagnosis must not depend on them.

Every process this starts is in a session of its own and is killed by its pid (SIGCONT
first, for a stopped rank) before the scenario returns; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOB = HERE / "job.py"
REPO = HERE.parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "diagnose-jobs"
# the held-out sets, each a folder with scenarios.py (its HELD_OUT table) and saved/; a set
# whose scenarios a rule writer has read is no longer unseen, and a fresh one is added here
HELD_OUT_SETS = ("held-out", "held-out-2", "held-out-3", "held-out-4", "held-out-5", "held-out-6", "held-out-7",
                 "held-out-8", "held-out-9", "held-out-10", "held-out-11", "held-out-12")
SETS = ("tuning", *HELD_OUT_SETS)
# saved outputs of the logs-mode jobs, one folder per scenario (Scenario.slug), replayable
SAVED = {"tuning": FIXTURES / "tuning", **{name: FIXTURES / name / "saved" for name in HELD_OUT_SETS}}

# truth classes: what went wrong, in this suite's own words
CLASSES = ("dead", "stuck", "desync", "shape", "init", "none")

# hc's class -> this suite's (the one table to edit when hc's classes change). A class hc
# does not have yet ("progressing", "straggler") is listed so a new rule is scored at once.
HC_CLASS = {
    "dead-rank": "dead",
    "stuck-rank": "stuck",
    "host-wedged": "stuck",
    "collective-mismatch": "desync",
    "shape-mismatch": "shape",
    "init-failure": "init",
    "unknown": "none",
    "progressing": "none",
    "straggler": "none",
    "healthy": "none",
    "gpu-failure": "gpu",
    "network": "network",
    "socket-fallback": "network",
}

LIVE_TIMEOUT_S = 120.0   # a live job stays hung while it is diagnosed
LOGS_TIMEOUT_S = 6.0     # a saved-output job's collectives time out and print why
START_DEADLINE_S = 90.0  # every rank reaches its fault (torch's import on 2 busy cores)
HC_TIMEOUT_S = 120.0
HC_LIVE_DEADLINE_S = 15  # `hc diagnose pids --timeout`: the live answer's own bound (issue 19)


@dataclass(frozen=True)
class Scenario:
    """One labelled job: `fault` on `culprits` at step `at`; the truth is `truth` (a class of
    CLASSES) and `truth_ranks` (None: the culprits; () for a healthy or merely slow job)."""

    name: str
    fault: str
    world: int
    truth: str
    culprits: tuple[int, ...] = ()
    truth_ranks: tuple[int, ...] | None = None
    launcher: str = "plain"          # plain | torchrun | mpirun | srun (plain processes labelled as srun -l does)
    #                                  | spawn (the script starts its own ranks: mp.spawn, a driver; --nprocs)
    mode: str = "logs"               # live | logs
    hcrun: bool = False              # each rank (plain, mpirun) or the launcher (torchrun) under `hc run`
    hcrun_inside: bool = False       # torchrun: each rank under `hc run` too (torchrun --no-python hc run -- ...)
    labelled: bool = True            # torchrun: --tee 3 ([defaultN]: labels); mpirun: --tag-output
    at: int = 2
    args: tuple[str, ...] = ()       # more job.py arguments (--record, --slow 1.5, --jitter 0.3)
    rank_env: tuple[tuple[int, str, str], ...] = ()  # (rank, NAME, value): one rank's own environment
    port_taken: bool = False         # another process holds MASTER_PORT
    note: str = ""
    script: str = ""                 # the job script, relative to the repository (default: job.py)
    restarts: int = 0                # torchrun: --max-restarts

    @property
    def expected_ranks(self) -> tuple[int, ...]:
        if self.truth_ranks is not None:
            return tuple(sorted(self.truth_ranks))
        return () if self.truth == "none" else tuple(sorted(self.culprits))

    @property
    def slug(self) -> str:
        """The scenario's folder name: its name, lower case, runs of other characters as '-'."""
        import re

        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")

    @property
    def how(self) -> str:
        parts = [self.launcher + ("+hc run" if self.hcrun else "") + ("+hc run inside" if self.hcrun_inside else ""),
                 f"w{self.world}", self.mode]
        if self.launcher != "plain":
            parts.append("labelled" if self.labelled else "unlabelled")
        return " ".join(parts)

    @property
    def truth_text(self) -> str:
        ranks = ",".join(map(str, self.expected_ranks)) or "-"
        return f"{self.truth} [{ranks}]"


@dataclass
class Outcome:
    scenario: Scenario
    hc_class: str = "?"
    hc_ranks: tuple[int, ...] = ()
    seconds: float = float("nan")
    rc: int | None = None
    summary: str = ""
    error: str = ""        # the harness could not run the job or read hc's answer
    attempt: str = ""      # "2/3": the second of three tries of a healthy job looked at live

    @property
    def ours(self) -> str:
        return HC_CLASS.get(self.hc_class, self.hc_class)

    @property
    def rank_right(self) -> bool:
        return not self.error and tuple(sorted(set(self.hc_ranks))) == self.scenario.expected_ranks

    @property
    def class_right(self) -> bool:
        return not self.error and self.ours == self.scenario.truth

    @property
    def right(self) -> bool:
        return self.rank_right and self.class_right

    @property
    def false_culprits(self) -> int:
        return len(set(self.hc_ranks) - set(self.scenario.expected_ranks))

    @property
    def named_on_healthy(self) -> bool:
        return self.scenario.truth == "none" and bool(self.hc_ranks)

    @property
    def answer(self) -> str:
        if self.error:
            return f"error: {self.error}"
        return f"{self.hc_class} [{','.join(map(str, self.hc_ranks)) or '-'}]"


@dataclass
class Score:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.outcomes)

    @property
    def rank_right(self) -> int:
        return sum(o.rank_right for o in self.outcomes)

    @property
    def class_right(self) -> int:
        return sum(o.class_right for o in self.outcomes)

    @property
    def both_right(self) -> int:
        return sum(o.right for o in self.outcomes)

    @property
    def false_culprits(self) -> int:
        return sum(o.false_culprits for o in self.outcomes)

    @property
    def named_on_healthy(self) -> int:
        return sum(o.named_on_healthy for o in self.outcomes)

    @property
    def errors(self) -> int:
        return sum(bool(o.error) for o in self.outcomes)

    @property
    def median_seconds(self) -> float:
        times = [o.seconds for o in self.outcomes if o.seconds == o.seconds]
        return statistics.median(times) if times else float("nan")

    def pct(self, k: int) -> str:
        return f"{100 * k / self.n:.0f}%" if self.n else "-"

    def row(self) -> str:
        return (f"rank right {self.rank_right}/{self.n} ({self.pct(self.rank_right)}), class right "
                f"{self.class_right}/{self.n} ({self.pct(self.class_right)}), both {self.both_right}/{self.n}, "
                f"false culprits {self.false_culprits}, named on healthy {self.named_on_healthy}, "
                f"median {self.median_seconds:.2f} s" + (f", {self.errors} not run" if self.errors else ""))

    def confusion(self) -> list[list[str]]:
        """Per truth class: how many jobs, and what hc answered (its own class names) how often:
        the classes hc cannot tell apart are the off-diagonal counts."""
        from collections import Counter

        rows = []
        for truth in CLASSES:
            answers = Counter(o.hc_class if not o.error else "error" for o in self.outcomes
                              if o.scenario.truth == truth)
            if answers:
                rows.append([truth, str(sum(answers.values())),
                             ", ".join(f"{cls} {k}" for cls, k in answers.most_common())])
        return rows

    def table(self) -> list[list[str]]:
        return [[o.scenario.name + (f" (try {o.attempt})" if o.attempt else ""), o.scenario.how, o.scenario.truth_text, o.answer,
                 "right" if o.right else ("rank" if o.rank_right else "class" if o.class_right else "WRONG"),
                 f"{o.seconds:.2f}"] for o in self.outcomes]


# ------------------------------------------------------------------------------ running


def free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hc_argv() -> list[str]:
    return [sys.executable, "-m", "healthcheck"]


def clean_env() -> dict[str, str]:
    """This process's environment without a launcher's or hc's variables of its own, with the
    venv's bin (py-spy, torchrun) first on PATH."""
    prefixes = ("SLURM_", "OMPI_", "PMIX_", "PMI_", "HC_", "TORCHELASTIC_")
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes) and k not in names}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env.update(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    return env


class Run:
    """One scenario's processes: started in sessions of their own, killed by pid."""

    def __init__(self, sc: Scenario, root: Path) -> None:
        self.sc = sc
        self.out = root / "output"
        self.marks = root / "marks"
        self.out.mkdir()
        self.marks.mkdir()
        self.port = free_port()
        self.procs: list[subprocess.Popen] = []
        self.env = clean_env()
        self.env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.port))

    @property
    def timeout(self) -> float:
        return LIVE_TIMEOUT_S if self.sc.mode == "live" else LOGS_TIMEOUT_S

    def job_argv(self) -> list[str]:
        steps = 400 if self.sc.mode == "live" and self.sc.truth == "none" else 6
        script = REPO / self.sc.script if self.sc.script else JOB
        return [str(script), "--fault", self.sc.fault, "--culprits", ",".join(map(str, self.sc.culprits)),
                "--at", str(self.sc.at), "--steps", str(steps), "--timeout", str(self.timeout),
                "--mark", str(self.marks), *self.sc.args]

    def hcrun_prefix(self) -> list[str]:
        if not self.sc.hcrun:
            return []
        return [*hc_argv(), "run", "--log-dir", str(self.out / "hc-run"), "--no-node-check", "--"]

    def popen(self, argv: list[str], log: Path, env: dict[str, str]) -> None:
        with open(log, "ab") as f:
            self.procs.append(subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               env=env, cwd=self.out, start_new_session=True))

    def start(self) -> None:
        getattr(self, f"start_{self.sc.launcher}")()

    def start_plain(self) -> None:
        for rank in range(self.sc.world):
            env = dict(self.env, RANK=str(rank), WORLD_SIZE=str(self.sc.world), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(self.sc.world))
            env.update({name: value for r, name, value in self.sc.rank_env if r == rank})
            self.popen([*self.hcrun_prefix(), sys.executable, *self.job_argv()], self.out / f"rank{rank}.log", env)

    def start_torchrun(self) -> None:
        torchrun = str(Path(sys.executable).with_name("torchrun"))
        argv = [*self.hcrun_prefix(), torchrun, "--nnodes=1", f"--nproc-per-node={self.sc.world}",
                "--master-addr=127.0.0.1", f"--master-port={self.port}", f"--max-restarts={self.sc.restarts}"]
        if self.sc.labelled:
            argv += ["--tee", "3"]
        if self.sc.hcrun_inside:  # each rank: torchrun starts `hc run -- python job.py`
            argv += ["--no-python", sys.executable, "-m", "healthcheck", "run", "--log-dir",
                     str(self.out / "hc-run"), "--no-node-check", "--", sys.executable]
        self.popen([*argv, *self.job_argv()], self.out / "torchrun.log", self.env)

    def start_srun(self) -> None:
        """Plain processes whose lines go, labelled `R: ` as `srun -l` labels them, into one
        stream (srun.log): srun's console without a Slurm allocation."""
        for rank in range(self.sc.world):
            env = dict(self.env, RANK=str(rank), WORLD_SIZE=str(self.sc.world), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(self.sc.world))
            env.update({name: value for r, name, value in self.sc.rank_env if r == rank})
            job = " ".join(shlex.quote(a) for a in [*self.hcrun_prefix(), sys.executable, *self.job_argv()])
            self.popen(["sh", "-c", f"{job} 2>&1 | sed -u 's/^/{rank}: /'"], self.out / "srun.log", env)

    def start_spawn(self) -> None:
        """One process, the job's script, which starts its --nprocs ranks itself (mp.spawn, or a
        driver of worker processes) and prints their output as it does, into spawn.log."""
        self.popen([*self.hcrun_prefix(), sys.executable, *self.job_argv(), "--nprocs", str(self.sc.world)],
                   self.out / "spawn.log", self.env)

    def start_mpirun(self) -> None:
        argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(self.sc.world),
                "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "PYTHONUNBUFFERED", "-x", "PATH"]
        if self.sc.labelled:
            argv.append("--tag-output")
        self.popen([*argv, *self.hcrun_prefix(), sys.executable, *self.job_argv()], self.out / "mpirun.log",
                   dict(self.env, OMPI_MCA_plm="isolated", OMPI_MCA_btl_vader_single_copy_mechanism="none",
                        OMPI_MCA_rmaps_base_oversubscribe="1"))

    # -------------------------------------------------------------------------- waiting

    def marks_read(self) -> dict[int, dict]:
        seen = {}
        for f in self.marks.glob("rank*.json"):
            try:
                d = json.loads(f.read_text())
                seen[int(d["rank"])] = d
            except (OSError, ValueError, KeyError):
                pass
        return seen

    def ready(self) -> bool:
        """Every rank started and every culprit reached its fault (a live job is then hung)."""
        seen = self.marks_read()
        if len(seen) < self.sc.world:
            return False
        return all(seen[r]["step"] == self.sc.at for r in self.sc.culprits if r in seen)

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def wait_ready(self) -> str:
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if self.ready():
                # into the collective (peers) or deeper into the fault; a healthy job runs steps
                time.sleep(4.0 if self.sc.truth == "none" else 2.5)
                return ""
            if not self.running():
                return "the job ended before every rank reached its fault"
            time.sleep(0.2)
        return f"not every rank reached its fault within {START_DEADLINE_S:.0f} s"

    def wait_end(self) -> None:
        """Until every process ended, or the scheduler's patience (the collective timeout and a
        few seconds past the first rank's end) ran out."""
        deadline = time.monotonic() + START_DEADLINE_S + 3 * self.timeout
        first_end: float | None = None
        while self.running() and time.monotonic() < deadline:
            if first_end is None and any(p.poll() is not None for p in self.procs):
                first_end = time.monotonic()
            if first_end is not None and time.monotonic() - first_end > self.timeout + 4:
                break
            time.sleep(0.2)

    def pids_for_hc(self) -> list[int]:
        if self.sc.launcher == "torchrun":
            return [self.procs[0].pid]  # the agent stands for its ranks
        return [int(d["pid"]) for d in self.marks_read().values()]

    def kill(self) -> None:
        """Everything this run started, by pid: the ranks (markers) and the launchers' sessions."""
        pids = [int(d["pid"]) for d in self.marks_read().values()]
        for sig in (signal.SIGCONT, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            for p in self.procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, sig)  # the session it leads: what this run started
                    except (ProcessLookupError, PermissionError):
                        pass
                else:  # the launcher exited; what it started may live on in its session
                    for pid in session_members(p.pid):
                        try:
                            os.kill(pid, sig)
                        except (ProcessLookupError, PermissionError):
                            pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass


def session_members(sid: int, proc: str = "/proc") -> list[int]:
    """The processes still in session `sid` (field 6 of /proc/PID/stat): a launcher started
    with start_new_session leads one, and a DataLoader worker of its rank can outlive it."""
    out = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 3 and fields[3] == str(sid):
            out.append(int(entry))
    return out


@contextmanager
def port_holder(run: Run, hold: bool):
    if not hold:
        yield
        return
    s = socket.socket()
    s.bind(("127.0.0.1", run.port))
    s.listen(8)
    try:
        yield
    finally:
        s.close()


def ask_hc(argv: list[str], env: dict[str, str]) -> tuple[dict, float, int, str]:
    start = time.perf_counter()
    r = subprocess.run([*hc_argv(), "diagnose", *argv, "--format", "json"], capture_output=True, text=True,
                       env=env, timeout=HC_TIMEOUT_S, cwd=REPO, check=False)
    seconds = time.perf_counter() - start
    try:
        return json.loads(r.stdout), seconds, r.returncode, ""
    except ValueError:
        return {}, seconds, r.returncode, f"rc {r.returncode}, no JSON: {r.stderr.strip()[-200:]}"


def diagnose(run: Run) -> Outcome:
    sc = run.sc
    env = clean_env()
    if sc.mode == "live":
        why = run.wait_ready()
        if why:
            return Outcome(sc, error=why)
        verdict, seconds, rc, error = ask_hc(["pids", *map(str, run.pids_for_hc()), "--timeout",
                                              str(HC_LIVE_DEADLINE_S)], env)
    else:
        run.wait_end()
        run.kill()
        verdict, seconds, rc, error = ask_hc(["logs", str(run.out)], env)
    return outcome_of(sc, verdict, seconds, rc, error)


def run_scenario(sc: Scenario, keep: Path | None = None) -> Outcome:
    """Run one scenario, diagnose it and kill what is left; `keep` copies its output there."""
    with tempfile.TemporaryDirectory(prefix="hc-dj-") as tmp:
        run = Run(sc, Path(tmp))
        try:
            with port_holder(run, sc.port_taken):
                run.start()
                outcome = diagnose(run)
        except (OSError, subprocess.SubprocessError) as exc:
            outcome = Outcome(sc, error=f"{type(exc).__name__}: {exc}")
        finally:
            run.kill()
        if keep is not None:
            import shutil

            shutil.copytree(run.out, keep / sc.slug, dirs_exist_ok=True)
        return outcome


Ask = Callable[[list[str], dict[str, str]], tuple[dict, float, int, str]]


def replay(sc: Scenario, root: Path, ask: Ask | None = None) -> Outcome | None:
    """`hc diagnose logs` on the scenario's saved output under root (None: none saved, or a live
    scenario, whose diagnosis needs the job running). `ask`: how hc is asked (None: ask_hc, a
    real `hc` subprocess; tests/diagnose_jobs/inprocess.py's runs it in this process)."""
    folder = root / sc.slug
    if sc.mode != "logs" or not folder.is_dir():
        return None
    verdict, seconds, rc, error = (ask or ask_hc)(["logs", str(folder)], clean_env())
    return outcome_of(sc, verdict, seconds, rc, error)


def outcome_of(sc: Scenario, verdict: dict, seconds: float, rc: int, error: str) -> Outcome:
    ranks = tuple(sorted({int(o["rank"]) for o in verdict.get("odd_ranks", []) if o.get("rank") is not None}))
    return Outcome(sc, hc_class=str(verdict.get("class", "?")), hc_ranks=ranks, seconds=seconds, rc=rc,
                   summary=str(verdict.get("summary", ""))[:300], error=error)


def replay_all(scenarios: Iterable[Scenario], root: Path, ask: Ask | None = None) -> Score:
    return Score([o for o in (replay(sc, root, ask) for sc in scenarios) if o is not None])


# a healthy or slow job looked at live is run this many times, each try scored as a job: one
# look at it names a "stuck" rank in some tries and not others (issue 19 item 2)
HEALTHY_LIVE_TRIES = 3


def tries(sc: Scenario, repeat_healthy: bool) -> int:
    return HEALTHY_LIVE_TRIES if repeat_healthy and sc.truth == "none" and sc.mode == "live" else 1


def run_all(scenarios: Iterable[Scenario], progress=None, repeat_healthy: bool = True) -> Score:
    score = Score()
    for sc in scenarios:
        n = tries(sc, repeat_healthy)
        for k in range(n):
            o = run_scenario(sc)
            o.attempt = f"{k + 1}/{n}" if n > 1 else ""
            score.outcomes.append(o)
            if progress is not None:
                progress(o)
    return score


def on_path() -> None:
    """tests/ importable, so that `diagnose_jobs` is (this file may run as a script)."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))


def held_out(name: str = "held-out") -> list[Scenario]:
    """A held-out set's scenarios: the HELD_OUT table of tests/fixtures/diagnose-jobs/NAME/scenarios.py."""
    import importlib.util

    if name not in HELD_OUT_SETS:
        raise ValueError(f"no held-out set {name!r}: one of {', '.join(HELD_OUT_SETS)}")
    on_path()  # the table imports diagnose_jobs.harness
    module_name = "diagnose_jobs_" + name.replace("-", "_")
    spec = importlib.util.spec_from_file_location(module_name, FIXTURES / name / "scenarios.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.HELD_OUT)


def scenario_set(name: str) -> list[Scenario]:
    """The scenarios of a set of SETS: the tuning table or a held-out one."""
    if name == "tuning":
        on_path()
        from diagnose_jobs.scenarios import TUNING

        return list(TUNING)
    return held_out(name)


def by_name(scenarios: Sequence[Scenario], names: Iterable[str]) -> list[Scenario]:
    wanted = set(names)
    return [sc for sc in scenarios if sc.name in wanted]


def main(argv: Sequence[str] | None = None) -> int:
    """`python tests/diagnose_jobs/harness.py [--set tuning|held-out|held-out-2|held-out-3|held-out-4|held-out-5|held-out-6|held-out-7|held-out-8|held-out-9|held-out-10|held-out-11|held-out-12] [--keep DIR] [NAME...]`:
    run the scenarios (all of the set, or those named), print each answer and the score."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--set", choices=SETS, default="tuning")
    ap.add_argument("--keep", type=Path, help="copy each job's saved output to DIR/<scenario slug>")
    ap.add_argument("--replay", action="store_true", help="no job: diagnose the set's saved outputs (logs mode)")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args(argv)
    scenarios = scenario_set(args.set)
    if args.names:
        scenarios = by_name(scenarios, args.names)
    score = Score()
    for sc in scenarios:
        o = replay(sc, SAVED[args.set]) if args.replay else run_scenario(sc, keep=args.keep)
        if o is None:
            continue
        score.outcomes.append(o)
        print(" | ".join(score.table()[-1]) + (f" | {o.summary[:160]}" if o.summary else ""), flush=True)
    print(score.row())
    for row in score.confusion():
        print("  " + " | ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
