#!/usr/bin/env bash
# LAB STAND-IN, variant "legacy": the lab's former launcher, NOT a real launcher shape (real launchers have
# no HEAD_FORWARD/WORKER_FORWARD arrays). Kept only so checks that still read those arrays can run on the
# lab until they read the effective launch; select it with DSV41_LAB_LAUNCHER_VARIANT=legacy.
# LAB STAND-IN for the dsv41 TP3 launcher (start.sh). Lab hosts only; installed by the seeder at
# /home/mia/dsv41-3x-spark/start.sh on spark1 (owned by mia) with the launcher .env beside it.
# It drives the lab `docker` stand-in locally (head, rank 0) and over ssh on the workers (ranks 1..).
#
#   ./start.sh serve        start workers first, then the head; wait for "^Ready: API on port $API_PORT" in the
#                           head's `docker logs` (both streams), 360 rounds x 10 s by default: SERVE_TIMEOUT
#                           seconds in all (the engine role sets it), one round every LAB_SERVE_POLL_SECONDS
#   ./start.sh stop         stop the head, then the workers (missing containers are fine)
#   ./start.sh status       one line per rank: host rank container state engram=<docker inspect /engram source>
#   ./start.sh logs [rank]  docker logs of that rank's container (default 0 = head); extra args go to docker logs
#   ./start.sh build        docker build -t $IMAGE from the checkout on the head ($DIR) and on every worker
#                           ($WORKER_DIR, over ssh); one line per node; exit 1 naming the nodes that failed
#   doctor|pack|smoke|share: not available in the lab (exit 2)
#
# START_SH_LIB_ONLY=1 source start.sh   -> defines the settings and functions, runs nothing (tests).
# Lab knob (not in real launchers, which sleep 10 s per round): LAB_SERVE_POLL_SECONDS, from the environment
# or the host's /etc/dsv41-lab/launcher.env (LAB_LAUNCHER_KNOBS), so lab runs need not wait 10 s per serve.
# Every figure this lab produces is lab output, not a fleet measurement.
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -f "$DIR/.env" ]]; then
  # shellcheck disable=SC1091
  source "$DIR/.env"
fi

# ---------------------------------------------------------------- defaults
MODEL_PATH=${MODEL_PATH:-/srv/models/DeepSeek-V4.1-Flash}
IMAGE=${IMAGE:-dsv41-sglang:tp3}
HEAD_HOST=${HEAD_HOST:-$(hostname)}
WORKER_HOSTS=${WORKER_HOSTS:-}
WORKER_USER=${WORKER_USER:-$(id -un)}
ENGRAM_DIR=${ENGRAM_DIR:-$HOME/dsv41-engram}
WORKER_DIR=${WORKER_DIR:-/home/$WORKER_USER/dsv41-3x-spark}
WORKER_ENGRAM_DIR=${WORKER_ENGRAM_DIR:-$WORKER_DIR/engram}
API_PORT=${API_PORT:-8888}
DIST_PORT=${DIST_PORT:-20000}
TP_SIZE=${TP_SIZE:-3}
EP_SIZE=${EP_SIZE:-3}
DSPARK_BLOCK_SIZE=${DSPARK_BLOCK_SIZE:-3}
MAX_RUNNING_REQUESTS=${MAX_RUNNING_REQUESTS:-4}
CHUNKED_PREFILL_SIZE=${CHUNKED_PREFILL_SIZE:-1024}
MAX_TOTAL_TOKENS=${MAX_TOTAL_TOKENS:-}
MEM_FRACTION_STATIC=${MEM_FRACTION_STATIC:-0.95}
MOE_RUNNER_BACKEND=${MOE_RUNNER_BACKEND:-b12x}
SERVE_TIMEOUT=${SERVE_TIMEOUT:-3600}
LAB_LAUNCHER_KNOBS=${LAB_LAUNCHER_KNOBS:-/etc/dsv41-lab/launcher.env}
if [[ -z "${LAB_SERVE_POLL_SECONDS:-}" && -r "$LAB_LAUNCHER_KNOBS" ]]; then
  LAB_SERVE_POLL_SECONDS=$(sed -n 's/^[[:space:]]*LAB_SERVE_POLL_SECONDS=//p' "$LAB_LAUNCHER_KNOBS" | tail -n 1)
fi
LAB_SERVE_POLL_SECONDS=${LAB_SERVE_POLL_SECONDS:-10}
HEAD_CONTAINER=dsv41-head
WORKER_CONTAINER=dsv41-worker

# Adapter switches: default off; an explicit non-zero value is kept.
DSV41_AUTOTUNE_KEEP=${DSV41_AUTOTUNE_KEEP:-0}
DSV41_FOLDED_FENCE=${DSV41_FOLDED_FENCE:-0}
DSV41_WO_A_W8=${DSV41_WO_A_W8:-0}
DSV41_WO_A_W8_MID=${DSV41_WO_A_W8_MID:-0}
DSV41_WO_A_W8_DROP=${DSV41_WO_A_W8_DROP:-0}
DSV41_ENGRAM_PREFETCH=${DSV41_ENGRAM_PREFETCH:-0}
DSV41_DRAFT_HEAD_FP8=${DSV41_DRAFT_HEAD_FP8:-0}
DSV41_BLOCK_VERIFY=${DSV41_BLOCK_VERIFY:-0}

# ---------------------------------------------------------------- env forward lists (explicit)
# Each variable is passed to the container only if it is set. Parsed by an Ansible check: keep the form.
HEAD_FORWARD=(
  API_KEY
  DSV41_AUTOTUNE_KEEP
  DSV41_FOLDED_FENCE
  DSV41_WO_A_W8
  DSV41_WO_A_W8_MID
  DSV41_WO_A_W8_DROP
  DSV41_ENGRAM_PREFETCH
  DSV41_DRAFT_HEAD_FP8
  DSV41_BLOCK_VERIFY
  DSPARK_BLOCK_SIZE
  DSV41_VERIFY_CAP
  DSV41_DRAFT_TAU
  DSV41_CACHE_GIB
  DSV41_CACHE_WAYS
  DSV41_ENGRAM_DRM_NODE
  SGLANG_FLASHINFER_MOE_FUSED_FINALIZE
  DSV41_MOE_DENSE_ROUTING
  PYTORCH_CUDA_ALLOC_CONF
  DSV41_SHARED_PAD_K
  DSPARK_SPS_TABLE
  OFFLOAD_MODE
)
WORKER_FORWARD=(
  DSV41_AUTOTUNE_KEEP
  DSV41_FOLDED_FENCE
  DSV41_WO_A_W8
  DSV41_WO_A_W8_MID
  DSV41_WO_A_W8_DROP
  DSV41_ENGRAM_PREFETCH
  DSV41_DRAFT_HEAD_FP8
  DSV41_BLOCK_VERIFY
  DSPARK_BLOCK_SIZE
  DSV41_VERIFY_CAP
  DSV41_DRAFT_TAU
  DSV41_CACHE_GIB
  DSV41_CACHE_WAYS
  DSV41_ENGRAM_DRM_NODE
  SGLANG_FLASHINFER_MOE_FUSED_FINALIZE
  DSV41_MOE_DENSE_ROUTING
  PYTORCH_CUDA_ALLOC_CONF
  DSV41_SHARED_PAD_K
  DSPARK_SPS_TABLE
  OFFLOAD_MODE
)

# ---------------------------------------------------------------- helpers
say() { printf '[start.sh] %s\n' "$*"; }
die() { printf '[start.sh] ERROR: %s\n' "$*" >&2; exit 1; }

# Name of the per-worker override variable: WORKER_ENGRAM_DIR_<HOST uppercased, non-alnum -> _>
worker_engram_var() {
  local key=${1^^}
  key=${key//[^A-Z0-9]/_}
  printf 'WORKER_ENGRAM_DIR_%s\n' "$key"
}

# The /engram source for one worker: the per-host override wins, else WORKER_ENGRAM_DIR.
worker_engram_dir() {
  local var
  var=$(worker_engram_var "$1")
  if [[ -n "${!var:-}" ]]; then
    printf '%s\n' "${!var}"
  else
    printf '%s\n' "$WORKER_ENGRAM_DIR"
  fi
}

worker_hosts() {
  local h
  for h in $WORKER_HOSTS; do printf '%s\n' "$h"; done
}

# Host of a rank: 0 = head, i = i-th worker (1-based).
rank_host() {
  local rank=$1 i=0 h
  if [[ $rank == 0 ]]; then printf '%s\n' "$HEAD_HOST"; return 0; fi
  for h in $WORKER_HOSTS; do
    i=$((i + 1))
    if [[ $i == "$rank" ]]; then printf '%s\n' "$h"; return 0; fi
  done
  return 1
}

remote() {  # remote HOST COMMAND-STRING
  local host=$1; shift
  ssh -o BatchMode=yes -o ConnectTimeout=10 "$WORKER_USER@$host" "$*"
}

# Head: "-e VAR" for every set HEAD_FORWARD variable (exported, so docker takes the value from the env;
# values such as API_KEY never appear on a command line).
head_forward_args() {
  local v
  HEAD_ENV_ARGS=()
  for v in "${HEAD_FORWARD[@]}"; do
    if [[ -n "${!v+x}" ]]; then
      export "${v?}"
      HEAD_ENV_ARGS+=(-e "$v")
    fi
  done
}

# Workers: "-e VAR=value" for every set WORKER_FORWARD variable, shell-quoted for the ssh command line.
worker_forward_string() {
  local v out=""
  for v in "${WORKER_FORWARD[@]}"; do
    if [[ -n "${!v+x}" ]]; then
      out+=" -e $(printf '%q' "$v=${!v}")"
    fi
  done
  printf '%s\n' "$out"
}

# Engine arguments for ROLE RANK (one per line).
engine_args() {
  local role=$1 rank=$2
  printf '%s\n' --role "$role" --rank "$rank" --tp-size "$TP_SIZE" --ep-size "$EP_SIZE" \
    --model-path "$MODEL_PATH" --port "$API_PORT" --dspark-block-size "$DSPARK_BLOCK_SIZE" \
    --max-running-requests "$MAX_RUNNING_REQUESTS" --chunked-prefill-size "$CHUNKED_PREFILL_SIZE" \
    --mem-fraction-static "$MEM_FRACTION_STATIC" --moe-runner-backend "$MOE_RUNNER_BACKEND" \
    --dist-init-addr "$HEAD_HOST:$DIST_PORT"
  if [[ -n "$MAX_TOTAL_TOKENS" ]]; then printf '%s\n' --max-total-tokens "$MAX_TOTAL_TOKENS"; fi
}

# The full remote command that (re)starts the worker container of RANK on HOST.
worker_run_command() {
  local host=$1 rank=$2 wdir mdir cmd a
  wdir=$(worker_engram_dir "$host")
  mdir=$(dirname "$MODEL_PATH")
  cmd="docker rm -f $WORKER_CONTAINER >/dev/null 2>&1 || true; docker run -d --name $WORKER_CONTAINER --network host"
  cmd+=" -e DSV41_SOURCE=/sgl-workspace"
  cmd+=" -v $(printf '%q' "$wdir:/engram")"
  cmd+=" -v $(printf '%q' "$mdir:$mdir:ro")"
  cmd+=" -v $(printf '%q' "/home/$WORKER_USER/.cache:/root/.cache")"
  cmd+="$(worker_forward_string)"
  cmd+=" $(printf '%q' "$IMAGE")"
  while IFS= read -r a; do cmd+=" $(printf '%q' "$a")"; done < <(engine_args worker "$rank")
  printf '%s\n' "$cmd"
}

# Lines of the latest boot of a log on stdin: from the last line whose message is the marker
# (`server_args={...}` or, older builds, `server_args=ServerArgs(...)`, after an optional logging prefix).
latest_boot() {
  # (no {n} intervals: mawk, the lab hosts' awk, does not take them)
  awk '/^(\[[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]( TP[0-9]+( EP[0-9]+)?)?\] )?server_args=/{n=0}
       {buf[n++]=$0} END{for(i=0;i<n;i++) print buf[i]}'
}

# Exit 0 if a combined log on stdin has the head's readiness line (printed with no prefix, on stdout).
has_ready() {
  grep -Eq "^Ready: API on port ${API_PORT}([^0-9]|\$)"
}

# /engram source from `docker inspect` JSON on stdin.
engram_source() {
  python3 -c '
import json, sys
try:
    data = json.load(sys.stdin)
except ValueError:
    print("-"); sys.exit(0)
c = data[0] if isinstance(data, list) and data else (data if isinstance(data, dict) else {})
for m in c.get("Mounts") or []:
    if m.get("Destination") == "/engram":
        print(m.get("Source", "-")); sys.exit(0)
for b in (c.get("HostConfig") or {}).get("Binds") or []:
    parts = b.split(":")
    if len(parts) >= 2 and parts[1] == "/engram":
        print(parts[0]); sys.exit(0)
print("-")'
}

container_state_local() {
  docker inspect --format '{{.State.Status}}' "$1" 2>/dev/null || echo absent
}

container_state_remote() {
  remote "$1" "docker inspect --format '{{.State.Status}}' $WORKER_CONTAINER 2>/dev/null || echo absent" \
    2>/dev/null || echo unreachable
}

# ---------------------------------------------------------------- commands
cmd_stop() {
  local host
  say "stopping $HEAD_CONTAINER on $HEAD_HOST"
  docker stop "$HEAD_CONTAINER" >/dev/null 2>&1 || say "$HEAD_CONTAINER not running"
  for host in $WORKER_HOSTS; do
    say "stopping $WORKER_CONTAINER on $host"
    remote "$host" "docker stop $WORKER_CONTAINER >/dev/null 2>&1" || say "$WORKER_CONTAINER on $host not running"
  done
}

fail_serve() {  # fail_serve RANK HOST STATE
  local rank=$1 host=$2 state=$3
  printf '[start.sh] ERROR: rank %s on %s is %s; last log lines:\n' "$rank" "$host" "$state" >&2
  if [[ $rank == 0 ]]; then
    docker logs "$HEAD_CONTAINER" 2>&1 | tail -n 30 >&2 || true
  else
    remote "$host" "docker logs $WORKER_CONTAINER 2>&1 | tail -n 30" >&2 || true
  fi
  save_head_boot
  exit 1
}

save_head_boot() {
  mkdir -p "$DIR/logs"
  docker logs "$HEAD_CONTAINER" 2>&1 | latest_boot >>"$DIR/logs/dsv41.log" || true
}

cmd_serve() {
  local host rank=0 a mdir state tick=0
  [[ $SERVE_TIMEOUT =~ ^[0-9]+$ ]] || die "SERVE_TIMEOUT must be whole seconds, not '$SERVE_TIMEOUT'"
  [[ $LAB_SERVE_POLL_SECONDS =~ ^[0-9]+$ ]] ||
    die "LAB_SERVE_POLL_SECONDS must be whole seconds, not '$LAB_SERVE_POLL_SECONDS'"
  mdir=$(dirname "$MODEL_PATH")
  for host in $WORKER_HOSTS; do
    rank=$((rank + 1))
    say "starting $WORKER_CONTAINER rank $rank on $host (/engram <- $(worker_engram_dir "$host"))"
    remote "$host" "$(worker_run_command "$host" "$rank")" >/dev/null || die "could not start rank $rank on $host"
  done
  head_forward_args
  local -a eargs=()
  while IFS= read -r a; do eargs+=("$a"); done < <(engine_args head 0)
  say "starting $HEAD_CONTAINER rank 0 on $HEAD_HOST (/engram <- $ENGRAM_DIR)"
  docker rm -f "$HEAD_CONTAINER" >/dev/null 2>&1 || true
  docker run -d --name "$HEAD_CONTAINER" --network host \
    -v "$ENGRAM_DIR:/engram" -v "$mdir:$mdir:ro" -v "$HOME/.cache:/root/.cache" \
    -e DSV41_SOURCE=/sgl-workspace "${HEAD_ENV_ARGS[@]}" "$IMAGE" "${eargs[@]}" >/dev/null || die "could not start rank 0"

  # The launcher's wait: up to SERVE_TIMEOUT seconds in rounds of LAB_SERVE_POLL_SECONDS (360 x 10 s by
  # default), reading both streams of the head's log as the real launchers do (docker logs ... 2>&1).
  local rounds round out
  if ((LAB_SERVE_POLL_SECONDS > 0)); then
    rounds=$(((SERVE_TIMEOUT + LAB_SERVE_POLL_SECONDS - 1) / LAB_SERVE_POLL_SECONDS))
  else
    rounds=$SERVE_TIMEOUT  # no sleep between rounds (tests)
  fi
  ((rounds >= 1)) || rounds=1
  for ((round = 1; round <= rounds; round++)); do
    out=$(docker logs "$HEAD_CONTAINER" 2>&1 || true)
    if has_ready <<<"$out"; then
      save_head_boot
      say "ready: http://$HEAD_HOST:$API_PORT (lab stand-in; boot log appended to $DIR/logs/dsv41.log)"
      return 0
    fi
    state=$(container_state_local "$HEAD_CONTAINER")
    case $state in running | created | restarting) ;; *) fail_serve 0 "$HEAD_HOST" "$state" ;; esac
    if ((tick % 3 == 0)); then
      rank=0
      for host in $WORKER_HOSTS; do
        rank=$((rank + 1))
        state=$(container_state_remote "$host")
        case $state in running | created | restarting) ;; *) fail_serve "$rank" "$host" "$state" ;; esac
      done
    fi
    tick=$((tick + 1))
    say "waiting for the head's Ready line: round $round/$rounds"
    sleep "$LAB_SERVE_POLL_SECONDS"
  done
  printf '[start.sh] ERROR: head not ready after %ss (%s rounds of %ss); last log lines:\n' \
    "$SERVE_TIMEOUT" "$rounds" "$LAB_SERVE_POLL_SECONDS" >&2
  docker logs "$HEAD_CONTAINER" 2>&1 | tail -n 30 >&2 || true
  save_head_boot
  exit 1
}

cmd_status() {
  local host rank=0 state src
  state=$(container_state_local "$HEAD_CONTAINER")
  src=$(docker inspect "$HEAD_CONTAINER" 2>/dev/null | engram_source || echo -)
  printf '%-10s rank=%s %-13s %-10s engram=%s\n' "$HEAD_HOST" 0 "$HEAD_CONTAINER" "$state" "$src"
  for host in $WORKER_HOSTS; do
    rank=$((rank + 1))
    state=$(container_state_remote "$host")
    src=$(remote "$host" "docker inspect $WORKER_CONTAINER 2>/dev/null" 2>/dev/null | engram_source || echo -)
    printf '%-10s rank=%s %-13s %-10s engram=%s\n' "$host" "$rank" "$WORKER_CONTAINER" "$state" "$src"
  done
}

cmd_logs() {
  local rank=${1:-0} host q="" a
  shift || true
  host=$(rank_host "$rank") || die "no rank $rank (workers: $WORKER_HOSTS)"
  if [[ $rank == 0 ]]; then
    docker logs "$@" "$HEAD_CONTAINER"
  else
    for a in "$@"; do q+=" $(printf '%q' "$a")"; done
    remote "$host" "docker logs$q $WORKER_CONTAINER"
  fi
}

# Short image id from `docker build` output on stdin ("Successfully built <id>", or a -q "sha256:<id>").
built_id() {
  awk '/^Successfully built /{id=$3} /^sha256:[0-9a-f]+$/{id=substr($1, 8, 12)} END{print (id == "" ? "?" : id)}'
}

cmd_build() {
  local host rank=0 out id q failed=()
  if out=$(docker build -t "$IMAGE" "$DIR" 2>&1); then
    id=$(built_id <<<"$out")
    say "built $IMAGE on $HEAD_HOST (rank 0) from $DIR: image $id"
  else
    printf '[start.sh] ERROR: build of %s failed on %s (rank 0): %s\n' "$IMAGE" "$HEAD_HOST" "$(tail -n 1 <<<"$out")" >&2
    failed+=("$HEAD_HOST")
  fi
  q="docker build -t $(printf '%q' "$IMAGE") $(printf '%q' "$WORKER_DIR")"
  for host in $WORKER_HOSTS; do
    rank=$((rank + 1))
    if out=$(remote "$host" "$q" 2>&1); then
      id=$(built_id <<<"$out")
      say "built $IMAGE on $host (rank $rank) from $WORKER_DIR: image $id"
    else
      printf '[start.sh] ERROR: build of %s failed on %s (rank %s): %s\n' "$IMAGE" "$host" "$rank" "$(tail -n 1 <<<"$out")" >&2
      failed+=("$host")
    fi
  done
  if ((${#failed[@]})); then
    die "build failed on: ${failed[*]}"
  fi
}

main() {
  local cmd=${1:-}
  shift || true
  case $cmd in
    serve) cmd_serve ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    logs) cmd_logs "$@" ;;
    build) cmd_build ;;
    doctor | pack | smoke | share)
      echo "start.sh $cmd: not available in the lab" >&2
      exit 2
      ;;
    *)
      echo "usage: $0 serve|stop|status|logs [rank]|build  (doctor|pack|smoke|share: not available in the lab)" >&2
      exit 2
      ;;
  esac
}

if [[ "${START_SH_LIB_ONLY:-0}" == 1 ]]; then
  return 0 2>/dev/null || exit 0
fi
main "$@"
