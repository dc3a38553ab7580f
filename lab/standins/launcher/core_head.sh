#!/usr/bin/env bash
#@# The lab launcher, core part 1 of 3 (core_head.sh, core_launch.sh, core_commands.sh). With a variant's part
#@# (variants/<name>.sh), lab/seed/host_seed.py (assemble_launcher) puts them together into the one start.sh a
#@# lab host gets: a real launcher is one file, and the roles read and edit it as one. The core parts are the
#@# "explicit" variant; a variant's pieces fill the slots and replace the default blocks they name. The #@
#@# directives are described in host_seed.py and never reach start.sh.
#@ slot about required
# Lab hosts only; installed by the seeder at /home/<user>/dsv41-3x-spark/start.sh (the head's copy runs)
# with the .env beside it. Written in the shape of the real launchers (SPEC section 3, "Launcher and
# containers"): `set -a; source .env`, script-side defaults, an array builder by name for the head, an ssh
# command string with a heredoc of `-e NAME=$NAME \` lines for the workers, a dispatch `case` at the end.
#
#@ default usage
#   ./start.sh [serve|start]  remove the old containers, start the workers (ranks 1..N in WORKER_HOSTS order),
#                           then the head; wait for "^Ready: API on port $PORT" in the head's `docker logs`
#                           (both streams): SERVE_TIMEOUT seconds (3600: 360 rounds of 10 s), one round every
#                           LAB_SERVE_POLL_SECONDS (lab knob)
#   ./start.sh stop         stop the head, then the workers
#   ./start.sh status       one line per rank: host rank container state engram=<docker inspect /engram source>
#@ end usage
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
#@ default model_path
MODEL_PATH="${MODEL_PATH:-/srv/models/DeepSeek-V4.1-Flash}"
#@ end model_path
MODELS_DIR="${MODELS_DIR:-$(dirname "$MODEL_PATH")}"
IMAGE="${IMAGE:-dsv41-sglang:tp3}"
HEAD_HOST="${HEAD_HOST:-$(hostname)}"
HEAD_IP="${HEAD_IP:-$HEAD_HOST}"
WORKER_HOSTS="${WORKER_HOSTS:-}"
#@# @@workers@@: what every loop over the workers walks; @@worker_names@@: the workers in an error message
#@ set workers $WORKER_HOSTS
#@ set worker_names $WORKER_HOSTS
WORKER_IPS="${WORKER_IPS:-$WORKER_HOSTS}"
WORKER_USER="${WORKER_USER:-$(id -un)}"
WORKER_DIR="${WORKER_DIR:-/home/$WORKER_USER/dsv41-3x-spark}"
ENGRAM_DIR="${ENGRAM_DIR:-$HOME/dsv41-engram}"
WORKER_ENGRAM_DIR="${WORKER_ENGRAM_DIR:-$WORKER_DIR/engram}"
SSH_IDENTITY="${SSH_IDENTITY:-}"
#@ slot ssh_defaults
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
#@ slot env_defaults
HEAD_CTN=dsv41-head
WORKER_CTN=dsv41-worker
SERVE_TIMEOUT="${SERVE_TIMEOUT:-3600}"
#@ slot variant_defaults
LAB_LAUNCHER_KNOBS="${LAB_LAUNCHER_KNOBS:-/etc/dsv41-lab/launcher.env}"
if [[ -z "${LAB_SERVE_POLL_SECONDS:-}" && -r "$LAB_LAUNCHER_KNOBS" ]]; then
  LAB_SERVE_POLL_SECONDS=$(sed -n 's/^[[:space:]]*LAB_SERVE_POLL_SECONDS=//p' "$LAB_LAUNCHER_KNOBS" | tail -n 1)
fi
LAB_SERVE_POLL_SECONDS="${LAB_SERVE_POLL_SECONDS:-10}"

say() { printf '[start.sh] %s\n' "$*"; }
die() { printf '[start.sh] ERROR: %s\n' "$*" >&2; exit 1; }

#@ slot worker_hosts
#@ default remote_on
remote_on() {  # remote_on HOST COMMAND-STRING (the string is expanded here, on the head)
  local h=$1; shift
  local -a opts=(-o BatchMode=yes -o ConnectTimeout=10)
  [[ -n "$SSH_IDENTITY" ]] && opts+=(-i "$SSH_IDENTITY")
  ssh "${opts[@]}" "$WORKER_USER@$h" "$*"
}
#@ end remote_on

#@ slot checks
GID=$(getent group docker | cut -d: -f3 || true)
GID="${GID:-$(id -g)}"

