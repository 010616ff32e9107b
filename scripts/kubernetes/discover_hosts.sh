#!/usr/bin/env bash
# Host discovery for elastic hvdrun/horovodrun jobs in Kubernetes, through
# kubectl (hvdrun's built-in --kubernetes-selector needs no kubectl; this is
# the horovodrun-compatible form):
#
#   hvdrun -np 4 --min-np 2 --max-np 8 \
#     --host-discovery-script 'discover_hosts.sh -l app.kubernetes.io/instance=job -n ml' python3 train.py
#
# Prints one `<pod>.<service>:<slots>` line (or `<pod IP>:<slots>` with --ip)
# for every pod that matches the selector and is Running, Ready and not
# terminating (no deletionTimestamp), in natural sort order (w-2 before w-10).
# Nothing else goes to stdout.
#
# The pod rules (which pods count, their names and slots) are hvdrun's own:
# the script lists the pods with kubectl and hands the list to
# `hvdrun --kubernetes-pod-hosts`, the same code as the built-in
# --kubernetes-selector source (docs/kubernetes.md). hvdrun is found as
# --hvdrun PATH, else $HVDRUN, else hvdrun on PATH, else beside this script.
#
# Options:
#   -l, --selector SEL        label selector (required), e.g. app=hvd,role=worker
#   -n, --namespace NS        namespace (default: kubectl's: the kubeconfig
#                             context's, in a pod the pod's own)
#   --service NAME            the headless service of the DNS names (default:
#                             each pod's spec.subdomain, which a StatefulSet
#                             sets to its serviceName)
#   --ip                      print the pod IP instead of a DNS name
#   --slots N                 slots per pod when nothing below applies [1]
#   --slots-from-gpu          slots = the pod's nvidia.com/gpu limits (summed
#                             over its containers) when that is > 0
#   --slots-annotation KEY    slots = the value of this pod annotation when
#                             present (wins over --slots-from-gpu)
#   --kubectl PATH            kubectl binary [$KUBECTL, else kubectl on PATH]
#   --hvdrun PATH             hvdrun binary, which applies the pod rules
#                             [$HVDRUN, else hvdrun on PATH, else beside
#                             this script]
#   --kubeconfig FILE         passed to kubectl (default: $KUBECONFIG, else
#                             ~/.kube/config, else, in a pod, the pod's
#                             service account: see below)
#   --request-timeout DUR     passed to kubectl [10s]
#
# In a pod: with no --kubeconfig, no $KUBECONFIG and no ~/.kube/config, the
# script uses the pod's service account (KUBERNETES_SERVICE_HOST/PORT and
# the token, ca.crt and namespace in /var/run/secrets/kubernetes.io/
# serviceaccount, or $HVDRUN_KUBERNETES_SERVICEACCOUNT_DIR): it hands kubectl
# a kubeconfig naming that server, CA and token file. kubectl's own in-cluster
# fallback cannot be used: it is skipped as soon as any client-config flag
# (--request-timeout included) is given, and kubectl then calls
# http://localhost:8080. The kubeconfig is an unlinked file read through
# /dev/fd: nothing is left behind, the token never appears on a command line.
#
# Exit status: 0 success (also when no pod qualifies: empty output);
# 1 the API request failed (401, 403, TLS, connection refused, timeout...):
# kubectl's message is on stderr, and hvdrun keeps its last good host set;
# 2 usage error (bad option, kubectl or hvdrun missing, a pod without a DNS
# name).
set -uo pipefail

PROG=discover_hosts.sh
usage() {
  printf '%s: error: %s\n' "$PROG" "$1" >&2
  echo "usage: $PROG -l SELECTOR [-n NAMESPACE] [--service NAME | --ip] [--slots N] [--slots-from-gpu] [--slots-annotation KEY] [--kubectl PATH] [--hvdrun PATH] [--kubeconfig FILE] [--request-timeout DUR]" >&2
  exit 2
}

selector="" namespace="" service="" use_ip=0 slots=1 from_gpu=0 annotation=""
kubectl=${KUBECTL:-kubectl} hvdrun=${HVDRUN:-} kubeconfig="" request_timeout=10s
while (($# > 0)); do
  case $1 in
    -l | --selector) (($# >= 2)) || usage "$1 needs a value"; selector=$2; shift 2 ;;
    --selector=*) selector=${1#*=}; shift ;;
    -n | --namespace) (($# >= 2)) || usage "$1 needs a value"; namespace=$2; shift 2 ;;
    --namespace=*) namespace=${1#*=}; shift ;;
    --service) (($# >= 2)) || usage "$1 needs a value"; service=$2; shift 2 ;;
    --service=*) service=${1#*=}; shift ;;
    --ip) use_ip=1; shift ;;
    --slots) (($# >= 2)) || usage "$1 needs a value"; slots=$2; shift 2 ;;
    --slots=*) slots=${1#*=}; shift ;;
    --slots-from-gpu) from_gpu=1; shift ;;
    --slots-annotation) (($# >= 2)) || usage "$1 needs a value"; annotation=$2; shift 2 ;;
    --slots-annotation=*) annotation=${1#*=}; shift ;;
    --kubectl) (($# >= 2)) || usage "$1 needs a value"; kubectl=$2; shift 2 ;;
    --hvdrun) (($# >= 2)) || usage "$1 needs a value"; hvdrun=$2; shift 2 ;;
    --kubeconfig) (($# >= 2)) || usage "$1 needs a value"; kubeconfig=$2; shift 2 ;;
    --request-timeout) (($# >= 2)) || usage "$1 needs a value"; request_timeout=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
[ -n "$selector" ] || usage "-l/--selector is required (e.g. -l app.kubernetes.io/instance=myjob)"
[[ $slots =~ ^[1-9][0-9]*$ ]] || usage "--slots '$slots' is not a positive integer"
if [ -n "$annotation" ] && ! [[ $annotation =~ ^[A-Za-z0-9./_-]+$ ]]; then
  usage "--slots-annotation '$annotation' is not an annotation key"
fi
if [ -n "$service" ] && ! [[ $service =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]]; then
  usage "--service '$service' is not a service name"
fi
command -v "$kubectl" >/dev/null 2>&1 || usage "kubectl not found ('$kubectl'); install it or pass --kubectl PATH"
if [ -z "$hvdrun" ]; then
  hvdrun=$(command -v hvdrun 2>/dev/null) || hvdrun=$(dirname -- "$(readlink -f -- "$0")")/hvdrun
fi
command -v "$hvdrun" >/dev/null 2>&1 ||
  usage "hvdrun not found ('$hvdrun'); it applies the pod rules: install it or pass --hvdrun PATH"

# What hvdrun --kubernetes-pod-hosts needs of the options (pod_list_hosts.h).
rules=(--prog "$PROG" --slots "$slots")
((use_ip)) && rules+=(--ip)
[ -n "$service" ] && rules+=(--service "$service")
((from_gpu)) && rules+=(--slots-from-gpu)
[ -n "$annotation" ] && rules+=(--slots-annotation "$annotation")

# kubectl's stderr goes to an unlinked file kept open on fd 4: nothing is
# left behind even when hvdrun kills this script (its discovery timeout).
err=$(mktemp) || exit 1
exec 4<>"$err"
rm -f -- "$err"

# json_string TEXT: TEXT as a JSON string (a kubeconfig is YAML, JSON is YAML).
json_string() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$s"
}

# The in-cluster service account, when nothing else configures kubectl.
if [ -z "$kubeconfig" ] && [ -z "${KUBECONFIG:-}" ] && ! [ -f "${HOME:-/nonexistent}/.kube/config" ] &&
  [ -n "${KUBERNETES_SERVICE_HOST:-}" ] && [ -n "${KUBERNETES_SERVICE_PORT:-}" ]; then
  sa_dir=${HVDRUN_KUBERNETES_SERVICEACCOUNT_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}
  [[ $sa_dir == /* ]] || sa_dir=$PWD/$sa_dir
  if [ -r "$sa_dir/token" ]; then
    if ! [ -r "$sa_dir/ca.crt" ]; then
      printf '%s: in-cluster service account %s: no readable ca.crt beside the token: cannot verify the API server\n' \
        "$PROG" "$sa_dir" >&2
      exit 1
    fi
    api_host=$KUBERNETES_SERVICE_HOST
    [[ $api_host == *:* ]] && api_host="[$api_host]"  # IPv6
    if [ -z "$namespace" ] && [ -r "$sa_dir/namespace" ]; then
      namespace=$(tr -d '[:space:]' <"$sa_dir/namespace")
    fi
    cfg=$(mktemp) || exit 1
    exec 5<>"$cfg"
    rm -f -- "$cfg"
    printf '{"apiVersion":"v1","kind":"Config","current-context":"in-cluster",%s,%s,%s}\n' \
      "\"clusters\":[{\"name\":\"in-cluster\",\"cluster\":{\"server\":$(json_string "https://$api_host:$KUBERNETES_SERVICE_PORT"),\"certificate-authority\":$(json_string "$sa_dir/ca.crt")}}]" \
      "\"users\":[{\"name\":\"service-account\",\"user\":{\"tokenFile\":$(json_string "$sa_dir/token")}}]" \
      "\"contexts\":[{\"name\":\"in-cluster\",\"context\":{\"cluster\":\"in-cluster\",\"user\":\"service-account\"}}]" >&5
    kubeconfig=/dev/fd/5
  fi
fi

args=(get pods -l "$selector" -o json --request-timeout "$request_timeout")
[ -n "$namespace" ] && args+=(-n "$namespace")
[ -n "$kubeconfig" ] && args+=(--kubeconfig "$kubeconfig")

out=$("$kubectl" "${args[@]}" 2>&4)
rc=$?
if ((rc != 0)); then
  # kubectl's last line is its verdict (klog retry lines come before it).
  printf '%s: kubectl get pods -l %s failed (exit %d): %s\n' "$PROG" "$selector" "$rc" \
    "$(grep -v '^[[:space:]]*$' /dev/fd/4 | tail -n 1)" >&2
  exit 1
fi

# hvdrun prints the hosts (its warnings and errors on stderr, as $PROG's);
# nothing reaches stdout unless it succeeded.
hosts=$("$hvdrun" --kubernetes-pod-hosts "${rules[@]}" <<<"$out")
rc=$?
((rc == 0)) || exit $((rc == 2 ? 2 : 1))
[ -n "$hosts" ] || exit 0
printf '%s\n' "$hosts" | sort -V
