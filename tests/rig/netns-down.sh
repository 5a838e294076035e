#!/usr/bin/env bash
# netns-down.sh — undo netns-up.sh. Stops each host's sshd (by pid file, checking
# /proc/<pid>/exe), then ends whatever else still runs inside *this rig's*
# namespaces (found with `ip netns pids`, never by process name), deletes the
# namespaces (which destroys their veths), our bridges and /etc/netns/<ns>.
# Idempotent; safe when nothing is up.
#
# Knobs (same as netns-up.sh): HC_RIG_DIR, HC_RIG_PREFIX (hct), HC_RIG_BRIDGE (hctbr0)
#   HC_RIG_CLEAN  0 (default): keep $HC_RIG_DIR (logs, keys) | 1: remove it
#
# Only namespaces named exactly <prefix><digits> and links named <prefix>v<digits> /
# <prefix>f<digits> are touched, so other rigs (hcn*, hcmtu*) are left alone.
set -uo pipefail
R=${HC_RIG_DIR:-/tmp/hc-test-rig/netns}
P=${HC_RIG_PREFIX:-hct}
BR=${HC_RIG_BRIDGE:-hctbr0}
BR1=${BR%0}1
[[ $P =~ ^[a-z][a-z0-9]{0,9}$ ]] || { echo "netns-down: bad HC_RIG_PREFIX=$P" >&2; exit 2; }

# alive = exists and is not a zombie (PID 1 here reaps late; kill -0 is true for zombies)
alive() { [[ -n $1 && -r /proc/$1/stat ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }

# 1. sshd first, gracefully (pid file + exe check against pid reuse)
for pf in "$R"/node*/sshd.pid; do
  [[ -s $pf ]] || continue
  p=$(cat "$pf" 2>/dev/null)
  alive "$p" && [[ $(readlink "/proc/$p/exe" 2>/dev/null) == /usr/sbin/sshd ]] && kill -TERM "$p" 2>/dev/null
done

# 2. everything left in our namespaces (anchor, slurmd, slurmstepd, test processes)
ours=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${P}[0-9]+$" || true)
ns_pids() { ip netns pids "$1" 2>/dev/null | while read -r p; do alive "$p" && echo "$p"; done; }
for ns in $ours; do
  pids=$(ns_pids "$ns"); [[ -n $pids ]] && kill -TERM $pids 2>/dev/null
done
for ns in $ours; do
  for _ in $(seq 1 30); do [[ -z $(ns_pids "$ns") ]] && break; sleep 0.1; done
  pids=$(ns_pids "$ns")
  if [[ -n $pids ]]; then
    kill -KILL $pids 2>/dev/null
    for _ in $(seq 1 20); do [[ -z $(ns_pids "$ns") ]] && break; sleep 0.1; done
    left=$(ns_pids "$ns"); [[ -n $left ]] && echo "netns-down: pids still in $ns: $left" >&2
  fi
  ip netns del "$ns" 2>/dev/null   # also destroys the veth pair once the ns is gone
  rm -rf "/etc/netns/$ns"
done

# 3. links: host-side veths whose namespace is still alive (a leftover process),
#    then our bridges
for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^${P}[vf][0-9]+$" || true); do
  ip link del "$l" 2>/dev/null
done
for b in "$BR" "$BR1"; do
  ip link show "$b" >/dev/null 2>&1 && ip link del "$b" 2>/dev/null
done
rmdir /etc/netns 2>/dev/null   # only when empty (other rigs may use it)

if [[ ${HC_RIG_CLEAN:-0} == 1 && $R == /?*/?* ]]; then rm -rf "$R"; fi
exit 0
