"""Orchestration: running checks and analyses on this node, over SSH, through Slurm and
across many nodes, and the Slurm hooks. Above the kernel (`healthcheck.core`) and the
domain packages (checks, probes, parsers, report, actions); below the CLI."""
