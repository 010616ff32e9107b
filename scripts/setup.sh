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
  openssh-server openssh-client iproute2 procps psmisc
  python3 python3-dev pybind11-dev python3-torch python3-numpy
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
