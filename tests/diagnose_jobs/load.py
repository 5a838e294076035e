"""Run live diagnose scenarios under artificial CPU load and print, per scenario and load,
whether hc named a rank and which class it answered (issue 19: no rank named on a healthy
job, ever; a load must not turn a right answer wrong).

`python tests/diagnose_jobs/load.py [--load L ...] [--healthy] [--set S ...] [--tries N] [NAME ...]`

A load (LOADS) is some busy-loop processes beside the job, niced or not, and optionally hc
itself niced (its py-spy dumps then come later and fewer: the samples' timing under load)
or asked for fewer samples. The busy loops are started by this script in sessions of their
own and killed by their pids when the load ends, whatever happened.

The machine this runs on may be shared (2 cores): name a few scenarios and loads.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from diagnose_jobs import harness  # noqa: E402
from diagnose_jobs.harness import Outcome, Scenario  # noqa: E402


@dataclass(frozen=True)
class Load:
    name: str
    hogs: int = 0            # busy-loop processes beside the job
    hog_nice: int = 0        # their niceness (19: they yield to everything)
    hc_nice: int = 0         # hc's own niceness (its dumps come late under load)
    hc_args: tuple[str, ...] = ()  # more `hc diagnose pids` arguments (--samples 2)


LOADS = {load.name: load for load in (
    Load("none"),
    Load("hog2", hogs=2),
    Load("hog4", hogs=4),
    Load("hog2-niced", hogs=2, hog_nice=19),
    Load("hog2+hc-niced", hogs=2, hc_nice=19),
    Load("hog4+hc-niced", hogs=4, hc_nice=19),
    Load("hog2+3-samples", hogs=2, hc_args=("--samples", "3")),
    Load("hog2+2-samples", hogs=2, hc_args=("--samples", "2", "--window", "1")),
    Load("2-samples", hc_args=("--samples", "2", "--window", "1")),  # the knob alone, no hog
)}

BUSY = "while True: pass"


@contextmanager
def hogs(load: Load) -> Iterator[list[int]]:
    """`load.hogs` busy loops for the duration; killed by pid on the way out."""
    procs: list[subprocess.Popen] = []
    nice = ["nice", "-n", str(load.hog_nice)] if load.hog_nice else []
    try:
        for _ in range(load.hogs):
            procs.append(subprocess.Popen([*nice, sys.executable, "-c", BUSY], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)


@contextmanager
def hc_under(load: Load, baseline: Path | None = None) -> Iterator[list[Outcome]]:
    """hc started niced and with the load's extra sampling arguments, for the duration. With
    `baseline` (another checkout), the live job is first diagnosed by that checkout's hc too
    (the same job, the same load, a moment earlier); its outcomes are collected in the list
    yielded."""
    ask, repo = harness.ask_hc, harness.REPO
    before: list[Outcome] = []

    def niced(args: list[str], env: dict[str, str], cwd: Path) -> tuple[dict, float, int, str]:
        argv = harness.hc_argv
        harness.hc_argv = lambda: [*(["nice", "-n", str(load.hc_nice)] if load.hc_nice else []), *argv()]
        harness.REPO = cwd  # ask_hc runs `python -m healthcheck` there: that checkout's hc
        try:
            return ask([*args, *load.hc_args] if args and args[0] == "pids" else args, env)
        finally:
            harness.hc_argv, harness.REPO = argv, repo

    def ask_both(args: list[str], env: dict[str, str]) -> tuple[dict, float, int, str]:
        if baseline is not None and args and args[0] == "pids":
            before.append(harness.outcome_of(current[0], *niced(args, env, baseline)))
        return niced(args, env, repo)

    harness.ask_hc = ask_both
    try:
        yield before
    finally:
        harness.ask_hc = ask


current: list[Scenario] = []  # the scenario being run (for the baseline's outcome)


def run_under(sc: Scenario, load: Load, baseline: Path | None = None) -> tuple[Outcome, Outcome | None]:
    current[:] = [sc]
    with hogs(load), hc_under(load, baseline) as before:
        o = harness.run_scenario(sc)
    return o, (before[0] if before else None)


def verdict_word(o: Outcome) -> str:
    """'ok' (the right answer: nothing named on a healthy job), 'NAMED' (a rank named on a
    healthy job), 'WRONG' (a failing job's culprit or class missed), 'error'."""
    if o.error:
        return "error"
    if o.scenario.truth == "none":
        return "NAMED" if o.hc_ranks else "ok"
    return "ok" if o.right else ("FALSE+" if o.false_culprits else "WRONG")


def row(o: Outcome, load: Load, code: str = "") -> str:
    return " | ".join([o.scenario.name + (f" ({o.attempt})" if o.attempt else ""), load.name,
                       *([code] if code else []), o.scenario.truth_text, o.answer, verdict_word(o),
                       f"{o.seconds:.1f}", o.summary[:200] if o.summary else o.error[:200]])


def pick(sets: Sequence[str], healthy: bool, failing: bool, names: Sequence[str]) -> list[Scenario]:
    out = []
    for s in sets:
        for sc in harness.scenario_set(s):
            if sc.mode != "live":
                continue
            if names and sc.name not in names:
                continue
            if not names and ((sc.truth == "none" and not healthy) or (sc.truth != "none" and not failing)):
                continue
            out.append(sc)
    return out


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load", action="append", choices=sorted(LOADS), help="a load (repeat; default hog2)")
    ap.add_argument("--set", action="append", choices=harness.SETS, help="a scenario set (repeat; default all)")
    ap.add_argument("--healthy", action="store_true", help="the live scenarios whose truth is none")
    ap.add_argument("--failing", action="store_true", help="the live failing scenarios")
    ap.add_argument("--tries", type=int, default=1, help="runs of each scenario under each load")
    ap.add_argument("--baseline", type=Path, help="another checkout: its hc diagnoses each live job too, "
                                                  "first (rows 'base' and 'this')")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args(argv)
    # SIGTERM (and SIGINT, which a shell's background job ignores) unwind through the
    # finally blocks: the hogs and the job are killed by pid
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    loads = [LOADS[n] for n in (args.load or ["hog2"])]
    scenarios = pick(args.set or harness.SETS, args.healthy, args.failing, args.names)
    print("scenario | load | " + ("code | " if args.baseline else "") + "truth | hc | verdict | s | summary",
          flush=True)
    bad = 0
    for sc in scenarios:
        for load in loads:
            for k in range(args.tries):
                o, base = run_under(sc, load, args.baseline)
                o.attempt = f"{k + 1}/{args.tries}" if args.tries > 1 else ""
                if base is not None:
                    base.attempt = o.attempt
                    print(row(base, load, "base"), flush=True)
                bad += verdict_word(o) not in ("ok",)
                print(row(o, load, "this" if args.baseline else ""), flush=True)
    print(f"{bad} not ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
