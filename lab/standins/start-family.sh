#!/usr/bin/env bash
# LAB STAND-IN for the dsv41 TP3 launcher (start.sh), variant "family": the shape of the community launcher
# family the fleet runs. Every switch is listed explicitly on both launch paths, as in "explicit", and:
#   - each worker is started through the checkout's own Python helper, scripts/remote.py (ssh with BatchMode,
#     the command string as one argument, its exit code forwarded), with the docker command wrapped in
#     `bash -lc '...'` (a login shell on the worker);
#   - the model and NCCL live under $HOME: MODEL_PATH defaults to $HOME/NewModels/DeepSeek-V4.1-Flash, and
#     $HOME/nccl-2.30.7 is mounted at /nccl (read-only) with LD_LIBRARY_PATH=/nccl on every rank; like every
#     other value of the workers' command string, $HOME is expanded on the head (the head user's);
#   - before anything starts, the image's architecture (docker image inspect) must be IMAGE_ARCH (arm64);
#   - ENGRAM_SHARE=nfs (default off) runs an NFS exporter container (dsv41-nfs, no rank settings) on the head
#     that exports NFS_EXPORT to NFS_CLIENTS before the workers start; stop and status include it then.
# Everything else (commands, container names, env keys and values, the other mounts, the Ready wait) is the
# "explicit" variant's, so the engine stand-in boots the same way.
# Lab hosts only; installed by the seeder at /home/<user>/dsv41-3x-spark/start.sh (the head's copy runs)
# with the .env beside it. Written in the shape of the real launchers (SPEC section 3, "Launcher and
# containers"): `set -a; source .env`, script-side defaults, an array builder by name for the head, an ssh
# command string with a heredoc of `-e NAME=$NAME \` lines for the workers, a dispatch `case` at the end.
#
#   ./start.sh [serve|start]  check the image's architecture, remove the old containers, start the NFS exporter
#                           (ENGRAM_SHARE=nfs), the workers (ranks 1..N in WORKER_HOSTS order), then the head;
#                           wait for "^Ready: API on port $PORT" in the head's `docker logs` (both streams):
#                           SERVE_TIMEOUT seconds (3600: 360 rounds of 10 s), one round every
#                           LAB_SERVE_POLL_SECONDS (lab knob)
#   ./start.sh stop         stop the head, then the workers (then the NFS exporter, ENGRAM_SHARE=nfs)
#   ./start.sh status       one line per rank: host rank container state engram=<docker inspect /engram source>
#                           (and one for the NFS exporter, ENGRAM_SHARE=nfs)
#   ./start.sh logs [rank]  docker logs of that rank's container (default 0 = head); extra args go to docker logs
#   ./start.sh build        docker build -t $IMAGE from $ROOT on the head and from $WORKER_DIR on every worker
#   ./start.sh pack|doctor|share|smoke: not available in the lab (exit 2)
#
# Lab knobs (not in real launchers): LAB_SERVE_POLL_SECONDS (environment or LAB_LAUNCHER_KNOBS, default
# /etc/dsv41-lab/launcher.env); START_SH_LIB_ONLY=1 makes `source start.sh` define everything and run nothing.
# Every figure this lab produces is lab output, not a fleet measurement.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ENV_FILE=${ENV_FILE:-$ROOT/.env}
if [[ ! -f "$ENV_FILE" ]]; then
  echo "[start.sh] $ENV_FILE missing: copying $ROOT/.env.example" >&2
  cp "$ROOT/.env.example" "$ENV_FILE"
fi
set -a
# shellcheck disable=SC1090
source "$ENV_FILE"
set +a

# ---------------------------------------------------------------- script-side defaults
MODEL_PATH="${MODEL_PATH:-$HOME/NewModels/DeepSeek-V4.1-Flash}"
MODELS_DIR="${MODELS_DIR:-$(dirname "$MODEL_PATH")}"
IMAGE="${IMAGE:-dsv41-sglang:tp3}"
HEAD_HOST="${HEAD_HOST:-$(hostname)}"
HEAD_IP="${HEAD_IP:-$HEAD_HOST}"
WORKER_HOSTS="${WORKER_HOSTS:-}"
WORKER_IPS="${WORKER_IPS:-$WORKER_HOSTS}"
WORKER_USER="${WORKER_USER:-$(id -un)}"
WORKER_DIR="${WORKER_DIR:-/home/$WORKER_USER/dsv41-3x-spark}"
ENGRAM_DIR="${ENGRAM_DIR:-$HOME/dsv41-engram}"
WORKER_ENGRAM_DIR="${WORKER_ENGRAM_DIR:-$WORKER_DIR/engram}"
SSH_IDENTITY="${SSH_IDENTITY:-}"
export SSH_IDENTITY  # read by scripts/remote.py
PORT="${API_PORT:-8888}"
DIST_PORT="${DIST_PORT:-20000}"
TP_SIZE="${TP_SIZE:-3}"
EP_SIZE="${EP_SIZE:-3}"
DSPARK_BLOCK_SIZE="${DSPARK_BLOCK_SIZE:-3}"
MAX_RUNNING_REQUESTS="${MAX_RUNNING_REQUESTS:-4}"
CHUNKED_PREFILL_SIZE="${CHUNKED_PREFILL_SIZE:-1024}"
MAX_TOTAL_TOKENS="${MAX_TOTAL_TOKENS:-}"
MEM_FRACTION_STATIC="${MEM_FRACTION_STATIC:-0.95}"
MOE_RUNNER_BACKEND="${MOE_RUNNER_BACKEND:-b12x}"
OFFLOAD_MODE="${OFFLOAD_MODE:-nvme}"
DSV41_CACHE_GIB="${DSV41_CACHE_GIB:-4}"
DSV41_CACHE_WAYS="${DSV41_CACHE_WAYS:-4}"
DSPARK_SPS_TABLE="${DSPARK_SPS_TABLE:-/state/dspark_sps.json}"
HEAD_CTN=dsv41-head
WORKER_CTN=dsv41-worker
SERVE_TIMEOUT="${SERVE_TIMEOUT:-3600}"
IMAGE_ARCH="${IMAGE_ARCH:-arm64}"
ENGRAM_SHARE="${ENGRAM_SHARE:-off}"
NFS_CTN=dsv41-nfs
NFS_IMAGE="${NFS_IMAGE:-erichough/nfs-server:2.2.1}"
NFS_EXPORT="${NFS_EXPORT:-$MODELS_DIR}"
NFS_CLIENTS="${NFS_CLIENTS:-$WORKER_IPS}"
LAB_LAUNCHER_KNOBS="${LAB_LAUNCHER_KNOBS:-/etc/dsv41-lab/launcher.env}"
if [[ -z "${LAB_SERVE_POLL_SECONDS:-}" && -r "$LAB_LAUNCHER_KNOBS" ]]; then
  LAB_SERVE_POLL_SECONDS=$(sed -n 's/^[[:space:]]*LAB_SERVE_POLL_SECONDS=//p' "$LAB_LAUNCHER_KNOBS" | tail -n 1)
fi
LAB_SERVE_POLL_SECONDS="${LAB_SERVE_POLL_SECONDS:-10}"

say() { printf '[start.sh] %s\n' "$*"; }
die() { printf '[start.sh] ERROR: %s\n' "$*" >&2; exit 1; }

remote_on() {  # remote_on HOST COMMAND-STRING (the string is expanded here, on the head; scripts/remote.py runs ssh)
  local h=$1; shift
  python3 "$ROOT/scripts/remote.py" "$WORKER_USER@$h" "$*"
}

# ENGRAM_SHARE: nfs runs the NFS exporter on the head; off (or empty, none) does not. Checked before any command.
case $ENGRAM_SHARE in nfs | off | none | "") ;; *) die "ENGRAM_SHARE must be nfs or off, not '$ENGRAM_SHARE'" ;; esac
share_on() { [[ $ENGRAM_SHARE == nfs ]]; }

GID=$(getent group docker | cut -d: -f3 || true)
GID="${GID:-$(id -g)}"

# ---------------------------------------------------------------- the head's arguments (filled by name)
docker_common_args() {  # docker_common_args ARRAY-NAME IP GID
  local -n _a=$1
  local ip=$2 gid=$3
  _a+=(
    --network host --ipc host --shm-size 32g --gpus all --ulimit memlock=-1 --group-add "$gid"
    -v "$MODELS_DIR:$MODELS_DIR:ro"
    -v "$HOME/.cache:/root/.cache"
    -v "$HOME/nccl-2.30.7:/nccl:ro"
    -e "LD_LIBRARY_PATH=/nccl"
    -e "HOST_IP=$ip"
    -e "MODEL_PATH=$MODEL_PATH"
    -e "TP_SIZE=$TP_SIZE"
    -e "EP_SIZE=$EP_SIZE"
    -e "PORT=$PORT"
    -e "DIST_INIT_ADDR=$HEAD_IP:$DIST_PORT"
    -e "MAX_RUNNING_REQUESTS=$MAX_RUNNING_REQUESTS"
    -e "CHUNKED_PREFILL_SIZE=$CHUNKED_PREFILL_SIZE"
    -e "MAX_TOTAL_TOKENS=$MAX_TOTAL_TOKENS"
    -e "MEM_FRACTION_STATIC=$MEM_FRACTION_STATIC"
    -e "MOE_RUNNER_BACKEND=$MOE_RUNNER_BACKEND"
    -e "OFFLOAD_MODE=$OFFLOAD_MODE"
    -e "DSV41_SOURCE=/sgl-workspace"
    -e "DSPARK_BLOCK_SIZE=$DSPARK_BLOCK_SIZE"
    -e "DSV41_MOE_DENSE_ROUTING=${DSV41_MOE_DENSE_ROUTING:-0}"
    -e "DSV41_CACHE_GIB=$DSV41_CACHE_GIB"
    -e "DSV41_CACHE_WAYS=$DSV41_CACHE_WAYS"
    -e "DSPARK_SPS_TABLE=$DSPARK_SPS_TABLE"
    -e "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=${SGLANG_FLASHINFER_MOE_FUSED_FINALIZE:-1}"
    -e "DSV41_AUTOTUNE_KEEP=${DSV41_AUTOTUNE_KEEP:-0}"
    -e "DSV41_FOLDED_FENCE=${DSV41_FOLDED_FENCE:-0}"
    -e "DSV41_WO_A_W8=${DSV41_WO_A_W8:-0}"
    -e "DSV41_WO_A_W8_MID=${DSV41_WO_A_W8_MID:-0}"
    -e "DSV41_WO_A_W8_DROP=${DSV41_WO_A_W8_DROP:-0}"
    -e "DSV41_ENGRAM_PREFETCH=${DSV41_ENGRAM_PREFETCH:-0}"
    -e "DSV41_DRAFT_HEAD_FP8=${DSV41_DRAFT_HEAD_FP8:-0}"
    -e "DSV41_BLOCK_VERIFY=${DSV41_BLOCK_VERIFY:-0}"
    -e "DSV41_VERIFY_CAP=${DSV41_VERIFY_CAP:-0}"
    -e "DSV41_DRAFT_TAU=${DSV41_DRAFT_TAU:-1}"
    -e "DSV41_SHARED_PAD_K=${DSV41_SHARED_PAD_K:-0}"
  )
}

# ---------------------------------------------------------------- the workers' -e lines (expanded on the head)
worker_env_lines() {  # worker_env_lines IP GID RANK
  local ip=$1 gid=$2 rank=$3
  cat <<EOF
--group-add $gid \
-e HOST_IP=$ip \
-e NODE_RANK=$rank \
-e MODEL_PATH=$MODEL_PATH \
-e TP_SIZE=$TP_SIZE \
-e EP_SIZE=$EP_SIZE \
-e PORT=$PORT \
-e DIST_INIT_ADDR=$HEAD_IP:$DIST_PORT \
-e MAX_RUNNING_REQUESTS=$MAX_RUNNING_REQUESTS \
-e CHUNKED_PREFILL_SIZE=$CHUNKED_PREFILL_SIZE \
-e MAX_TOTAL_TOKENS=$MAX_TOTAL_TOKENS \
-e MEM_FRACTION_STATIC=$MEM_FRACTION_STATIC \
-e MOE_RUNNER_BACKEND=$MOE_RUNNER_BACKEND \
-e OFFLOAD_MODE=$OFFLOAD_MODE \
-e DSV41_SOURCE=/sgl-workspace \
-e DSPARK_BLOCK_SIZE=$DSPARK_BLOCK_SIZE \
-e DSV41_MOE_DENSE_ROUTING=${DSV41_MOE_DENSE_ROUTING:-0} \
-e DSV41_CACHE_GIB=$DSV41_CACHE_GIB \
-e DSV41_CACHE_WAYS=$DSV41_CACHE_WAYS \
-e DSPARK_SPS_TABLE=$DSPARK_SPS_TABLE \
-e SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=${SGLANG_FLASHINFER_MOE_FUSED_FINALIZE:-1} \
-e DSV41_AUTOTUNE_KEEP=${DSV41_AUTOTUNE_KEEP:-0} \
-e DSV41_FOLDED_FENCE=${DSV41_FOLDED_FENCE:-0} \
-e DSV41_WO_A_W8=${DSV41_WO_A_W8:-0} \
-e DSV41_WO_A_W8_MID=${DSV41_WO_A_W8_MID:-0} \
-e DSV41_WO_A_W8_DROP=${DSV41_WO_A_W8_DROP:-0} \
-e DSV41_ENGRAM_PREFETCH=${DSV41_ENGRAM_PREFETCH:-0} \
-e DSV41_DRAFT_HEAD_FP8=${DSV41_DRAFT_HEAD_FP8:-0} \
-e DSV41_BLOCK_VERIFY=${DSV41_BLOCK_VERIFY:-0} \
-e DSV41_VERIFY_CAP=${DSV41_VERIFY_CAP:-0} \
-e DSV41_DRAFT_TAU=${DSV41_DRAFT_TAU:-1} \
-e DSV41_SHARED_PAD_K=${DSV41_SHARED_PAD_K:-0}
EOF
}

start_workers() {
  local h ip rank=0
  local -a ips
  read -r -a ips <<<"$WORKER_IPS"
  for h in $WORKER_HOSTS; do
    ip=${ips[$rank]:-$h}
    rank=$((rank + 1))
    say "starting $WORKER_CTN rank $rank on $h (/engram <- $WORKER_ENGRAM_DIR)"
    python3 "$ROOT/scripts/remote.py" "$WORKER_USER@$h" "bash -lc 'docker run -d --name $WORKER_CTN --network host \
      --ipc host --shm-size 32g --gpus all --ulimit memlock=-1 -v $MODELS_DIR:$MODELS_DIR:ro \
      -v /home/$WORKER_USER/.cache:/root/.cache -v \$HOME/nccl-2.30.7:/nccl:ro -e LD_LIBRARY_PATH=/nccl \
      -v $WORKER_ENGRAM_DIR:/engram $(worker_env_lines "$ip" "$GID" "$rank") \
      -e API_KEY=$API_KEY $IMAGE run'" >/dev/null || die "could not start rank $rank on $h"
  done
}

start_head() {
  local -a head_args=()
  docker_common_args head_args "$HEAD_IP" "$GID"
  say "starting $HEAD_CTN rank 0 on $HEAD_HOST (/engram <- $ENGRAM_DIR)"
  docker run -d --name "$HEAD_CTN" "${head_args[@]}" -e NODE_RANK=0 -e API_KEY \
    -v "$ENGRAM_DIR:/engram" "$IMAGE" run >/dev/null || die "could not start rank 0"
}

# ---------------------------------------------------------------- image check and NFS exporter (head)
check_image_arch() {  # the image on the head must be built for this fleet's architecture
  local arch
  arch=$(docker image inspect -f '{{.Architecture}}' "$IMAGE") ||
    die "no image $IMAGE on $HEAD_HOST (./start.sh build)"
  [[ $arch == "$IMAGE_ARCH" ]] || die "image $IMAGE is built for '$arch', this fleet runs $IMAGE_ARCH"
  say "image $IMAGE: $arch"
}

start_share() {  # the NFS exporter: NFS_EXPORT read-only to every NFS_CLIENTS address
  local c exports="$NFS_EXPORT"
  for c in $NFS_CLIENTS; do exports+=" $c(ro,sync,no_subtree_check,no_root_squash)"; done
  docker rm -f "$NFS_CTN" >/dev/null 2>&1 || true
  say "starting $NFS_CTN on $HEAD_HOST (exports $NFS_EXPORT to $NFS_CLIENTS)"
  docker run -d --name "$NFS_CTN" --network host --privileged --restart unless-stopped \
    -v "$NFS_EXPORT:$NFS_EXPORT:ro" -e "NFS_EXPORT_0=$exports" "$NFS_IMAGE" >/dev/null ||
    die "could not start $NFS_CTN"
}

# ---------------------------------------------------------------- shared by every command
remove_old() {
  local h
  docker rm -f "$HEAD_CTN" >/dev/null 2>&1 || true
  for h in $WORKER_HOSTS; do remote_on "$h" "docker rm -f $WORKER_CTN >/dev/null 2>&1 || true"; done
}

# Lines of the latest boot of a log on stdin: from the last line whose message is the marker.
latest_boot() {
  # (no {n} intervals: mawk, the lab hosts' awk, does not take them)
  awk '/^(\[[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]( TP[0-9]+( EP[0-9]+)?)?\] )?server_args=/{n=0}
       {buf[n++]=$0} END{for(i=0;i<n;i++) print buf[i]}'
}

save_head_boot() {
  mkdir -p "$ROOT/logs"
  docker logs "$HEAD_CTN" 2>&1 | latest_boot >>"$ROOT/logs/dsv41.log" || true
}

state_of() {  # state_of HOST|"" -> the container's state
  if [[ -z $1 ]]; then
    docker inspect --format '{{.State.Status}}' "$HEAD_CTN" 2>/dev/null || echo absent
  else
    remote_on "$1" "docker inspect --format '{{.State.Status}}' $WORKER_CTN 2>/dev/null || echo absent" \
      2>/dev/null || echo unreachable
  fi
}

fail_serve() {  # fail_serve RANK HOST STATE
  printf '[start.sh] ERROR: rank %s on %s is %s; last log lines:\n' "$1" "$2" "$3" >&2
  if [[ $1 == 0 ]]; then
    docker logs "$HEAD_CTN" 2>&1 | tail -n 30 >&2 || true
  else
    remote_on "$2" "docker logs $WORKER_CTN 2>&1 | tail -n 30" >&2 || true
  fi
  save_head_boot
  exit 1
}

wait_ready() {
  local rounds round out state h rank tick=0
  [[ $SERVE_TIMEOUT =~ ^[0-9]+$ ]] || die "SERVE_TIMEOUT must be whole seconds, not '$SERVE_TIMEOUT'"
  [[ $LAB_SERVE_POLL_SECONDS =~ ^[0-9]+$ ]] ||
    die "LAB_SERVE_POLL_SECONDS must be whole seconds, not '$LAB_SERVE_POLL_SECONDS'"
  if ((LAB_SERVE_POLL_SECONDS > 0)); then
    rounds=$(((SERVE_TIMEOUT + LAB_SERVE_POLL_SECONDS - 1) / LAB_SERVE_POLL_SECONDS))
  else
    rounds=$SERVE_TIMEOUT
  fi
  ((rounds >= 1)) || rounds=1
  for ((round = 1; round <= rounds; round++)); do
    out=$(docker logs "$HEAD_CTN" 2>&1 || true)
    if grep -Eq "^Ready: API on port ${PORT}([^0-9]|\$)" <<<"$out"; then
      save_head_boot
      say "ready: http://$HEAD_HOST:$PORT (lab stand-in; boot log appended to $ROOT/logs/dsv41.log)"
      return 0
    fi
    state=$(state_of "")
    case $state in running | created | restarting) ;; *) fail_serve 0 "$HEAD_HOST" "$state" ;; esac
    if ((tick % 3 == 0)); then
      rank=0
      for h in $WORKER_HOSTS; do
        rank=$((rank + 1))
        state=$(state_of "$h")
        case $state in running | created | restarting) ;; *) fail_serve "$rank" "$h" "$state" ;; esac
      done
    fi
    tick=$((tick + 1))
    say "waiting for the head's Ready line: round $round/$rounds"
    sleep "$LAB_SERVE_POLL_SECONDS"
  done
  printf '[start.sh] ERROR: head not ready after %ss (%s rounds of %ss); last log lines:\n' \
    "$SERVE_TIMEOUT" "$rounds" "$LAB_SERVE_POLL_SECONDS" >&2
  docker logs "$HEAD_CTN" 2>&1 | tail -n 30 >&2 || true
  save_head_boot
  exit 1
}

engram_source() {  # the /engram source from `docker inspect` JSON on stdin
  python3 -c '
import json, sys
try:
    c = json.load(sys.stdin)[0]
except (ValueError, IndexError, KeyError, TypeError):
    print("-"); sys.exit(0)
print(next((m.get("Source", "-") for m in c.get("Mounts") or [] if m.get("Destination") == "/engram"), "-"))'
}

# ---------------------------------------------------------------- commands
cmd_serve() {
  check_image_arch
  remove_old
  if share_on; then start_share; fi
  start_workers
  start_head
  wait_ready
}

cmd_stop() {
  local h
  say "stopping $HEAD_CTN on $HEAD_HOST"
  docker stop "$HEAD_CTN" >/dev/null 2>&1 || say "$HEAD_CTN not running"
  for h in $WORKER_HOSTS; do
    say "stopping $WORKER_CTN on $h"
    remote_on "$h" "docker stop $WORKER_CTN >/dev/null 2>&1" || say "$WORKER_CTN on $h not running"
  done
  if share_on; then
    say "stopping $NFS_CTN on $HEAD_HOST"
    docker stop "$NFS_CTN" >/dev/null 2>&1 || say "$NFS_CTN not running"
  fi
}

cmd_status() {
  local h rank=0
  printf '%-10s rank=%s %-13s %-10s engram=%s\n' "$HEAD_HOST" 0 "$HEAD_CTN" "$(state_of "")" \
    "$(docker inspect "$HEAD_CTN" 2>/dev/null | engram_source || echo -)"
  for h in $WORKER_HOSTS; do
    rank=$((rank + 1))
    printf '%-10s rank=%s %-13s %-10s engram=%s\n' "$h" "$rank" "$WORKER_CTN" "$(state_of "$h")" \
      "$(remote_on "$h" "docker inspect $WORKER_CTN 2>/dev/null" 2>/dev/null | engram_source || echo -)"
  done
  if share_on; then
    printf '%-10s %-6s %-13s %-10s export=%s\n' "$HEAD_HOST" nfs "$NFS_CTN" \
      "$(docker inspect --format '{{.State.Status}}' "$NFS_CTN" 2>/dev/null || echo absent)" "$NFS_EXPORT"
  fi
}

cmd_logs() {
  local rank=${1:-0} h q="" a i=0
  shift || true
  if [[ $rank == 0 ]]; then
    docker logs "$@" "$HEAD_CTN"
    return
  fi
  for h in $WORKER_HOSTS; do
    i=$((i + 1))
    if [[ $i == "$rank" ]]; then
      for a in "$@"; do q+=" $(printf '%q' "$a")"; done
      remote_on "$h" "docker logs$q $WORKER_CTN"
      return
    fi
  done
  die "no rank $rank (workers: $WORKER_HOSTS)"
}

built_id() {
  awk '/^Successfully built /{id=$3} /^sha256:[0-9a-f]+$/{id=substr($1, 8, 12)} END{print (id == "" ? "?" : id)}'
}

cmd_build() {
  local h rank=0 out failed=()
  if out=$(docker build -t "$IMAGE" "$ROOT" 2>&1); then
    say "built $IMAGE on $HEAD_HOST (rank 0) from $ROOT: image $(built_id <<<"$out")"
  else
    printf '[start.sh] ERROR: build of %s failed on %s (rank 0): %s\n' "$IMAGE" "$HEAD_HOST" "$(tail -n 1 <<<"$out")" >&2
    failed+=("$HEAD_HOST")
  fi
  for h in $WORKER_HOSTS; do
    rank=$((rank + 1))
    if out=$(remote_on "$h" "docker build -t $IMAGE $WORKER_DIR" 2>&1); then
      say "built $IMAGE on $h (rank $rank) from $WORKER_DIR: image $(built_id <<<"$out")"
    else
      printf '[start.sh] ERROR: build of %s failed on %s (rank %s): %s\n' "$IMAGE" "$h" "$rank" "$(tail -n 1 <<<"$out")" >&2
      failed+=("$h")
    fi
  done
  ((${#failed[@]} == 0)) || die "build failed on: ${failed[*]}"
}

cmd_unavailable() {
  echo "start.sh $1: not available in the lab" >&2
  exit 2
}

if [[ "${START_SH_LIB_ONLY:-0}" == 1 ]]; then
  return 0 2>/dev/null || exit 0
fi
CMD=${1:-}
shift || true
case "$CMD" in
  serve | start | "") cmd_serve ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  logs) cmd_logs "$@" ;;
  build) cmd_build ;;
  pack | doctor | share | smoke) cmd_unavailable "$CMD" ;;
  *)
    echo "usage: $0 [serve|start]|stop|status|logs [rank]|build  (pack|doctor|share|smoke: not in the lab)" >&2
    exit 2
    ;;
esac
