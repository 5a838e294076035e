"""The node detector measured (issue 23, section 6): labelled node scenarios replayed from
real captures through hc's real probes and checks, and a scorer.

scenarios.py holds the set (SCENARIOS; CI_SUBSET names the handful the unit test runs), each
scenario a node's captures (an NVML recording, `nvidia-smi -q`, a kernel log, `ibstat`,
`perfquery -x`, `ip -j -d link`, nccl-tests output through its stand-in) and its truth;
harness.py runs one (`run`) and scores a set (`score_all`): what `bin/bench`'s "node detector"
section prints and tests/unit/checks/test_node_detector.py asserts.
"""
