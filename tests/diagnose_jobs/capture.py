"""Run a held-out set's jobs WITHOUT hc: the logs-mode ones to their end (saved/ is their
output, copied unedited), the live ones until every rank reached its fault, then `py-spy dump`
of every rank (printed, to check by hand where each rank sits). The same Run as the harness
(harness.py): same launchers, timeouts and waits, no diagnosis. Each held-out set's
capture.py calls main() with its name.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from diagnose_jobs import harness


def check(sc: harness.Scenario, keep: Path | None, spy: bool) -> None:
    """Run one job without hc; print where its ranks ended (py-spy them with `spy`), keep its output."""
    with tempfile.TemporaryDirectory(prefix=f"hc-{sc.slug[:8]}-") as tmp:
        run = harness.Run(sc, Path(tmp))
        try:
            with harness.port_holder(run, sc.port_taken):
                run.start()
                if sc.mode == "live":
                    why = run.wait_ready()
                    print(f"== {sc.name}: {why or 'ready'}; marks {sorted((r, d['step']) for r, d in run.marks_read().items())}")
                    if spy:
                        for rank, d in sorted(run.marks_read().items()):
                            r = subprocess.run([str(Path(sys.executable).with_name("py-spy")), "dump", "--pid", str(d["pid"])], capture_output=True,
                                               text=True, timeout=60, check=False)
                            print(f"-- rank {rank} pid {d['pid']}\n{r.stdout}{r.stderr}")
                else:
                    run.wait_end()
                    codes = [p.poll() for p in run.procs]
                    print(f"== {sc.name}: ended {codes}; marks {sorted((r, d['step']) for r, d in run.marks_read().items())}")
        finally:
            run.kill()
        if keep is not None:
            shutil.copytree(run.out, keep / sc.slug, dirs_exist_ok=True)


def main(set_name: str, argv: list[str] | None = None) -> int:
    """Check the named jobs of a held-out set (all of them without names) by hand."""
    ap = argparse.ArgumentParser(prog=f"{set_name}/capture.py")
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--spy", action="store_true")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args(argv)
    scenarios = harness.held_out(set_name)
    if args.names:
        scenarios = harness.by_name(scenarios, args.names)
    for sc in scenarios:
        check(sc, args.keep, args.spy)
    return 0
