"""Regenerate docs/report-html.png: `hc report html` for a report, screenshotted by headless Chromium.

    .venv/bin/python tests/report_screenshot.py                       # the demo sweep below
    .venv/bin/python tests/report_screenshot.py REPORT --config CFG   # a saved report (a rig sweep)

With no REPORT, four deep sweeps of 8 nodes run through run_many in a temporary directory
(tests/sweep_reports.py: a node slow on its own, a culprit slow with every partner, a slow
link) and the page is the last one's, with the history of the four.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", nargs="?", type=Path, help="a saved report (default: the demo sweep)")
    parser.add_argument("--config", type=Path, help="the config for the report's floors and history")
    parser.add_argument("-o", "--output", type=Path, default=REPO / "docs" / "report-html.png")
    parser.add_argument("--size", default="1280,3600", help="the window, WIDTH,HEIGHT (the page's top is shot)")
    args = parser.parse_args()
    from chromium import available, run

    if not available():
        print("chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="hc-screenshot-") as tmp:
        work = Path(tmp)
        report, config = args.report, args.config
        if report is None:
            from sweep_reports import history_of_sweeps, write_config

            from healthcheck.report.jsonio import encode

            config = write_config(work, "gpu[01-08]")
            report = work / "report.json"
            report.write_bytes(encode(history_of_sweeps(config, [f"gpu{i:02d}" for i in range(1, 9)], runs=4)))
        page = work / "report.html"
        hc = [sys.executable, "-m", "healthcheck", "report", "html", str(report), "-o", str(page),
              *(["--config", str(config)] if config else [])]
        subprocess.run(hc, check=True)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        rc, _out, err = run(f"--screenshot={args.output.resolve()}", f"--window-size={args.size}",
                            "--hide-scrollbars", page.as_uri())
        if rc != 0 or not args.output.exists():
            print(f"chromium failed (exit {rc}): {err[-2000:]}", file=sys.stderr)
            return 1
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
