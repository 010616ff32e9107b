#!/bin/sh
# The container entrypoint of an OCI Data Science Horovod job run with hvdrun
# (conf/oci/README.md, docs/platforms.md#oci-data-science). Every run of the
# job starts the same image; OCI__MODE says which one this is:
#
#   WORKER  starts sshd on WORKER_PORT with the job's key (the MAIN starts the
#           ranks of this machine through it), then runs hvdrun, which
#           registers this machine in the shared directory and exits with the
#           job's status when the MAIN's job ends;
#   MAIN    runs hvdrun, which runs the elastic job over the registered
#           workers and itself (the entry script is OCI__ENTRY_SCRIPT).
#
# Arguments are passed to hvdrun (flags, or a command instead of the entry
# script). Paths are variables so that tests never touch the machine's own
# sshd configuration:
#
#   OCI_SSH_DIR           the job's key pair, baked into the image as ADS's
#                         images do                       [/etc/hvdrun/ssh]
#     id_ed25519            the private key: the MAIN's identity (-i)
#     id_ed25519.pub        its public key (authorized on the workers when
#                           there is no authorized_keys)
#     authorized_keys       optional: used verbatim by the workers' sshd
#     ssh_host_ed25519_key  optional: the workers' sshd host key (else one is
#                           generated in OCI_SSHD_DIR at every start)
#   OCI_SSHD_DIR          the worker sshd's files (host key, authorized
#                         keys, pid file, log)          [/run/hvdrun-oci]
#   HVD_SSHD              sshd                            [/usr/sbin/sshd]
#   HVD_SSHD_PRIVSEP_DIR  sshd's privilege separation directory [/run/sshd]
#   HVDRUN                hvdrun                          [hvdrun]
#
# Exit codes: hvdrun's (the job's status; 6 a WORKER that saw no MAIN within
# START_TIMEOUT or lost it); 2 a missing key, a bad WORKER_PORT or an sshd that
# refuses its configuration.
set -eu

SSH_DIR=${OCI_SSH_DIR:-/etc/hvdrun/ssh}
SSHD_DIR=${OCI_SSHD_DIR:-/run/hvdrun-oci}
SSHD=${HVD_SSHD:-/usr/sbin/sshd}
PRIVSEP_DIR=${HVD_SSHD_PRIVSEP_DIR:-/run/sshd}
HVDRUN=${HVDRUN:-hvdrun}

die() {
  printf 'oci-entrypoint: error: %s\n' "$*" >&2
  exit 2
}

[ -r "$SSH_DIR/id_ed25519" ] || die "no job key at $SSH_DIR/id_ed25519 (OCI_SSH_DIR)"

if [ "${OCI__MODE:-}" = WORKER ]; then
  port=${WORKER_PORT:-22}
  case $port in '' | *[!0-9]*) die "WORKER_PORT='$port' is not a port number" ;; esac
  if [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then die "WORKER_PORT='$port' is not a port number (1-65535)"; fi
  [ -x "$SSHD" ] || die "sshd not found at $SSHD (HVD_SSHD); install openssh-server"
  umask 077
  mkdir -p "$SSHD_DIR" "$PRIVSEP_DIR"
  chmod 755 "$PRIVSEP_DIR" 2>/dev/null || true
  if [ -s "$SSH_DIR/authorized_keys" ]; then
    cat "$SSH_DIR/authorized_keys" >"$SSHD_DIR/authorized_keys"
  elif [ -s "$SSH_DIR/id_ed25519.pub" ]; then
    cat "$SSH_DIR/id_ed25519.pub" >"$SSHD_DIR/authorized_keys"
  else
    die "no $SSH_DIR/authorized_keys or $SSH_DIR/id_ed25519.pub to authorize the MAIN's key"
  fi
  if [ -s "$SSH_DIR/ssh_host_ed25519_key" ]; then
    cat "$SSH_DIR/ssh_host_ed25519_key" >"$SSHD_DIR/host_key"
  elif [ ! -s "$SSHD_DIR/host_key" ]; then
    ssh-keygen -q -t ed25519 -N '' -C oci-worker -f "$SSHD_DIR/host_key" || die "cannot make a host key"
  fi
  # No system sshd_config (-f /dev/null): key logins only, on WORKER_PORT.
  "$SSHD" -f /dev/null -p "$port" -h "$SSHD_DIR/host_key" -E "$SSHD_DIR/sshd.log" \
    -o "AuthorizedKeysFile=$SSHD_DIR/authorized_keys" -o "PidFile=$SSHD_DIR/sshd.pid" \
    -o PermitRootLogin=prohibit-password -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no \
    -o StrictModes=no -o MaxStartups=100:30:200 -o MaxSessions=64 -o ClientAliveInterval=5 \
    || die "sshd refused its configuration (see $SSHD_DIR/sshd.log)"
  umask 022
fi

exec "$HVDRUN" --hosts-from oci -i "$SSH_DIR/id_ed25519" "$@"
