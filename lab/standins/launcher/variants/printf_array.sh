#@# The lab launcher variant "printf_array": the workers' docker arguments as an array printed with %q.
#@# Its pieces go into the core parts (../core_*.sh), put together by lab/seed/host_seed.py into one start.sh.
#@ piece about
# LAB STAND-IN for the dsv41 TP3 launcher (start.sh), variant "printf_array": every switch listed explicitly; the workers'
# docker arguments are built as an array and sent over ssh printed with printf %q (values survive quoting).
#@ piece worker_env
# ---------------------------------------------------------------- the workers' arguments (an array, printed with %q)
worker_args() {  # worker_args ARRAY-NAME IP GID RANK
  local -n _w=$1
  local ip=$2 gid=$3 rank=$4
  _w+=(
    --network host --ipc host --shm-size 32g --gpus all --ulimit memlock=-1 --group-add "$gid"
    -v "/home/$WORKER_USER/.cache:/root/.cache"
#@ insert head_env
#@# (the head's -e list, HOST_IP to DSV41_SHARED_PAD_K, as core_launch.sh has it)
    -e "NODE_RANK=$rank"
  )
}
#@ piece worker_locals
  local -a ips wargs
#@ piece worker_prepare
    wargs=(docker run -d --name "$WORKER_CTN" -v "$WORKER_ENGRAM_DIR:/engram")
    worker_args wargs "$ip" "$GID" "$rank"
    wargs+=(-e "API_KEY=$API_KEY" "$IMAGE" run)
#@ piece worker_run
    remote_on "$h" "$(printf '%q ' "${wargs[@]}")" >/dev/null || die "could not start rank $rank on $h"
