#!/bin/sh
# hvd-vertex-entrypoint: a Vertex AI custom training container's entrypoint
# for hvdrun (conf/vertex/README.md). Every machine of the job runs it with
# the same arguments, which are hvdrun's:
#
#   hvd-vertex-entrypoint -np 16 python3 train.py --epochs 10
#
# 1. Stage in (every machine): when STAGE_GCS_PATH is set,
#      gsutil -m cp -r "$STAGE_GCS_PATH" "${STAGING_DIR:-/input}"
# 2. Run hvdrun "$@" (it reads CLUSTER_SPEC itself: docs/platforms.md#vertex-ai).
# 3. Stage out (the leader only, only when hvdrun exited 0): when
#    GCS_OUTPUT_PATH is set,
#      gsutil -m cp -r "${OUTPUT_DIR:-/output}" "$GCS_OUTPUT_PATH"
#    The leader is the machine hvdrun's own dry run says launches the job
#    (workerpool0); reduction servers, evaluators and workers upload nothing.
#
# Variables: STAGE_GCS_PATH, STAGING_DIR [/input], GCS_OUTPUT_PATH,
# OUTPUT_DIR [/output], HVDRUN (the hvdrun to run) [hvdrun].
#
# Exit status: hvdrun's; 2 when a GCS path is set but gsutil is not on PATH
# (nothing is run); gsutil's own status when a copy fails (stage-in: hvdrun
# is not run). SIGTERM/SIGINT (Vertex's preemption) go to hvdrun.
# POSIX sh (dash, busybox): `sh entrypoint.sh` works as well as running it.
set -u

HVDRUN=${HVDRUN:-hvdrun}
STAGING_DIR=${STAGING_DIR:-/input}
OUTPUT_DIR=${OUTPUT_DIR:-/output}

say() { echo "hvd-vertex-entrypoint: $*" >&2; }

# gsutil is needed when either path is set: say so before hours of training.
for var in STAGE_GCS_PATH GCS_OUTPUT_PATH; do
  eval "value=\${$var:-}"
  if [ -n "$value" ] && ! command -v gsutil >/dev/null 2>&1; then
    say "error: $var is set ($value) but gsutil is not on PATH: install the Google Cloud SDK in the image or unset $var"
    exit 2
  fi
done

if [ -n "${STAGE_GCS_PATH:-}" ]; then
  mkdir -p -- "$STAGING_DIR" || exit $?
  say "staging $STAGE_GCS_PATH into $STAGING_DIR"
  gsutil -m cp -r "$STAGE_GCS_PATH" "$STAGING_DIR"
  status=$?
  if [ "$status" -ne 0 ]; then
    say "error: gsutil -m cp -r $STAGE_GCS_PATH $STAGING_DIR exited $status; the job is not started"
    exit "$status"
  fi
fi

# hvdrun in the background so that Vertex's SIGTERM reaches it. The traps
# come first: a signal between the start and the traps would kill this
# script and leave hvdrun running; one that comes before hvdrun exists is
# passed on as soon as it does.
child=
pending=
trap 'pending=TERM; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null' TERM
trap 'pending=INT; [ -n "$child" ] && kill -INT "$child" 2>/dev/null' INT
"$HVDRUN" "$@" &
child=$!
[ -n "$pending" ] && kill -"$pending" "$child" 2>/dev/null
while :; do
  wait "$child"
  status=$?
  kill -0 "$child" 2>/dev/null || break  # a trapped signal interrupted wait: wait again
done
trap - TERM INT

if [ "$status" -eq 0 ] && [ -n "${GCS_OUTPUT_PATH:-}" ]; then
  # The leader: hvdrun's dry run on this machine says it launches the job.
  if "$HVDRUN" --dry-run=json -np 1 true 2>/dev/null | grep -q '"launches_here": false'; then
    say "not the leader: $OUTPUT_DIR is not uploaded from this machine"
  else
    say "uploading $OUTPUT_DIR to $GCS_OUTPUT_PATH"
    gsutil -m cp -r "$OUTPUT_DIR" "$GCS_OUTPUT_PATH"
    up=$?
    if [ "$up" -ne 0 ]; then
      say "error: gsutil -m cp -r $OUTPUT_DIR $GCS_OUTPUT_PATH exited $up"
      exit "$up"
    fi
  fi
fi
exit "$status"
