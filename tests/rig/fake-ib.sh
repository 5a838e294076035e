#!/usr/bin/env bash
# fake-ib.sh — give one netns host (from netns-up.sh) fake InfiniBand HCAs that the
# REAL `ibstat`/`ibstatus` and hc's sysfs reader see in that host.
#
# How: a tree $HC_RIG_DIR/<node>/fake-sysclass/{infiniband,infiniband_mad} is laid
# over the host's /sys/class with a read-only overlayfs (lowerdir=<fake>:/sys/class),
# mounted in that host's own mount namespace (entered through its anchor pid). SSH
# sessions, nsenter'd commands and the host's slurmd (and so its Prolog/Epilog/
# HealthCheckProgram) see it; the machine's /sys and the other hosts are untouched.
# The kernel here has no CONFIG_INFINIBAND, so this is the only way to get HCAs.
#
# Edits to existing files in the fake tree show through live, e.g.
#   echo "1: DOWN" > $HC_RIG_DIR/node2/fake-sysclass/infiniband/mlx5_0/ports/1/state
#   echo 12 > $HC_RIG_DIR/node2/fake-sysclass/infiniband/mlx5_0/ports/1/counters/symbol_error
# but adding/removing HCAs needs a fresh mount (overlayfs pins the lower directory
# inodes it has looked up): re-run this script, which always rebuilds and remounts.
#
# usage: fake-ib.sh NODE SPEC...     SPEC = ca[:state[:phys[:rate]]]
#          state: Active|Down|Init|Armed                      (default Active)
#          phys:  LinkUp|Disabled|Polling|Sleep|LinkErrorRecovery (default LinkUp)
#          rate:  Gb/s: 10|25|40|56|100|200|400|800             (default 400)
#        fake-ib.sh NODE --clear        remove the overlay and the fake tree
# e.g.   fake-ib.sh node2 mlx5_0 mlx5_1:Down:Disabled mlx5_2:Active:LinkUp:200
# Knobs: HC_RIG_DIR (/tmp/hc-test-rig/netns)
#
# Not faked (they need /dev/infiniband/* kernel devices): perfquery and other MAD
# tools, ibv_devinfo / libibverbs, ib_write_bw. Use per-host stand-ins in
# $HC_RIG_DIR/local/bin for those.
set -euo pipefail
R=${HC_RIG_DIR:-/tmp/hc-test-rig/netns}
node=${1:?usage: fake-ib.sh NODE SPEC... | NODE --clear}; shift
[[ $node =~ ^[A-Za-z0-9_-]+$ ]] || { echo "fake-ib: bad node name $node" >&2; exit 2; }
pidf=$R/$node/anchor.pid
[[ -s $pidf ]] || { echo "fake-ib: no host $node in $R" >&2; exit 2; }
pid=$(cat "$pidf")
[[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */sleep ]] || { echo "fake-ib: host $node is not running (anchor $pid)" >&2; exit 2; }
F=$R/$node/fake-sysclass

in_host() { nsenter -t "$pid" -m "$@"; }
mounted() { in_host /bin/sh -c 'grep -q " /sys/class overlay " /proc/self/mounts'; }

if [[ ${1:-} == --clear ]]; then
  if mounted; then in_host umount /sys/class; fi
  rm -rf "$F"
  exit 0
fi
(( $# > 0 )) || { echo "fake-ib: no HCA given (use --clear to remove)" >&2; exit 2; }

state_of() { case "$1" in Active) echo "4: ACTIVE";; Down) echo "1: DOWN";; Init) echo "2: INIT";; Armed) echo "3: ARMED";; *) echo "$1";; esac; }
phys_of() { case "$1" in LinkUp) echo "5: LinkUp";; Disabled) echo "3: Disabled";; Polling) echo "2: Polling";; Sleep) echo "1: Sleep";; LinkErrorRecovery) echo "6: LinkErrorRecovery";; *) echo "$1";; esac; }
rate_of() { case "$1" in 10) echo "10 Gb/sec (4X SDR)";; 25) echo "25 Gb/sec (1X EDR)";; 40) echo "40 Gb/sec (4X QDR)";; 56) echo "56 Gb/sec (4X FDR)";; 100) echo "100 Gb/sec (4X EDR)";; 200) echo "200 Gb/sec (4X HDR)";; 400) echo "400 Gb/sec (4X NDR)";; 800) echo "800 Gb/sec (4X XDR)";; *) echo "$1 Gb/sec";; esac; }

# rebuild and remount (see the header: a rebuilt tree is only seen after a new mount)
if mounted; then in_host umount /sys/class; fi
rm -rf "$F"; mkdir -p "$F/infiniband_mad" "$F/infiniband"
echo 5 > "$F/infiniband_mad/abi_version"
n=0
for spec in "$@"; do
  IFS=: read -r ca st ph rt <<<"$spec"
  [[ $ca =~ ^[A-Za-z0-9_]+$ ]] || { echo "fake-ib: bad HCA name '$ca'" >&2; exit 2; }
  n=$((n + 1)); guid=$(printf 'b8ce:f603:00a1:%04x' "$n")
  d=$F/infiniband/$ca; p=$d/ports/1
  # ibstat needs pkeys/ ("stat of IB device failed" without it) and gids/
  mkdir -p "$p/gids" "$p/pkeys" "$p/counters"
  echo "1: CA" > "$d/node_type"; echo 28.39.1002 > "$d/fw_ver"; echo 0 > "$d/hw_rev"
  echo MT4129 > "$d/hca_type"; echo MT_0000000838 > "$d/board_id"
  echo "$guid" > "$d/node_guid"; echo "$guid" > "$d/sys_image_guid"
  state_of "${st:-Active}" > "$p/state"; phys_of "${ph:-LinkUp}" > "$p/phys_state"
  rate_of "${rt:-400}" > "$p/rate"
  printf '0x%x\n' $((16 + n)) > "$p/lid"; echo 0 > "$p/lid_mask_count"
  echo 0x1 > "$p/sm_lid"; echo 0 > "$p/sm_sl"; echo 0xa751e848 > "$p/cap_mask"
  echo InfiniBand > "$p/link_layer"; echo "fe80:0000:0000:0000:$guid" > "$p/gids/0"
  echo 0xffff > "$p/pkeys/0"
  for c in symbol_error link_error_recovery link_downed port_rcv_errors \
           port_rcv_remote_physical_errors port_xmit_discards local_link_integrity_errors \
           excessive_buffer_overrun_errors port_xmit_data port_rcv_data; do
    echo 0 > "$p/counters/$c"
  done
done
in_host mount -t overlay hc-fake-ib -o "lowerdir=$F:/sys/class" /sys/class
echo "fake-ib: $node has $(ls "$F/infiniband" | tr '\n' ' ')"
