#!/usr/bin/env bash
# GPU image only (conf/docker/Dockerfile --build-arg CUDA_VERSION=13-0):
# installs NVIDIA's CUDA toolkit and NCCL from NVIDIA's Debian 12 apt
# repository (cuda-keyring). Not run by the test suite: it needs NVIDIA's
# servers and a GPU-less CI cannot use the result (conf/docker/README.md).
#
#   conf/docker/install_cuda.sh 13-0
set -euo pipefail
if [ $# -ne 1 ] || ! [[ $1 =~ ^[0-9]+-[0-9]+$ ]]; then
  echo "usage: $0 CUDA_VERSION   (as NVIDIA's packages name it, e.g. 13-0)" >&2
  exit 2
fi
version=$1
. /etc/os-release
if [ "${ID:-}" != debian ] || [ "${VERSION_ID:-}" != 12 ]; then
  echo "install_cuda.sh: error: Debian 12 (bookworm) expected, found ${PRETTY_NAME:-unknown}" >&2
  exit 2
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends ca-certificates curl
tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT
curl -fsSL -o "$tmp/cuda-keyring.deb" \
  https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb
dpkg -i "$tmp/cuda-keyring.deb"
apt-get update -q
apt-get install -y -q --no-install-recommends "cuda-toolkit-$version" libnccl2 libnccl-dev
echo "install_cuda.sh: CUDA $version toolkit and NCCL installed ($(/usr/local/cuda/bin/nvcc --version | tail -n 1))"
