#!/usr/bin/env bash
# hvd-entrypoint: the hvdrun image's entrypoint (installed as
# /usr/local/bin/hvd-entrypoint by scripts/install.sh). One script, three roles:
#
#   hvd-entrypoint worker              sshd for hvdrun (key-only), until it dies
#   hvd-entrypoint driver [CMD...]     wait for every worker's sshd, then run
#                                      CMD (exit with its status) or stay up
#                                      for `kubectl exec`
#   hvd-entrypoint ready               the worker's readiness probe: 0 when its
#                                      sshd (HVD_SSHD_DIR/sshd.pid) runs and
#                                      listens on HVD_SSH_PORT (read from
#                                      /proc/net/tcp{,6}); opens no connection,
#                                      so sshd logs nothing
#   hvd-entrypoint prepare-image       image build step: remove host keys the
#                                      openssh-server package generated
#
# The role is the first argument, else $HVD_ROLE. Every path is an
# environment variable so that tests never touch the machine's own sshd
# configuration (conf/docker/README.md lists them all):
#
#   HVD_SSH_PORT            sshd port (worker) / port the driver probes and
#                           writes into ~/.ssh/config and known_hosts   [22]
#   HVD_SSH_SECRET_DIR      the mounted SSH secret            [/etc/hvdrun/ssh]
#       ssh-privatekey        the user key (driver: its identity; worker:
#                             authorized_keys is derived from it when there is
#                             no authorized_keys / ssh-publickey file)
#       ssh-publickey         optional: the user public key
#       authorized_keys       optional: used verbatim by workers
#       host-privatekey       optional: the release's sshd host key (worker);
#                             driver: trusted through a generated known_hosts
#       host-publickey        optional: driver uses it instead of deriving it
#   HVD_SSHD_DIR            worker: sshd_config, host key, authorized_keys,
#                           pid file; an emptyDir in the chart, so a host key
#                           generated here lives as long as the pod [/run/hvdrun/sshd]
#   HVD_SSHD                sshd binary                        [/usr/sbin/sshd]
#   HVD_SSHD_PRIVSEP_DIR    sshd's privilege separation dir    [/run/sshd]
#   HVD_SSHD_LISTEN_ADDRESS worker: address to listen on        [all]
#   HVD_DRAIN_TIMEOUT       worker: after SIGTERM, seconds to wait for the
#                           container's other processes (hvdrun's SSH
#                           sessions and their workers) to end, when this
#                           script is the container's init (PID 1): an
#                           elastic hvdrun lets the worker of a terminating
#                           pod train on to its next commit and leave (the
#                           chart sets it from worker.drainSeconds); 0 = do
#                           not wait                            [0]
#   HVD_SSH_HOME            driver: home whose .ssh/ gets the key, config
#                           and known_hosts                     [$HOME]
#   HVD_HOSTFILE            driver: hosts to wait for (horovodrun hostfile:
#                           `host slots=N` lines)               [/etc/hvdrun/generated/hostfile]
#   HVD_KNOWN_HOSTS_NAMES   driver: optional file with more host names (one a
#                           line) to trust the host key for (elastic growth)
#   HVD_WORKER_SERVICE, HVD_NAMESPACE, HVD_CLUSTER_DOMAIN [cluster.local]
#                           driver: the headless service, for the
#                           <pod>.<svc>.<ns>.svc[.<domain>] names and the
#                           Host patterns of ~/.ssh/config
#   HVD_WAIT_TIMEOUT        driver: seconds to wait for all workers; 0 = do
#                           not wait                            [600]
#   HVD_WAIT_LOG_INTERVAL   driver: seconds between "waiting for" lines [10]
#   HVD_PROBE_TIMEOUT       driver: seconds per sshd probe       [3]
#   HVD_DRIVER_COMMAND      driver: command run with `bash -c` when no CMD
#                           arguments are given
#   HVD_IMAGE_ROOT          prepare-image: root of the image     [/]
#
# Exit codes: 0 success (and SIGTERM/SIGINT of a worker or idle driver);
# 2 usage or configuration error (unknown role, missing key, bad number,
# sshd rejects its configuration); 3 a worker's sshd did not start or died,
# or the driver's workers did not all answer within HVD_WAIT_TIMEOUT;
# 143/130 SIGTERM/SIGINT while the driver waits; otherwise the driver
# command's own status.
set -uo pipefail
# Keys, configs and their temporary copies are private from birth; sshd (so
# every login session) and the driver command get the original umask back.
ORIG_UMASK=$(umask)
umask 077

PROG=hvd-entrypoint
MARK=hvd-entrypoint  # marks the files/lines this script owns

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {  # die CODE MESSAGE
  local code=$1
  shift
  printf '%s: error: %s\n' "$PROG" "$*" >&2
  exit "$code"
}

SSH_PORT=${HVD_SSH_PORT:-22}
SECRET_DIR=${HVD_SSH_SECRET_DIR:-/etc/hvdrun/ssh}
SSHD_DIR=${HVD_SSHD_DIR:-/run/hvdrun/sshd}
SSHD=${HVD_SSHD:-/usr/sbin/sshd}
PRIVSEP_DIR=${HVD_SSHD_PRIVSEP_DIR:-/run/sshd}
# sshd re-executes itself per connection and needs absolute paths.
SECRET_DIR=$(realpath -m -- "$SECRET_DIR")
SSHD_DIR=$(realpath -m -- "$SSHD_DIR")

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

check_port() {
  if ! is_uint "$SSH_PORT" || ((SSH_PORT < 1 || SSH_PORT > 65535)); then
    die 2 "HVD_SSH_PORT='$SSH_PORT' is not a port number (1-65535)"
  fi
}

# The public key of a private key file (ssh-keygen insists on 0600 files, and
# a mounted secret may be 0644 or a symlink, so it works on a private copy).
public_of() {  # public_of PRIVATE_KEY_FILE
  local tmp out
  tmp=$(mktemp) || return 1
  cat -- "$1" >"$tmp" && chmod 600 "$tmp" && out=$(ssh-keygen -y -f "$tmp" 2>&1)
  local rc=$?
  rm -f -- "$tmp"
  if ((rc != 0)); then
    printf '%s\n' "$out" >&2
    return 1
  fi
  printf '%s\n' "$out"
}

# ---------------------------------------------------------------- worker ---
worker() {
  check_port
  local drain=${HVD_DRAIN_TIMEOUT:-0}
  is_uint "$drain" || die 2 "HVD_DRAIN_TIMEOUT='$drain' is not a whole number of seconds"
  [ -x "$SSHD" ] || die 2 "sshd not found at $SSHD (HVD_SSHD); is openssh-server installed?"
  mkdir -p -- "$SSHD_DIR" "$PRIVSEP_DIR" || die 2 "cannot create $SSHD_DIR or $PRIVSEP_DIR"
  chmod 700 "$SSHD_DIR"
  chmod 755 "$PRIVSEP_DIR" 2>/dev/null

  # authorized_keys: the secret's authorized_keys, else ssh-publickey, else
  # derived from ssh-privatekey. Written fresh at every start.
  local ak="$SSHD_DIR/authorized_keys" source
  if [ -s "$SECRET_DIR/authorized_keys" ]; then
    source="$SECRET_DIR/authorized_keys"
    cat -- "$source" >"$ak.new" || die 2 "cannot read $source"
  elif [ -s "$SECRET_DIR/ssh-publickey" ]; then
    source="$SECRET_DIR/ssh-publickey"
    cat -- "$source" >"$ak.new" || die 2 "cannot read $source"
  elif [ -s "$SECRET_DIR/ssh-privatekey" ]; then
    source="$SECRET_DIR/ssh-privatekey (public part)"
    public_of "$SECRET_DIR/ssh-privatekey" >"$ak.new" ||
      die 2 "$SECRET_DIR/ssh-privatekey is not a usable private key (see the line above)"
  else
    die 2 "no public key to authorize: $SECRET_DIR holds none of authorized_keys, ssh-publickey, ssh-privatekey (HVD_SSH_SECRET_DIR; mount the SSH secret there)"
  fi
  grep -q '^[[:space:]]*[a-z]' "$ak.new" || die 2 "$source holds no key"
  chmod 600 "$ak.new" && mv -f -- "$ak.new" "$ak"

  # Host key: the release's (from the secret) or one generated once per pod
  # (kept in HVD_SSHD_DIR, an emptyDir that survives container restarts).
  local hk="$SSHD_DIR/ssh_host_key" hk_from
  if [ -s "$SECRET_DIR/host-privatekey" ]; then
    cat -- "$SECRET_DIR/host-privatekey" >"$hk.new" && chmod 600 "$hk.new" && mv -f -- "$hk.new" "$hk" ||
      die 2 "cannot copy $SECRET_DIR/host-privatekey"
    public_of "$hk" >/dev/null || die 2 "$SECRET_DIR/host-privatekey is not a usable private key"
    hk_from="from $SECRET_DIR/host-privatekey"
  elif [ -s "$hk" ] && [ -s "$SSHD_DIR/.host_key_generated" ]; then
    hk_from="generated at this pod's first start"
  else
    rm -f -- "$hk" "$hk.pub"
    ssh-keygen -q -t ed25519 -N '' -C "$(hostname 2>/dev/null || echo worker)" -f "$hk" >/dev/null ||
      die 2 "ssh-keygen could not generate a host key in $SSHD_DIR"
    date -u +%FT%TZ >"$SSHD_DIR/.host_key_generated"
    hk_from="generated now (no host-privatekey in $SECRET_DIR)"
  fi
  local fingerprint
  fingerprint=$(public_of "$hk" | ssh-keygen -l -f - 2>/dev/null | awk '{print $2}')

  local cfg="$SSHD_DIR/sshd_config"
  {
    echo "# written by $MARK at every worker start; do not edit"
    echo "Port $SSH_PORT"
    [ -n "${HVD_SSHD_LISTEN_ADDRESS:-}" ] && echo "ListenAddress $HVD_SSHD_LISTEN_ADDRESS"
    echo "HostKey $hk"
    echo "PidFile $SSHD_DIR/sshd.pid"
    echo "AuthorizedKeysFile $ak"
    echo "PubkeyAuthentication yes"
    echo "PasswordAuthentication no"
    echo "KbdInteractiveAuthentication no"
    echo "HostbasedAuthentication no"
    echo "PermitEmptyPasswords no"
    echo "PermitRootLogin prohibit-password"
    echo "UsePAM no"
    echo "StrictModes yes"
    echo "PermitUserEnvironment no"
    echo "X11Forwarding no"
    echo "AllowTcpForwarding no"
    echo "AllowAgentForwarding no"
    echo "PermitTunnel no"
    # hvdrun opens one channel per worker on one connection per host.
    echo "MaxSessions 256"
    echo "MaxStartups 256:30:512"
    echo "ClientAliveInterval 5"
    echo "ClientAliveCountMax 3"
    echo "LogLevel INFO"
  } >"$cfg"
  local err
  err=$("$SSHD" -t -f "$cfg" 2>&1) || die 2 "sshd rejects its configuration $cfg: ${err//$'\n'/; }"

  local sshd_pid stopping=0
  (umask "$ORIG_UMASK" && exec "$SSHD" -D -e -f "$cfg") &
  sshd_pid=$!
  trap 'stopping=1; kill -TERM "$sshd_pid" 2>/dev/null' TERM INT HUP

  # Ready = sshd listens on the port (as `hvd-entrypoint ready`, the
  # readiness probe, sees it: no connection, so nothing in sshd's log).
  local deadline=$((SECONDS + 20))
  until listening "$SSH_PORT"; do
    if ! kill -0 "$sshd_pid" 2>/dev/null; then
      wait "$sshd_pid"
      die 3 "sshd exited with status $? before it answered on port $SSH_PORT (its log is above)"
    fi
    if ((SECONDS >= deadline)); then
      kill -KILL "$sshd_pid" 2>/dev/null
      die 3 "sshd (pid $sshd_pid) did not listen on port $SSH_PORT within 20 s"
    fi
    ((stopping)) && break
    sleep 0.1
  done
  ((stopping)) || log "worker ready: sshd (pid $sshd_pid) on port $SSH_PORT, key-only login with $source, host key ${fingerprint:-?} $hk_from"

  local status
  while :; do
    wait "$sshd_pid"
    status=$?
    kill -0 "$sshd_pid" 2>/dev/null || break  # a trap interrupted wait: sshd still runs
  done
  if ((stopping)); then
    log "worker stopping: sshd ended after SIGTERM"
    drain_sessions "$drain"
    exit 0
  fi
  die 3 "sshd (pid $sshd_pid) died with status $status; the worker ends so that Kubernetes restarts it"
}

# count_others: OTHERS = the live processes of the container besides this
# script (zombies not counted). Builtins only: counting forks nothing.
count_others() {
  local d pid line st
  OTHERS=0
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" = "$$" ] && continue
    read -r line 2>/dev/null <"$d/stat" || continue
    st=${line##*) }
    [ "${st%% *}" = Z ] && continue
    OTHERS=$((OTHERS + 1))
  done
}

# drain_sessions SECONDS: after SIGTERM (sshd's listener is gone, its
# sessions are not), as the container's init, wait up to SECONDS for the
# container's other processes to end. The pod is terminating, so an elastic
# hvdrun no longer lists it and lets its worker train on to the next commit,
# where the worker leaves and hvdrun's session ends: deleting the pod or
# draining its node loses no training. Whatever still runs at the end goes
# with the container.
drain_sessions() {
  local limit=$1
  ((limit > 0)) || return 0
  if (($$ != 1)); then
    log "worker stopping: not the container's init (pid $$), so not waiting for sessions (HVD_DRAIN_TIMEOUT)"
    return 0
  fi
  count_others
  ((OTHERS > 0)) || return 0
  log "worker stopping: waiting up to $limit s (HVD_DRAIN_TIMEOUT) for $OTHERS process(es) of hvdrun's sessions; an elastic job lets its worker leave at the next commit"
  local deadline=$((SECONDS + limit))
  while ((SECONDS < deadline)); do
    sleep 0.2
    count_others
    if ((OTHERS == 0)); then
      log "worker stopping: its sessions ended"
      return 0
    fi
  done
  log "worker stopping: $OTHERS process(es) still running after HVD_DRAIN_TIMEOUT=$limit s; they end with the container"
}

# probe_ssh HOST PORT TIMEOUT: 0 when an SSH server answers with its banner.
# Prints the reason on stderr otherwise.
probe_ssh() {
  local out rc
  out=$(timeout "$3" bash -c '
    exec 3<>"/dev/tcp/$0/$1" || exit 10
    IFS= read -r -t "$2" line <&3 || exit 11
    [[ $line == SSH-* ]] || { echo "not an SSH server: ${line:0:40}"; exit 12; }' "$1" "$2" "$3" 2>&1)
  rc=$?
  ((rc == 0)) && return 0
  case $rc in
    124) out="no answer within $3 s" ;;
    11) out="connected but no SSH banner within $3 s" ;;
    *)
      out=$(printf '%s\n' "$out" | head -n 1)
      out=${out##*: }  # bash: line 2: /dev/tcp/h/22: Connection refused
      ;;
  esac
  printf '%s\n' "${out:-connection failed}" >&2
  return 1
}

# ---------------------------------------------------------------- driver ---
hostfile_hosts() {  # the first word of every non-comment line
  sed -e 's/#.*//' -- "$1" | awk 'NF { h = $1; if (h ~ /^[^:]+:[0-9]+$/) sub(/:[0-9]+$/, "", h); print h }'
}

known_name() {  # [host]:port unless port 22
  if [ "$SSH_PORT" = 22 ]; then printf '%s' "$1"; else printf '[%s]:%s' "$1" "$SSH_PORT"; fi
}

driver_ssh_setup() {
  local home
  home=$(realpath -m -- "${HVD_SSH_HOME:-${HOME:-/root}}")
  local dot="$home/.ssh"
  mkdir -p -- "$dot" || die 2 "cannot create $dot"
  chmod 700 "$dot"

  # Identity: named after its type so that hvdrun's and ssh's default key
  # search finds it even without ~/.ssh/config.
  local key="$SECRET_DIR/ssh-privatekey" pub type name
  [ -s "$key" ] || die 2 "no $key: the driver needs the SSH secret's private key (HVD_SSH_SECRET_DIR)"
  pub=$(public_of "$key") || die 2 "$key is not a usable private key (see the line above)"
  type=${pub%% *}
  case $type in
    ssh-ed25519) name=id_ed25519 ;;
    ecdsa-sha2-*) name=id_ecdsa ;;
    ssh-rsa) name=id_rsa ;;
    *) name=id_hvd ;;
  esac
  cat -- "$key" >"$dot/$name.new" && chmod 600 "$dot/$name.new" && mv -f -- "$dot/$name.new" "$dot/$name" ||
    die 2 "cannot write $dot/$name"
  printf '%s\n' "$pub" >"$dot/$name.pub"
  chmod 644 "$dot/$name.pub"

  # ~/.ssh/config: Port and IdentityFile only (host keys are checked).
  local svc=${HVD_WORKER_SERVICE:-} ns=${HVD_NAMESPACE:-} domain=${HVD_CLUSTER_DOMAIN:-cluster.local}
  local patterns="*"
  if [ -n "$svc" ]; then
    patterns="*.$svc"
    [ -n "$ns" ] && patterns="$patterns *.$svc.$ns.svc *.$svc.$ns.svc.$domain"
  fi
  local cfg="$dot/config"
  if [ -e "$cfg" ] && ! grep -q "written by $MARK" "$cfg"; then
    log "$cfg exists and was not written by $PROG: left unchanged (it should set Port $SSH_PORT and IdentityFile $dot/$name for the workers)"
  else
    {
      echo "# written by $MARK at every driver start; do not edit (mount your own config to replace it)"
      echo "Host $patterns"
      echo "    Port $SSH_PORT"
      echo "    IdentityFile $dot/$name"
    } >"$cfg.new" && chmod 600 "$cfg.new" && mv -f -- "$cfg.new" "$cfg"
  fi

  # known_hosts: the release's host public key for every worker name.
  local hostpub=""
  if [ -s "$SECRET_DIR/host-publickey" ]; then
    hostpub=$(awk 'NF >= 2 { print $1, $2; exit }' "$SECRET_DIR/host-publickey")
  elif [ -s "$SECRET_DIR/host-privatekey" ]; then
    hostpub=$(public_of "$SECRET_DIR/host-privatekey" | awk '{ print $1, $2; exit }') ||
      die 2 "$SECRET_DIR/host-privatekey is not a usable private key"
  fi
  local kh="$dot/known_hosts"
  if [ -z "$hostpub" ]; then
    log "no host-privatekey/host-publickey in $SECRET_DIR: workers generate their own host keys, $kh gets no entries (hvdrun accepts and records unknown hosts by default; --ssh-strict-host-key-checking would refuse them)"
    return 0
  fi
  local names=() h
  if [ -r "${HVD_HOSTFILE:-/etc/hvdrun/generated/hostfile}" ]; then
    mapfile -t names < <(hostfile_hosts "${HVD_HOSTFILE:-/etc/hvdrun/generated/hostfile}")
  fi
  if [ -n "${HVD_KNOWN_HOSTS_NAMES:-}" ] && [ -r "$HVD_KNOWN_HOSTS_NAMES" ]; then
    mapfile -t -O "${#names[@]}" names < <(hostfile_hosts "$HVD_KNOWN_HOSTS_NAMES")
  fi
  local all=()
  for h in "${names[@]}"; do
    all+=("$h")
    if [ -n "$svc" ] && [ -n "$ns" ] && [[ $h == *".$svc" ]]; then
      all+=("$h.$ns.svc" "$h.$ns.svc.$domain")
    fi
  done
  if [ -n "$svc" ]; then  # wildcard patterns (OpenSSH's ssh; libssh2 needs the names above)
    for h in $patterns; do all+=("$h"); done
  fi
  {
    [ -f "$kh" ] && grep -v " $MARK\$" "$kh"
    printf '%s\n' "${all[@]}" | awk '!seen[$0]++' | while IFS= read -r h; do
      printf '%s %s %s\n' "$(known_name "$h")" "$hostpub" "$MARK"
    done
  } >"$kh.new"
  chmod 600 "$kh.new" && mv -f -- "$kh.new" "$kh"
  log "trusting host key $(printf '%s\n' "$hostpub" | ssh-keygen -l -f - 2>/dev/null | awk '{print $2}') for ${#all[@]} worker names in $kh"
}

wait_for_workers() {
  local hostfile=${HVD_HOSTFILE:-/etc/hvdrun/generated/hostfile}
  local timeout=${HVD_WAIT_TIMEOUT:-600} interval=${HVD_WAIT_LOG_INTERVAL:-10} probe=${HVD_PROBE_TIMEOUT:-3}
  is_uint "$timeout" || die 2 "HVD_WAIT_TIMEOUT='$timeout' is not a number of seconds"
  is_uint "$interval" && ((interval > 0)) || die 2 "HVD_WAIT_LOG_INTERVAL='$interval' is not a positive number of seconds"
  is_uint "$probe" && ((probe > 0)) || die 2 "HVD_PROBE_TIMEOUT='$probe' is not a positive number of seconds"
  if ((timeout == 0)); then
    log "HVD_WAIT_TIMEOUT=0: not waiting for the workers"
    return 0
  fi
  [ -r "$hostfile" ] || die 2 "hostfile $hostfile (HVD_HOSTFILE) not readable; set HVD_WAIT_TIMEOUT=0 to start without waiting"
  local hosts=()
  mapfile -t hosts < <(hostfile_hosts "$hostfile")
  ((${#hosts[@]} > 0)) || die 2 "hostfile $hostfile lists no hosts"

  local tmp
  tmp=$(mktemp -d) || die 2 "mktemp failed"
  trap 'kill $(jobs -p) 2>/dev/null; rm -rf -- "$tmp"; exit 143' TERM
  trap 'kill $(jobs -p) 2>/dev/null; rm -rf -- "$tmp"; exit 130' INT
  local start=$SECONDS next_log=$((SECONDS + interval)) pending=("${hosts[@]}") still i
  log "waiting up to ${timeout} s for sshd on ${#hosts[@]} worker(s) (port $SSH_PORT)"
  while :; do
    local pids=()
    for i in "${!pending[@]}"; do
      probe_ssh "${pending[$i]}" "$SSH_PORT" "$probe" 2>"$tmp/$i" &
      pids[i]=$!
    done
    still=()
    local reasons=()
    for i in "${!pending[@]}"; do
      if ! wait "${pids[$i]}"; then
        still+=("${pending[$i]}")
        reasons+=("$(head -n 1 "$tmp/$i")")
      fi
    done
    if ((${#still[@]} == 0)); then
      rm -rf -- "$tmp"
      trap - TERM INT
      log "all ${#hosts[@]} worker(s) answer on ssh port $SSH_PORT after $((SECONDS - start)) s"
      return 0
    fi
    if ((SECONDS - start >= timeout)); then
      rm -rf -- "$tmp"
      die 3 "${#still[@]} of ${#hosts[@]} worker(s) did not answer on ssh port $SSH_PORT within $timeout s: ${still[*]} (check: kubectl get pods; kubectl logs <worker>)"
    fi
    if ((SECONDS >= next_log)); then
      for i in "${!still[@]}"; do
        log "waiting for ${still[$i]}:$SSH_PORT (${reasons[$i]:-no answer}) $((SECONDS - start)) s of $timeout s"
      done
      next_log=$((SECONDS + interval))
    fi
    pending=("${still[@]}")
    sleep 1
  done
}

driver() {
  check_port
  driver_ssh_setup
  wait_for_workers
  umask "$ORIG_UMASK"
  if (($# > 0)); then
    log "running: $*"
    exec "$@"
  fi
  if [ -n "${HVD_DRIVER_COMMAND:-}" ]; then
    log "running HVD_DRIVER_COMMAND with bash -c"
    exec bash -c "$HVD_DRIVER_COMMAND"
  fi
  log "driver ready: no command given; staying up for kubectl exec (hvdrun ... --hostfile ${HVD_HOSTFILE:-/etc/hvdrun/generated/hostfile})"
  trap 'log "driver stopping"; kill "$sleeper" 2>/dev/null; exit 0' TERM INT HUP
  sleep infinity &
  sleeper=$!
  wait "$sleeper"
  exit 0
}

# ------------------------------------------------------------------ ready ---
# The readiness probe of the chart's workers (an exec probe). A tcpSocket
# probe connects, and sshd logs two lines per connection (every 5 s: most of
# `kubectl logs` after a while); this reads process and socket tables only.
ready() {
  local pidfile="$SSHD_DIR/sshd.pid" pid comm
  [[ $SSH_PORT =~ ^[0-9]+$ ]] && ((SSH_PORT >= 1 && SSH_PORT <= 65535)) || die 2 "HVD_SSH_PORT '$SSH_PORT' is not a port number"
  pid=$(cat -- "$pidfile" 2>/dev/null) || { echo "not ready: no sshd pid file $pidfile" >&2; exit 1; }
  [[ $pid =~ ^[0-9]+$ ]] || { echo "not ready: $pidfile holds no pid" >&2; exit 1; }
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || { echo "not ready: sshd (pid $pid) is not running" >&2; exit 1; }
  [ "$comm" = sshd ] || { echo "not ready: pid $pid is '$comm', not sshd" >&2; exit 1; }
  listening "$SSH_PORT" && exit 0
  echo "not ready: nothing listens on port $SSH_PORT" >&2
  exit 1
}

# listening PORT: 0 when a TCP socket of this network namespace listens on
# PORT (state 0A in /proc/net/tcp or tcp6, any address). No connection.
listening() {
  local hexport f local_addr st
  hexport=$(printf ':%04X' "$1")
  for f in /proc/net/tcp /proc/net/tcp6; do
    [ -r "$f" ] || continue
    # fields: sl local_address rem_address st ...
    while read -r _ local_addr _ st _; do
      [ "$st" = 0A ] && [ "${local_addr: -5}" = "$hexport" ] && return 0
    done <"$f"
  done
  return 1
}

# ---------------------------------------------------------- prepare-image ---
prepare_image() {
  local root=${HVD_IMAGE_ROOT:-/}
  root=${root%/}
  local removed=0 f
  for f in "$root"/etc/ssh/ssh_host_*; do
    [ -e "$f" ] || continue
    rm -f -- "$f" && removed=$((removed + 1))
  done
  mkdir -p -- "$root/run/sshd" "$root/run/hvdrun" "$root/etc/hvdrun" || die 2 "cannot create directories under $root/"
  chmod 755 "$root/run/sshd" "$root/run/hvdrun" "$root/etc/hvdrun"
  log "prepare-image: removed $removed host key file(s) from ${root:-}/etc/ssh (each pod generates its own or uses the release's)"
}

role=${1:-${HVD_ROLE:-}}
(($# > 0)) && shift
case $role in
  worker)
    (($# == 0)) || die 2 "worker takes no arguments (got: $*)"
    worker
    ;;
  driver) driver "$@" ;;
  ready)
    (($# == 0)) || die 2 "ready takes no arguments (got: $*)"
    ready
    ;;
  prepare-image) prepare_image ;;
  -h | --help | help)
    sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    ;;
  "") die 2 "no role: pass worker, driver, ready or prepare-image (or set HVD_ROLE)" ;;
  *) die 2 "unknown role '$role': expected worker, driver, ready or prepare-image" ;;
esac
