#!/usr/bin/env bash
# slurm-down.sh — stop the cluster started by slurm-up.sh: cancel all its jobs first
# (slurmstepd outlives slurmd), then stop slurmd, slurmctld and munged by their pid
# files, checking /proc/<pid>/exe so a reused pid is never hit. Never kills by name.
# Idempotent; safe when nothing runs.
#
# Knobs: HC_SLURM_DIR (/tmp/hc-test-rig/slurm)
#        HC_SLURM_CLEAN  0 (default): keep the directory (logs) | 1: remove it
set -uo pipefail
R=${HC_SLURM_DIR:-/tmp/hc-test-rig/slurm}
[[ -d $R ]] || exit 0
export SLURM_CONF=$R/etc/slurm.conf

# alive = exists and is not a zombie (PID 1 here reaps late; kill -0 is true for zombies)
alive() { [[ -n $1 && -r /proc/$1/stat ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }
pid_in() { [[ -s $1 ]] && cat "$1" 2>/dev/null || true; }

ctld=$(pid_in "$R/run/slurmctld.pid")
if alive "$ctld" && [[ -f $SLURM_CONF ]]; then
  jobs=$(timeout 10 squeue -h -o %i 2>/dev/null || true)
  if [[ -n $jobs ]]; then
    timeout 10 scancel --full $jobs 2>/dev/null || true
    for _ in $(seq 1 50); do
      [[ -z $(timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
fi

stop() { # pidfile
  local p exe; p=$(pid_in "$1")
  alive "$p" || return 0
  exe=$(readlink "/proc/$p/exe" 2>/dev/null || true)
  # Debian's daemons are /usr/sbin/slurmd-wlm and /usr/sbin/slurmctld-wlm
  case "$exe" in */slurmd|*/slurmd-wlm|*/slurmctld|*/slurmctld-wlm|*/munged) ;; *) return 0 ;; esac
  kill -TERM "$p" 2>/dev/null
  for _ in $(seq 1 50); do alive "$p" || return 0; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
  for _ in $(seq 1 20); do alive "$p" || return 0; sleep 0.1; done
  echo "slurm-down: pid $p ($exe) did not exit" >&2
}
# slurmd in parallel (each may take a moment), then the controller, then munge
for f in "$R"/run/slurmd-*.pid; do [[ -e $f ]] && stop "$f" & done
wait
stop "$R/run/slurmctld.pid"
stop "$R/run/munged.pid"
if [[ ${HC_SLURM_CLEAN:-0} == 1 && $R == /?*/?* ]]; then rm -rf "$R"; fi
exit 0
