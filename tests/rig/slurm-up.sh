#!/usr/bin/env bash
# slurm-up.sh — a private Slurm cluster for hc's integration tests: its own munged,
# slurmctld and one slurmd per node. Everything lives under $HC_SLURM_DIR; nothing is
# written to /etc. Clients find the cluster through SLURM_CONF:
#     source "$HC_SLURM_DIR/env.sh"      # exports SLURM_CONF, HC_SLURM_DIR
#
# Two modes
#   netns (default): one slurmd inside each host made by netns-up.sh, entered with
#     `nsenter -t <anchor pid> -n -u -m`, so slurmd, Prolog, Epilog, HealthCheckProgram
#     and job steps see the node's own hostname, interfaces/MTU, /etc/hosts, fake IB
#     sysfs and private tmpfs. NodeAddr = the host's address, slurmd port 6818 in every
#     host; slurmctld runs in the root namespace, reached at the bridge address.
#   localhost (HC_SLURM_NETNS_DIR=""): N slurmd in the root namespace on ports
#     HC_SLURM_SLURMD_PORT.. (Debian builds slurmd with MULTIPLE_SLURMD). `hostname`
#     is the machine's there, and `srun --mpi=pmix` across nodes does not work.
#
# Knobs (environment)
#   HC_SLURM_DIR           /tmp/hc-test-rig/slurm   (wiped and recreated)
#   HC_SLURM_NETNS_DIR     ${HC_RIG_DIR:-/tmp/hc-test-rig/netns}; "" = localhost mode
#   HC_SLURM_NODES         number of netns hosts (netns mode) | 4 -> node[1-N]
#   HC_SLURM_CPUS          2      CPUs per node (more than the machine has -> node inval)
#   HC_SLURM_CTLD_PORT     16917
#   HC_SLURM_SLURMD_PORT   17101  localhost mode: node i listens on PORT+i-1
#   HC_SLURM_PROLOG        hook   Prolog=: "hook" (recording hook), "none", or a path
#   HC_SLURM_EPILOG        hook   Epilog=: same
#   HC_SLURM_HEALTHCHECK   none   HealthCheckProgram=: same
#   HC_SLURM_HC_INTERVAL   0      HealthCheckInterval= (seconds)
#   HC_SLURM_PROLOG_FLAGS  Alloc  PrologFlags= ("" to omit). Alloc: prolog on every
#                                 allocated node before the batch script starts.
#   HC_SLURM_PROLOG_EPILOG_TIMEOUT  unset  PrologEpilogTimeout= (seconds)
#   HC_SLURM_EXTRA_CONF    ""     lines appended to slurm.conf, e.g.
#                                 "SchedulerParameters=nohold_on_prolog_fail"
#   HC_SLURM_GPUS          0      >0: Gres=gpu:N per node, backed by placeholder char
#                                 devices $HC_SLURM_DIR/dev/<node>/nvidia<k> (c 195 k);
#                                 --gres=gpu:N jobs schedule and get CUDA_VISIBLE_DEVICES
#   HC_SLURM_TIMEOUT       30     seconds to wait for daemons / all nodes idle
#   HC_SLURM_SLURMD_TIMEOUT  30   SlurmdTimeout=: slurmctld pings a node every third of it
#                                 and sets it DOWN after it (a node not answering)
#   HC_SLURM_MESSAGE_TIMEOUT 10   MessageTimeout=: a ping unanswered this long marks the
#                                 node not responding (idle*); also every RPC's timeout
#
# Recording hooks ("hook" above): each run appends
#   "<kind> node=<node> job=<id> t=<epoch.ns>" to $HC_SLURM_DIR/hooks/events.log,
# dumps its environment to hooks/<kind>-<node>-<job>.env, and exits 1 when
# hooks/fail-<kind>-<node> or hooks/fail-<kind>-all exists (kind: prolog, epilog,
# healthcheck), so tests can make one node's hook fail.
#
# Pitfalls handled here (see the comments below): hooks run without PATH (and the
# health check without SLURM_CONF); munged's directory permissions; pmix needs a
# per-host tmp dir; somebody else's daemon on our port; stdio of daemons.
# Idempotent: a cluster running from the same directory is stopped first.
set -euo pipefail
trap 'echo "slurm-up: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
R=${HC_SLURM_DIR:-/tmp/hc-test-rig/slurm}
NS_DIR=${HC_SLURM_NETNS_DIR-${HC_RIG_DIR:-/tmp/hc-test-rig/netns}}
CPUS=${HC_SLURM_CPUS:-2}
CTLD_PORT=${HC_SLURM_CTLD_PORT:-16917}
SLURMD_PORT=${HC_SLURM_SLURMD_PORT:-17101}
PROLOG_FLAGS=${HC_SLURM_PROLOG_FLAGS-Alloc}
HC_INTERVAL=${HC_SLURM_HC_INTERVAL:-0}
GPUS=${HC_SLURM_GPUS:-0}
WAIT=${HC_SLURM_TIMEOUT:-30}
SLURMD_TIMEOUT=${HC_SLURM_SLURMD_TIMEOUT:-30}
MESSAGE_TIMEOUT=${HC_SLURM_MESSAGE_TIMEOUT:-10}
t0=$(date +%s%N)
die() { echo "slurm-up: $*" >&2; exit 2; }
# stop whatever we started if anything below fails (logs stay for the post-mortem)
trap '[[ $? -ne 0 && -n ${STARTED:-} ]] && HC_SLURM_DIR=$R "$HERE/slurm-down.sh" >/dev/null 2>&1' EXIT

[[ $(id -u) == 0 ]] || die "must run as root"
[[ $R == /?*/?* ]] || die "HC_SLURM_DIR=$R: want an absolute path at least two levels deep (it is wiped)"
for b in munged slurmctld slurmd sinfo scontrol squeue scancel ss; do
  command -v "$b" >/dev/null || die "$b not found (run tests/rig/install.sh)"
done

# ---- nodes -----------------------------------------------------------------------
names=(); addrs=(); anchors=()
if [[ -n $NS_DIR ]]; then
  [[ -s $NS_DIR/hosts.tsv ]] || die "no $NS_DIR/hosts.tsv (run netns-up.sh first, or HC_SLURM_NETNS_DIR= for localhost mode)"
  while read -r name addr _ns _mtu; do
    names+=("$name"); addrs+=("$addr")
    anchors+=("$(cat "$NS_DIR/$name/anchor.pid")")
  done < "$NS_DIR/hosts.tsv"
  NODES=${HC_SLURM_NODES:-${#names[@]}}
  (( NODES <= ${#names[@]} )) || die "$NODES nodes but only ${#names[@]} netns hosts"
  HEAD=${addrs[0]%.*}.1                                   # the bridge address
  for i in $(seq 0 $((NODES - 1))); do
    a=${anchors[$i]}
    [[ -r /proc/$a/stat && $(readlink "/proc/$a/exe" 2>/dev/null) == */sleep ]] \
      || die "netns host ${names[$i]} is gone (anchor pid $a); rerun netns-up.sh"
  done
else
  NODES=${HC_SLURM_NODES:-4}
  for i in $(seq 1 "$NODES"); do names+=("node$i"); done
fi

# ---- fresh state directory ---------------------------------------------------------
HC_SLURM_DIR=$R "$HERE/slurm-down.sh" >/dev/null 2>&1 || true
rm -rf "$R"
mkdir -p "$R"/{etc,state,spool,log,run,hooks,jobs,munge-key,munge-run}
# munged is strict: the key dir must be private (0700) but the socket dir must be
# traversable by everyone ("execute permissions for all required"): two directories
chmod 755 "$R" "$R/munge-run"; chmod 700 "$R/munge-key"; chmod 1777 "$R/jobs"
d=$R; while [[ $d != / ]]; do d=$(dirname "$d"); [[ -x $d ]] || die "$d not traversable (munged)"; done

# refuse to start on top of somebody else's daemon: sinfo would silently talk to it
# and our slurmctld would die with "Address already in use"
busy=$(ss -Hltn 2>/dev/null | awk '{print $4}' | sed 's/.*://' | sort -u)
ports=$CTLD_PORT; [[ -z $NS_DIR ]] && ports+=" $(seq "$SLURMD_PORT" $((SLURMD_PORT + NODES - 1)))"
for p in $ports; do
  ! grep -qx "$p" <<<"$busy" || die "TCP port $p already in use (set HC_SLURM_CTLD_PORT / HC_SLURM_SLURMD_PORT)"
done

# ---- munge -------------------------------------------------------------------------
STARTED=1
head -c 1024 /dev/urandom > "$R/munge-key/munge.key"; chmod 400 "$R/munge-key/munge.key"
SOCK=$R/munge-run/munge.socket
# daemons get /dev/null as stdio: a daemon holding our caller's stdout pipe would
# make e.g. Python's subprocess.run(capture_output=True) wait forever
munged --socket="$SOCK" --key-file="$R/munge-key/munge.key" --log-file="$R/log/munged.log" \
       --pid-file="$R/run/munged.pid" --seed-file="$R/munge-key/munged.seed" \
       </dev/null >/dev/null 2>>"$R/log/munged.stderr"

# ---- recording hooks ---------------------------------------------------------------
cat > "$R/hooks/record.sh" <<EOF
#!/bin/bash
# recording hook (generated by slurm-up.sh); kind = name it was called by
kind=\$(basename "\$0" .sh)
node=\${SLURMD_NODENAME:-unknown}
job=\${SLURM_JOB_ID:-none}
env | sort > "$R/hooks/\$kind-\$node-\$job.env"     # before we touch the environment
export PATH=/usr/sbin:/usr/bin:/sbin:/bin            # slurmd gives hooks no PATH
echo "\$kind node=\$node job=\$job t=\$(date +%s.%N)" >> "$R/hooks/events.log"
if [[ -e "$R/hooks/fail-\$kind-\$node" || -e "$R/hooks/fail-\$kind-all" ]]; then
  echo "\$kind failing on purpose on \$node" >&2
  exit 1
fi
exit 0
EOF
chmod 755 "$R/hooks/record.sh"
for k in prolog epilog healthcheck; do ln -sf record.sh "$R/hooks/$k.sh"; done
hook() { # value of the knob, kind
  case "$1" in
    none|"") echo "" ;;
    hook) echo "$R/hooks/$2.sh" ;;
    /*) [[ -x $1 ]] || die "$2 program $1 is not executable"; echo "$1" ;;
    *) die "$2 program must be hook, none or an absolute path (got $1)" ;;
  esac
}
PROLOG=$(hook "${HC_SLURM_PROLOG:-hook}" prolog)
EPILOG=$(hook "${HC_SLURM_EPILOG:-hook}" epilog)
HEALTH=$(hook "${HC_SLURM_HEALTHCHECK:-none}" healthcheck)

# ---- slurm.conf --------------------------------------------------------------------
GRES=""; (( GPUS > 0 )) && GRES=" Gres=gpu:$GPUS"
if [[ -n $NS_DIR ]]; then
  CTLD_HOST="localhost($HEAD)"     # slurmd in the hosts reach slurmctld via the bridge
  NODE_LINES=""
  for i in $(seq 0 $((NODES - 1))); do
    NODE_LINES+="NodeName=${names[$i]} NodeHostname=${names[$i]} NodeAddr=${addrs[$i]} Port=6818 CPUs=$CPUS RealMemory=1000$GRES State=UNKNOWN"$'\n'
  done
else
  CTLD_HOST=localhost
  NODE_LINES="NodeName=node[1-$NODES] NodeHostname=localhost Port=[$SLURMD_PORT-$((SLURMD_PORT + NODES - 1))] CPUs=$CPUS RealMemory=1000$GRES State=UNKNOWN"$'\n'
fi
{
cat <<EOF
# generated by tests/rig/slurm-up.sh
ClusterName=hctest
SlurmctldHost=$CTLD_HOST
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
StateSaveLocation=$R/state
SlurmdSpoolDir=$R/spool/%n
SlurmctldPidFile=$R/run/slurmctld.pid
SlurmdPidFile=$R/run/slurmd-%n.pid
SlurmctldLogFile=$R/log/slurmctld.log
SlurmdLogFile=$R/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdTimeout=$SLURMD_TIMEOUT
MessageTimeout=$MESSAGE_TIMEOUT
EOF
[[ -n $PROLOG ]] && echo "Prolog=$PROLOG"
[[ -n $EPILOG ]] && echo "Epilog=$EPILOG"
[[ -n $PROLOG_FLAGS ]] && echo "PrologFlags=$PROLOG_FLAGS"
[[ -n ${HC_SLURM_PROLOG_EPILOG_TIMEOUT:-} ]] && echo "PrologEpilogTimeout=$HC_SLURM_PROLOG_EPILOG_TIMEOUT"
if [[ -n $HEALTH ]]; then
  # the health check runs with SLURMD_NODENAME only: no PATH, no SLURM_CONF
  echo "HealthCheckProgram=$HEALTH"
  echo "HealthCheckInterval=$HC_INTERVAL"
  echo "HealthCheckNodeState=ANY"
fi
(( GPUS > 0 )) && echo "GresTypes=gpu"
if [[ -n $NS_DIR ]]; then
  # srun --mpi=pmix creates <base>/spmix_appdir_<uid>_<job>.<step> on every node and
  # the hosts share /tmp ("File exists"); %n is not expanded in PMIxCliTmpDirBase, so
  # point it (and TmpFS) at the same path that is a private tmpfs in every host
  echo "TmpFS=$NS_DIR/local"
fi
printf '%s' "$NODE_LINES"
echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
[[ -n ${HC_SLURM_EXTRA_CONF:-} ]] && printf '%s\n' "$HC_SLURM_EXTRA_CONF"
true
} > "$R/etc/slurm.conf"
[[ -n $NS_DIR ]] && echo "PMIxCliTmpDirBase=$NS_DIR/local" > "$R/etc/mpi.conf"
if (( GPUS > 0 )); then
  : > "$R/etc/gres.conf"
  for i in $(seq 0 $((NODES - 1))); do
    n=${names[$i]}; mkdir -p "$R/dev/$n"
    # slurmd rejects plain files ("is not a valid character or block device"); 195:k
    # like NVIDIA but no driver behind them: Slurm bookkeeping only
    for k in $(seq 0 $((GPUS - 1))); do mknod "$R/dev/$n/nvidia$k" c 195 "$k"; done
    echo "NodeName=$n Name=gpu File=$R/dev/$n/nvidia[0-$((GPUS - 1))]" >> "$R/etc/gres.conf"
  done
fi
export SLURM_CONF=$R/etc/slurm.conf
cat > "$R/env.sh" <<EOF
export SLURM_CONF=$SLURM_CONF
export HC_SLURM_DIR=$R
EOF

# ---- daemons -----------------------------------------------------------------------
slurmctld -f "$SLURM_CONF" </dev/null >/dev/null 2>>"$R/log/slurmctld.stderr"
for i in $(seq 0 $((NODES - 1))); do
  n=${names[$i]}
  if [[ -n $NS_DIR ]]; then
    nsenter -t "${anchors[$i]}" -n -u -m slurmd -f "$SLURM_CONF" -N "$n" \
      </dev/null >/dev/null 2>>"$R/log/slurmd-$n.stderr"
  else
    slurmd -f "$SLURM_CONF" -N "$n" </dev/null >/dev/null 2>>"$R/log/slurmd-$n.stderr"
  fi
done

alive() { [[ -n $1 && -r /proc/$1/stat ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }
deadline=$(( $(date +%s) + WAIT ))
for f in "$R/run/munged.pid" "$R/run/slurmctld.pid" $(for n in "${names[@]:0:NODES}"; do echo "$R/run/slurmd-$n.pid"; done); do
  until [[ -s $f ]] && alive "$(cat "$f")"; do
    if (( $(date +%s) > deadline )); then
      echo "slurm-up: daemon for $f did not start" >&2
      tail -n 5 "$R"/log/*.log "$R"/log/*.stderr >&2 2>/dev/null || true
      exit 1
    fi
    sleep 0.05
  done
done

# wait until every node is idle (its slurmd registered)
until [[ $(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l) -eq $NODES ]]; do
  if (( $(date +%s) > deadline )); then
    echo "slurm-up: nodes not idle after ${WAIT}s" >&2
    sinfo -N -l >&2 || true; tail -n 20 "$R/log/slurmctld.log" >&2 || true
    exit 1
  fi
  sleep 0.1
done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "slurm-up: $NODES nodes idle in ${ms} ms; source $R/env.sh"
