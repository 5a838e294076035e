#!/bin/sh
# Slurm HealthCheckProgram=: checks this node every HealthCheckInterval, drains on FAIL
# and resumes nodes hc drained once the checks named in their reason pass again.
# slurmd only logs this program's exit code; hc acts through scontrol itself.
. "${0%/*}/hc-env.sh"
exec "$HC_BIN" health
