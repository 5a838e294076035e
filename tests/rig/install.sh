#!/usr/bin/env bash
# install.sh — install everything the hc integration-test rig (tests/rig/) and the
# `rig`-marked tests need. Idempotent and quiet: prints one summary line on success,
# the failing command's output on failure. Run as root on Debian 12.
#
# What it installs
#   Debian packages (one `apt-get update`, only when something is missing):
#     slurm-wlm munge openssh-server iproute2 iputils-ping openmpi-bin libopenmpi-dev
#     infiniband-diags perftest rdma-core ibverbs-utils bc procps util-linux
#     clustershell pdsh prometheus-node-exporter chromium (the Prometheus scrape and the HTML report's screenshot tests)
#     pipx zsh fish (the `pipx install .` test; completion scripts run in real shells)
#   hc itself, editable with its test, lint and bandwidth extras, into the checkout's .venv
#   (bin/install --dev), unless RIG_PIP names another interpreter's pip
#   Python packages (into the interpreter behind $RIG_PIP), at constraints.txt's versions:
#     paramiko py-spy nvidia-ml-py, and torch==2.13.0
#
# Knobs
#   RIG_PIP            pip command to use (default: the checkout's .venv, made by bin/install --dev)
#   RIG_INSTALL_TORCH  1 (default) | 0: skip torch. torch is always pinned to 2.13.0: the
#                      CPU wheel lies in /opt/wheels and pip's config (find-links) finds it;
#                      never let pip resolve another (multi-GB CUDA) version.
#   RIG_INSTALL_APT    1 (default) | 0: skip the Debian packages (e.g. inside a venv-only job)
set -euo pipefail
t0=$SECONDS
read -r -a PIP <<<"${RIG_PIP:-python3 -m pip}"  # replaced by the .venv below unless set
log=$(mktemp /tmp/hc-rig-install.XXXXXX.log)
trap 'rm -f "$log"' EXIT
die() { echo "install.sh: $*" >&2; [[ -s $log ]] && tail -n 40 "$log" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "must run as root (apt-get, and the rig itself needs root)"

# ---- Debian packages ---------------------------------------------------------------
DEB=(slurm-wlm munge openssh-server iproute2 iputils-ping openmpi-bin libopenmpi-dev
     infiniband-diags perftest rdma-core ibverbs-utils bc procps util-linux
     clustershell pdsh prometheus-node-exporter chromium pipx zsh fish)
apt_missing=()
if [[ ${RIG_INSTALL_APT:-1} == 1 ]]; then
  for p in "${DEB[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || apt_missing+=("$p")
  done
fi
if ((${#apt_missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  # Package postinst scripts would start the *system* sshd, munged, slurmctld and
  # slurmd. The rig runs its own private daemons and must not find system ones (a
  # stray slurmd on :6818 or munged on the default socket confuses tests), so unless
  # the machine already has a policy-rc.d, put a temporary "deny all" one in place.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f "$log" /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get update -q >"$log" 2>&1 || die "apt-get update failed"
  apt-get install -y -q --no-install-recommends "${apt_missing[@]}" >"$log" 2>&1 \
    || die "apt-get install ${apt_missing[*]} failed"
fi

# ---- Python packages ---------------------------------------------------------------
here=$(cd "$(dirname "$0")/../.." && pwd)
if [[ -z ${RIG_PIP:-} ]]; then
  if [[ ${RIG_INSTALL_TORCH:-1} == 1 ]]; then
    "$here/bin/install" --dev >"$log" 2>&1 || die "bin/install --dev failed"
  else
    "$here/bin/install" --dev --no-torch >"$log" 2>&1 || die "bin/install --dev --no-torch failed"
  fi
  PIP=("$here/.venv/bin/python" -m pip)
fi
"${PIP[@]}" --version >/dev/null 2>&1 || die "'${PIP[*]}' does not run (set RIG_PIP)"
want=(paramiko py-spy nvidia-ml-py)
[[ ${RIG_INSTALL_TORCH:-1} == 1 ]] && want+=(torch)
# one `pip show` for all of them (each pip start costs ~0.5 s); missing ones are
# simply absent from its output (it then exits 1, hence `|| true`)
shown=$("${PIP[@]}" show "${want[@]}" 2>/dev/null || true)
declare -A have=()
while IFS=': ' read -r k v; do
  case "$k" in
    Name) name=${v,,} ;;
    Version) have[$name]=$v ;;
  esac
done <<<"$shown"
pip_missing=()
for m in paramiko py-spy nvidia-ml-py; do
  [[ -n ${have[$m]:-} ]] || pip_missing+=("$m")
done
if [[ ${RIG_INSTALL_TORCH:-1} == 1 && ${have[torch]:-} != 2.13.0* ]]; then
  pip_missing+=("torch==2.13.0")       # exact pin, also replaces another version
fi
if ((${#pip_missing[@]})); then
  "${PIP[@]}" install -q -c "$here/constraints.txt" "${pip_missing[@]}" >"$log" 2>&1 \
    || die "pip install ${pip_missing[*]} failed"
fi

apt_msg="apt: ${#apt_missing[@]} installed"; ((${#apt_missing[@]})) || apt_msg="apt: ok"
pip_msg="pip: ${pip_missing[*]:-ok}"
echo "install.sh: ${apt_msg}; ${pip_msg}; done in $((SECONDS - t0))s"
