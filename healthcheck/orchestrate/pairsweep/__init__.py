"""The deep sweep's bandwidth tests between nodes, one module per job, bottom up:

  plan.py       PairPlan: the settings every test shares (frozen), the worker's argv, the address
  transport.py  the seam: PairTransport (how a torch test reaches its members) and TorchOutcome
  ssh.py        SshTransport: `hc bw allreduce` per test over hc's own SSH
  launched.py   LauncherTransport: the same per test through mpirun or srun; the launchers' specs
  workers.py    WorkerTransport: one persistent `hc bw serve` per node for the whole sweep
  choose.py     the transport a sweep takes, chosen once from the plan
  tools.py      nccl-tests and ib_write_bw between two nodes, on the probes' public API
  measure.py    one test: every tool the fabric lists, each figure as the sweep judges it
  judging.py    short against the floor or the peers, repeats, a test's GroupResult and Result
  sweep.py      run_pairs (the rounds localization asks for, then settling) and judge_pairs

The maths (schedules, peers, localization, the bw.pairs analysis) is bandwidth/'s.
"""
