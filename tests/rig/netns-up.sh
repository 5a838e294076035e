#!/usr/bin/env bash
# netns-up.sh — N fake "hosts" for hc's integration tests: network namespaces on a
# private bridge, each with its own sshd (own host key), UTS hostname node<i>,
# /etc/hosts, eth0 MTU and a private tmpfs. Reachable as root with one generated key.
# Addresses exist only inside this machine (no default route in the namespaces):
#   bridge $HC_RIG_BRIDGE (root ns)  $HC_RIG_SUBNET.1/24          (default hctbr0, 10.98.0.1)
#   host i (netns <prefix><i>)       $HC_RIG_SUBNET.(10+i)/24 eth0 hostname node<i>, sshd :22
#
# Knobs (environment)
#   HC_RIG_DIR     /tmp/hc-test-rig/netns   state dir (wiped and recreated)
#   HC_RIG_HOSTS   4                        number of hosts
#   HC_RIG_PREFIX  hct                      namespaces <prefix><i>, host-side veths <prefix>v<i>
#   HC_RIG_SUBNET  10.98.0                  first three octets of a private /24
#   HC_RIG_BRIDGE  hctbr0                   bridge; the fabric bridge is the same name
#                                           ending in 1 instead of 0 (hctbr1)
#   HC_RIG_MTUS    "9000"                   eth0 MTU per host, space separated; the last
#                                           value repeats ("9000 9000 1500" -> node4 9000)
#   HC_RIG_IB_MTU  unset                    set: a second "fabric" network
#                                           ${SUBNET%.*}.(x+1).0/24 with an "ib0" in every
#                                           host at that MTU (a veth: link_type ether)
#   HC_RIG_TIMEOUT 20                       seconds to wait for each sshd
#
# Outputs in $HC_RIG_DIR
#   id_ed25519[.pub]     client key (root login on every host)
#   known_hosts          "node<i>,<addr> ssh-ed25519 ..." for strict host-key checking
#   ssh_config           Host node<i> and <subnet>.* -> user/key/known_hosts (ssh -F)
#   inventory.json       [{"name","addr","port","mtu","netns","ib_addr","ib_mtu"}...]
#   hosts.tsv            "name addr netns mtu" per line (for shell consumers: slurm-up.sh)
#   env.sh               exports HC_RIG_DIR, HC_RIG_SSH_CONFIG
#   node<i>/anchor.pid   pid of a `sleep infinity` holding the host's namespaces; enter
#                        the host with `nsenter -t $(cat anchor.pid) -n -u -m CMD`
#   node<i>/sshd.pid     the host's sshd (may be stopped/restarted by tests)
#   local/               host-local scratch: a *separate* tmpfs at this same path inside
#                        every host (like a node-local disk). Per-host stand-in tools go
#                        in local/bin; slurm-up.sh points TmpFS/PMIx at it. The root
#                        namespace only sees an empty directory.
#
# Idempotent: a previous rig with the same prefix/bridge is torn down first.
set -euo pipefail
trap 'echo "netns-up: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
R=${HC_RIG_DIR:-/tmp/hc-test-rig/netns}
N=${HC_RIG_HOSTS:-4}
P=${HC_RIG_PREFIX:-hct}
NET=${HC_RIG_SUBNET:-10.98.0}
BR=${HC_RIG_BRIDGE:-hctbr0}
BR1=${BR%0}1
FNET=${NET%.*}.$(( ${NET##*.} + 1 ))            # fabric network, e.g. 10.98.1
read -r -a MTUS <<<"${HC_RIG_MTUS:-9000}"
IB_MTU=${HC_RIG_IB_MTU:-}
WAIT=${HC_RIG_TIMEOUT:-20}
t0=$(date +%s%N)
die() { echo "netns-up: $*" >&2; exit 2; }

# ---- sanity checks (cheap, before touching anything) ---------------------------------
[[ $(id -u) == 0 ]] || die "must run as root"
[[ $R == /?*/?* ]] || die "HC_RIG_DIR=$R: want an absolute path at least two levels deep (it is wiped)"
[[ $N =~ ^[0-9]+$ ]] && (( N >= 1 && N <= 200 )) || die "HC_RIG_HOSTS=$N: want 1..200"
# interface names are limited to 15 characters: <prefix>v<i>
[[ $P =~ ^[a-z][a-z0-9]{0,9}$ ]] || die "HC_RIG_PREFIX=$P: want [a-z][a-z0-9]{0,9}"
[[ $NET =~ ^(10\.[0-9]{1,3}|172\.(1[6-9]|2[0-9]|3[01])|192\.168)\.[0-9]{1,3}$ ]] \
  || die "HC_RIG_SUBNET=$NET: want the first three octets of a private /24, e.g. 10.98.0"
for m in "${MTUS[@]}" $IB_MTU; do [[ $m =~ ^[0-9]+$ ]] || die "bad MTU '$m'"; done
for b in ip nsenter unshare setsid findmnt ssh-keygen /usr/sbin/sshd; do
  command -v "$b" >/dev/null || die "$b not found (run tests/rig/install.sh)"
done

# ---- idempotency: remove our previous rig (only our prefix / bridge) ----------------
HC_RIG_DIR=$R HC_RIG_PREFIX=$P HC_RIG_BRIDGE=$BR "$HERE/netns-down.sh" >/dev/null 2>&1 || true
# refuse to overlap with somebody else's addresses (another rig, a real network)
for net in "$NET" ${IB_MTU:+"$FNET"}; do
  used=$(ip -4 -o addr show to "$net.0/24" | awk '{print $2}' | sort -u | tr '\n' ' ')
  [[ -z $used ]] || die "subnet $net.0/24 already in use on: $used(set HC_RIG_SUBNET)"
done
for b in "$BR" ${IB_MTU:+"$BR1"}; do
  ! ip link show "$b" >/dev/null 2>&1 || die "bridge $b exists and is not ours to reuse"
done

rm -rf "$R"; mkdir -p "$R/local"; chmod 755 "$R"
mkdir -p /run/sshd   # sshd's compiled-in privilege-separation dir (empty, root-owned)
ssh-keygen -q -t ed25519 -N '' -C hc-test-rig-client -f "$R/id_ed25519"

ip link add "$BR" type bridge
ip link set "$BR" mtu 9000 2>/dev/null || true
ip addr add "$NET.1/24" dev "$BR"
ip link set "$BR" up
if [[ -n $IB_MTU ]]; then
  ip link add "$BR1" type bridge
  ip link set "$BR1" mtu 65520 2>/dev/null || true
  ip addr add "$FNET.1/24" dev "$BR1"
  ip link set "$BR1" up
fi

# /etc/hosts per host: `ip netns exec NS` bind-mounts /etc/netns/NS/hosts over
# /etc/hosts in the mount namespace it creates, so the hosts resolve each other (and
# rig-head = the bridge address) without touching the machine's /etc/hosts.
hosts="127.0.0.1 localhost"$'\n'"$NET.1 rig-head"
for i in $(seq 1 "$N"); do hosts+=$'\n'"$NET.$((10 + i)) node$i"; done

# `ip netns exec` also mounts a fresh sysfs on /sys (so /sys/class/net shows the
# host's own interfaces), which hides /sys/fs/cgroup. slurmd refuses to start without
# it ("No filesystem mounted on /sys/fs/cgroup"), so every cgroup mount of the
# machine is replayed inside each host's mount namespace.
CG_SCRIPT=$(findmnt -rn -o TARGET,FSTYPE,OPTIONS -R /sys/fs/cgroup 2>/dev/null | while read -r t fs o; do
  case "$fs" in
    tmpfs)   echo "mkdir -p $t && mount -t tmpfs -o $o cgroup_root $t" ;;
    cgroup)  echo "mkdir -p $t && mount -t cgroup -o $o cgroup $t" ;;
    cgroup2) echo "mkdir -p $t && mount -t cgroup2 -o $o cgroup2 $t" ;;
  esac
done)

wait_file() { # file, seconds
  local end=$(( $(date +%s) + $2 ))
  until [[ -s $1 ]]; do (( $(date +%s) <= end )) || return 1; sleep 0.05; done
}

: > "$R/known_hosts"; : > "$R/ssh_config"; : > "$R/hosts.tsv"; inv="["
for i in $(seq 1 "$N"); do
  ns=$P$i; name=node$i; addr=$NET.$((10 + i))
  mtu=${MTUS[$((i - 1))]:-${MTUS[-1]}}
  h=$R/$name; mkdir -p "$h"
  ip netns add "$ns"
  mkdir -p "/etc/netns/$ns"; printf '%s\n' "$hosts" > "/etc/netns/$ns/hosts"
  ip link add "${P}v$i" type veth peer name eth0 netns "$ns"
  ip link set "${P}v$i" mtu 9000 master "$BR" up      # bridge side always jumbo-capable
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 mtu "$mtu"
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ib_json=""
  if [[ -n $IB_MTU ]]; then
    # second "fabric" network, interface named ib0 (a veth: link_type is ether, not
    # infiniband; the kernel has neither IPoIB nor the dummy driver)
    ip link add "${P}f$i" type veth peer name ib0 netns "$ns"
    ip link set "${P}f$i" mtu 65520 master "$BR1" up
    ip -n "$ns" link set ib0 mtu "$IB_MTU"
    ip -n "$ns" addr add "$FNET.$((10 + i))/24" dev ib0
    ip -n "$ns" link set ib0 up
    ib_json=",\"ib_addr\":\"$FNET.$((10 + i))\",\"ib_mtu\":$IB_MTU"
  fi

  # The anchor: a `sleep infinity` that owns the host's mount + UTS namespaces (its
  # network namespace is $ns). Everything else (sshd, slurmd, test commands) enters
  # the host through it, so killing or restarting sshd does not lose the host.
  # `ip netns exec` execs unshare which execs sh which execs sleep: $$ is the anchor.
  setsid -f ip netns exec "$ns" unshare --uts /bin/sh -c \
    "echo \$\$ > '$h/anchor.pid.tmp' && mv '$h/anchor.pid.tmp' '$h/anchor.pid' && hostname '$name' && exec sleep infinity" \
    </dev/null >/dev/null 2>"$h/anchor.log"
  wait_file "$h/anchor.pid" 5 || die "anchor of $name did not start: $(cat "$h/anchor.log")"
  apid=$(cat "$h/anchor.pid")
  [[ -n $CG_SCRIPT ]] && nsenter -t "$apid" -m /bin/sh -ec "$CG_SCRIPT"
  # host-local scratch: same path on every host, a private tmpfs in each
  nsenter -t "$apid" -m mount -t tmpfs -o size=256m,mode=1777 "hclocal-$name" "$R/local"
  nsenter -t "$apid" -m mkdir -p "$R/local/bin"

  ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$h/ssh_host_ed25519_key"
  cp "$R/id_ed25519.pub" "$h/authorized_keys"
  cat > "$h/sshd_config" <<EOF
Port 22
ListenAddress $addr
HostKey $h/ssh_host_ed25519_key
PidFile $h/sshd.pid
AuthorizedKeysFile $h/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# the keys live under /tmp (world-writable parent): StrictModes would reject them
StrictModes no
PrintMotd no
AcceptEnv LANG LC_* HC_*
# ssh sessions get the per-host stand-in tools first on PATH
SetEnv PATH=$R/local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
Subsystem sftp /usr/lib/openssh/sftp-server
LogLevel INFO
EOF
  /usr/sbin/sshd -t -f "$h/sshd_config"
  # sshd daemonises and writes $h/sshd.pid; stdio away from our caller's pipes
  nsenter -t "$apid" -n -u -m /usr/sbin/sshd -f "$h/sshd_config" -E "$h/sshd.log" \
    </dev/null >/dev/null 2>>"$h/sshd.log"
  wait_file "$h/sshd.pid" 5 || die "sshd of $name did not start: $(tail -n 5 "$h/sshd.log")"

  echo "$name,$addr $(cut -d' ' -f1,2 "$h/ssh_host_ed25519_key.pub")" >> "$R/known_hosts"
  cat >> "$R/ssh_config" <<EOF
Host $name
  HostName $addr
  User root
  IdentityFile $R/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $R/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
EOF
  printf '%s %s %s %s\n' "$name" "$addr" "$ns" "$mtu" >> "$R/hosts.tsv"
  [[ $i -gt 1 ]] && inv+=","
  inv+="{\"name\":\"$name\",\"addr\":\"$addr\",\"port\":22,\"mtu\":$mtu,\"netns\":\"$ns\"$ib_json}"
done
cat >> "$R/ssh_config" <<EOF
Host $NET.*
  User root
  IdentityFile $R/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $R/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
EOF
echo "$inv]" > "$R/inventory.json"
cat > "$R/env.sh" <<EOF
export HC_RIG_DIR=$R
export HC_RIG_SSH_CONFIG=$R/ssh_config
EOF

# wait until every sshd accepts TCP (bounded)
for i in $(seq 1 "$N"); do
  addr=$NET.$((10 + i)); end=$(( $(date +%s) + WAIT ))
  until timeout 1 bash -c "exec 3<>/dev/tcp/$addr/22" 2>/dev/null; do
    (( $(date +%s) <= end )) || { echo "netns-up: sshd on $addr not reachable" >&2; tail -n 5 "$R/node$i/sshd.log" >&2; exit 1; }
    sleep 0.05
  done
done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "netns-up: $N hosts up in ${ms} ms (ssh -F $R/ssh_config node1)"
