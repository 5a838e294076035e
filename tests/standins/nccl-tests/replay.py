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

-J FILE (nccl-tests >= 2.17.3's JSON), only where HC_STANDIN_JSON is set: `-h` then prints
a usage listing `-J,--output_file` (without it, an older usage that does not), and `-J FILE`
writes the scenario's JSON capture to FILE (broadcast-1gpu: the real -J file of the same
run as its text); HC_STANDIN_JSON=cut writes only its first half, as a run that died
leaves it. A scenario without a JSON capture writes nothing.

  broadcast-1gpu    the 1-GPU broadcast capture on an H100 (text; JSON with -J)

Between two nodes, one process per rank under mpirun (rank and size from Open MPI's
OMPI_COMM_WORLD_RANK/_SIZE; a binary built with MPI=1 prints from rank 0 only):

  pair-healthy      rank 0 prints the 2-node x 8-GPU capture (16 ranks), its {host1} as the
                    host it runs on and {host2} as HC_STANDIN_PEER (else left as printed)
  pair-hang         rank 0 prints the same up to its third row; every rank then sleeps until killed
  pair-nccl-failure the 2-host x 2-GPU capture (4 ranks): rank 0 prints the banner and the
                    rank map, the last rank the NCCL failure and its stack line, and exits 1
  pair-lone-ranks   every rank prints the 1-GPU capture as its own rank 0 (a binary built
                    without MPI launched by mpirun)
"""

import json
import os
import socket
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
    "broadcast-1gpu": ("broadcast-h100-1gpu-2.19.6.txt", 0),
}
JSON_CAPTURES = {"broadcast-1gpu": "broadcast-h100-1gpu-2.19.6-J.json"}
# the -h usage (abridged), before -J (2.17.3) and after
USAGE = ("USAGE: {name} \n\t[-t,--nthreads <num threads>] \n\t[-g,--ngpus <gpus per thread>] \n"
         "\t[-b,--minbytes <min size in bytes>] \n\t[-e,--maxbytes <max size in bytes>] \n"
         "\t[-c,--check <check iteration count>] \n\t[-a,--average <0/1/2/3> report average iteration time "
         "<0=RANK0/1=AVG/2=MIN/3=MAX>] \n{json}\t[-h,--help]\n")

PAIR_HEALTHY = "all_reduce-a100-2node-16rank-pairwise-templated-hosts.txt"
PAIR_FAILURE = "all_reduce-2host-4rank-test-nccl-failure-internal-error-mpirun-abort.txt"
LONE = "all_reduce-h100-1gpu-2.19.6-nccl-2.28.9.txt"


def pair(scenario: str) -> int:
    """The 2-node scenarios: each rank a process of its own, as mpirun starts them."""
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    if scenario == "pair-lone-ranks":
        sys.stdout.write((FIXTURES / LONE).read_text())
        return 0
    if scenario == "pair-nccl-failure":
        lines = (FIXTURES / PAIR_FAILURE).read_text().splitlines(keepends=True)
        if rank == 0:
            sys.stdout.write("".join(lines[:7]))  # the banner and the rank map
        if rank == size - 1:
            sys.stdout.write("".join(lines[7:9]))  # the failure and its stack line
            sys.stdout.flush()
            return 1
        return 0
    text = (FIXTURES / PAIR_HEALTHY).read_text().replace("{host1}", socket.gethostname())
    text = text.replace("{host2}", os.environ.get("HC_STANDIN_PEER", "{host2}"))
    if scenario == "pair-hang":
        if rank == 0:
            lines = text.splitlines(keepends=True)
            table = next(i for i, line in enumerate(lines) if line.lstrip().startswith("#        (B)"))
            sys.stdout.write("".join(lines[:table + 4]))
            sys.stdout.flush()
        time.sleep(3600)
        return 0
    if rank == 0:
        sys.stdout.write(text)
    return 0


def main() -> int:
    scenario = os.environ.get("HC_STANDIN_SCENARIO", "healthy")
    log = os.environ.get("HC_STANDIN_LOG")
    if log:
        seen = {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "CUDA_"))}
        with open(log, "a") as f:
            f.write(json.dumps({"argv": [Path(sys.argv[0]).name, *sys.argv[1:]], "env": seen}) + "\n")
    json_mode = os.environ.get("HC_STANDIN_JSON")
    if "-h" in sys.argv[1:]:
        json_line = "\t[-J,--output_file <file>] write the results as JSON to <file>\n" if json_mode else ""
        sys.stdout.write(USAGE.format(name=Path(sys.argv[0]).name, json=json_line))
        return 0
    if json_mode and "-J" in sys.argv[1:-1]:
        out = sys.argv[sys.argv.index("-J") + 1]
        capture = JSON_CAPTURES.get(scenario)
        if capture:
            doc = (FIXTURES / capture).read_text()
            Path(out).write_text(doc[:len(doc) // 2] if json_mode == "cut" else doc)
    if scenario == "slow-then-healthy":
        state = Path(os.environ["HC_STANDIN_STATE"])
        calls = int(state.read_text()) if state.exists() else 0
        state.write_text(str(calls + 1))
        scenario = "slow" if calls == 0 else "healthy"
    if scenario.startswith("pair-"):
        return pair(scenario)
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
