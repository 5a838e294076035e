#!/usr/bin/env python3
"""Stand-in for an nccl-tests binary (all_reduce_perf, ...) on a machine without GPUs.

It replays a real captured output (tests/fixtures/nccl-tests) chosen by the scenario in
HC_STANDIN_SCENARIO, which tests set through the fabric's bandwidth.nccl_tests.env, so
the scenario reaches it through hc's real runner like any NCCL variable. Each call is
appended to HC_STANDIN_LOG (argv and the NCCL/CUDA variables it saw) when set.

Scenarios: healthy, slow (derived: the healthy capture at half the bandwidth), wrong
(derived: #wrong on the largest rows), nccl-failure, hang (the first rows, then it
sleeps until killed), slow-then-healthy (slow on the first call, healthy after; state in
HC_STANDIN_STATE), missing-ranks (the 4-GPU capture on an 8-GPU node).
"""

import json
import os
import sys
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl-tests"
CAPTURES = {
    "healthy": ("all_reduce-a100-8gpu-old-format-c0.txt", 0),
    "slow": ("derived/all_reduce-a100-8gpu-half-bandwidth.txt", 0),
    "wrong": ("derived/all_reduce-a100-8gpu-wrong-rows.txt", 0),
    "nccl-failure": ("test-nccl-failure-common-cu-961-with-nccl-chains-two-hosts-4090.txt", 3),
    "missing-ranks": ("all_reduce-a100-pcie-4gpu-collective-test-starting-header-nccl-2.19.3-init.txt", 0),
}


def main() -> int:
    scenario = os.environ.get("HC_STANDIN_SCENARIO", "healthy")
    log = os.environ.get("HC_STANDIN_LOG")
    if log:
        seen = {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "CUDA_"))}
        with open(log, "a") as f:
            f.write(json.dumps({"argv": [Path(sys.argv[0]).name, *sys.argv[1:]], "env": seen}) + "\n")
    if scenario == "slow-then-healthy":
        state = Path(os.environ["HC_STANDIN_STATE"])
        calls = int(state.read_text()) if state.exists() else 0
        state.write_text(str(calls + 1))
        scenario = "slow" if calls == 0 else "healthy"
    if scenario == "hang":
        lines = (FIXTURES / CAPTURES["healthy"][0]).read_text().splitlines(keepends=True)
        sys.stdout.write("".join(lines[:40]))
        sys.stdout.flush()
        time.sleep(3600)
        return 0
    name, code = CAPTURES[scenario]
    sys.stdout.write((FIXTURES / name).read_text())
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
