#!/usr/bin/env bash
# Builds the hvdrun image (conf/docker/Dockerfile) with podman and runc, as
# scripts/setup.sh installs and configures them, and prints the build time
# and the image's size.
#
#   scripts/build_image.sh [-t TAG] [--cuda VERSION] [--build-type TYPE] [--base IMAGE]
#
# Options:
#   -t, --tag TAG         the image's name [hvdrun:0.1.0]
#   --cuda VERSION        the GPU variant (CUDA_VERSION build argument, e.g. 13-0)
#   --build-type TYPE     CMAKE_BUILD_TYPE [Release]
#   --base IMAGE          the base image [debian:bookworm]
#   --jobs N              build parallelism inside the image [nproc]
#
# The base: an image of that name already in podman's store is used as is
# (the suite builds it once per machine). Otherwise, for debian:bookworm,
# podman tries to pull it when HVD_IMAGE_PULL=1; else (no registry reachable)
# it is made here: `debootstrap --variant=minbase bookworm` from the Debian
# mirror ($HVD_DEBIAN_MIRROR, default http://deb.debian.org/debian) with the
# official image's apt sources (bookworm, bookworm-updates, security), apt
# lists and caches removed, and `podman import`ed under that name.
#
# Layers are kept (podman build --layers): a rebuild after a source change
# reuses both stages' package layers (see the Dockerfile). The image this
# tag named before, when the build replaced it and nothing else uses it, is
# removed; nothing else in podman's store is touched.
#
# Exit status: 0 built; 1 the build failed; 2 usage error or podman/runc
# missing (run scripts/setup.sh).
set -euo pipefail

PROG=build_image.sh
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
usage() {
  printf '%s: error: %s\n' "$PROG" "$1" >&2
  echo "usage: $PROG [-t TAG] [--cuda VERSION] [--build-type TYPE] [--base IMAGE] [--jobs N]" >&2
  exit 2
}

tag=hvdrun:0.1.0 cuda="" build_type=Release base=debian:bookworm jobs=""
while (($# > 0)); do
  case $1 in
    -t | --tag) (($# >= 2)) || usage "$1 needs a value"; tag=$2; shift 2 ;;
    --cuda) (($# >= 2)) || usage "$1 needs a value"; cuda=$2; shift 2 ;;
    --build-type) (($# >= 2)) || usage "$1 needs a value"; build_type=$2; shift 2 ;;
    --base) (($# >= 2)) || usage "$1 needs a value"; base=$2; shift 2 ;;
    --jobs) (($# >= 2)) || usage "$1 needs a value"; jobs=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
command -v podman >/dev/null 2>&1 || usage "podman not found: run scripts/setup.sh"
command -v runc >/dev/null 2>&1 || usage "runc not found: run scripts/setup.sh"
[ -z "$jobs" ] || [[ $jobs =~ ^[1-9][0-9]*$ ]] || usage "--jobs '$jobs' is not a positive integer"

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }

# ---- the base image ----------------------------------------------------------
make_bookworm_base() {
  local mirror=${HVD_DEBIAN_MIRROR:-http://deb.debian.org/debian} rootfs
  command -v debootstrap >/dev/null 2>&1 || usage "debootstrap not found (needed for a local $base): run scripts/setup.sh"
  rootfs=$(mktemp -d /var/tmp/hvd-bookworm-rootfs.XXXXXX)
  # shellcheck disable=SC2064
  trap "rm -rf -- '$rootfs'" EXIT
  log "making $base with debootstrap from $mirror (no registry needed)"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >&2
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/* "$rootfs"/debootstrap
  tar -C "$rootfs" --numeric-owner -c . | podman import --change 'CMD ["bash"]' - "$base" >/dev/null
  rm -rf -- "$rootfs"
  trap - EXIT
}

if podman image exists "$base"; then
  log "base $base: already in podman's store"
elif [ "${HVD_IMAGE_PULL:-0}" = 1 ] && podman pull -q "$base" >/dev/null; then
  log "base $base: pulled"
elif [ "$base" = debian:bookworm ]; then
  make_bookworm_base
else
  usage "base image $base is not in podman's store (and only debian:bookworm can be made here)"
fi

# ---- the build -------------------------------------------------------------------
old_id=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
args=(build --runtime runc --layers --network host --pull=never
  --ignorefile "$ROOT/conf/docker/Dockerfile.dockerignore" -f "$ROOT/conf/docker/Dockerfile"
  --build-arg "BASE_IMAGE=$base" --build-arg "BUILD_TYPE=$build_type" -t "$tag")
[ -n "$cuda" ] && args+=(--build-arg "CUDA_VERSION=$cuda")
[ -n "$jobs" ] && args+=(--build-arg "BUILD_JOBS=$jobs")
start=$(date +%s)
log "podman ${args[*]} $ROOT"
if ! podman "${args[@]}" "$ROOT" >&2; then
  log "the build failed after $(($(date +%s) - start)) s"
  exit 1
fi
seconds=$(($(date +%s) - start))
new_id=$(podman image inspect --format '{{.Id}}' "$tag")
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
  podman rmi "$old_id" >/dev/null 2>&1 || true  # still a parent of something: kept
fi
size=$(podman image inspect --format '{{.Size}}' "$tag")
printf '%s: built %s in %d min %02d s; image size %s bytes (%d MB)\n' "$PROG" "$tag" $((seconds / 60)) \
  $((seconds % 60)) "$size" $((size / 1000000))
