#@# The lab launcher variant "indirect": worker names from WORKER<i>_HOST, the worker start shipped with declare -f.
#@# Its pieces go into the core parts (../core_*.sh), put together by lab/seed/host_seed.py into one start.sh.
#@ set workers $(worker_hosts)
#@ set worker_names $(worker_hosts | tr '\n' ' ')
#@ piece about
# LAB STAND-IN for the dsv41 TP3 launcher (start.sh), variant "indirect": every switch listed explicitly; worker names come
# from WORKER1_HOST, WORKER2_HOST, ... by indirect expansion (${!v}), and the worker-side helper is shipped in
# the ssh command string with `declare -f`.
#@ piece worker_hosts
# Worker names: WORKER1_HOST, WORKER2_HOST, ... (rank i = WORKER<i>_HOST), read by indirect expansion.
worker_hosts() {
  local i v
  for ((i = 1; i <= 16; i++)); do
    v="WORKER${i}_HOST"
    [[ -n "${!v:-}" ]] || break
    printf '%s\n' "${!v}"
  done
}

#@# (the blank line above is the piece's: start.sh has one there)
#@ piece worker_helpers
# Runs on a worker: shipped in the ssh command string with `declare -f`.
run_worker() {  # run_worker CONTAINER IMAGE DOCKER-ARGS...
  local name=$1 image=$2
  shift 2
  docker rm -f "$name" >/dev/null 2>&1 || true
  docker run -d --name "$name" "$@" "$image" run
}

#@ piece worker_run
    remote_on "$h" "$(declare -f run_worker); run_worker $WORKER_CTN $IMAGE --network host --ipc host \
      --shm-size 32g --gpus all --ulimit memlock=-1 -v $MODELS_DIR:$MODELS_DIR:ro \
      -v /home/$WORKER_USER/.cache:/root/.cache -v $WORKER_ENGRAM_DIR:/engram \
      $(worker_env_lines "$ip" "$GID" "$rank") -e API_KEY=$API_KEY" >/dev/null || die "could not start rank $rank on $h"
