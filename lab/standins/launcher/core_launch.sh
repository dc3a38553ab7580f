#@# The lab launcher, core part 2 of 3: the launch path of the "explicit" variant (the head's arguments, the
#@# workers' -e lines, the start of the workers and of the head); the other variants replace blocks of it.
# ---------------------------------------------------------------- the head's arguments (filled by name)
docker_common_args() {  # docker_common_args ARRAY-NAME IP GID
  local -n _a=$1
#@ default head_locals
  local ip=$2 gid=$3
#@ end head_locals
  _a+=(
    --network host --ipc host --shm-size 32g --gpus all --ulimit memlock=-1 --group-add "$gid"
    -v "$MODELS_DIR:$MODELS_DIR:ro"
    -v "$HOME/.cache:/root/.cache"
#@ slot head_mounts
#@ default head_env
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
#@ default head_switches
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
#@ end head_switches
#@ end head_env
  )
#@ slot head_extra_env
}

#@ default worker_env
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
#@ default worker_switches
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
#@ end worker_switches
EOF
}
#@ end worker_env

#@ slot worker_helpers
start_workers() {
  local h ip rank=0
#@ default worker_locals
  local -a ips
#@ end worker_locals
  read -r -a ips <<<"$WORKER_IPS"
  for h in @@workers@@; do
    ip=${ips[$rank]:-$h}
    rank=$((rank + 1))
#@ slot worker_prepare
    say "starting $WORKER_CTN rank $rank on $h (/engram <- $WORKER_ENGRAM_DIR)"
#@ default worker_run
    remote_on "$h" "docker run -d --name $WORKER_CTN --network host --ipc host --shm-size 32g --gpus all \
      --ulimit memlock=-1 -v $MODELS_DIR:$MODELS_DIR:ro -v /home/$WORKER_USER/.cache:/root/.cache \
      -v $WORKER_ENGRAM_DIR:/engram $(worker_env_lines "$ip" "$GID" "$rank") \
      -e API_KEY=$API_KEY $IMAGE run" >/dev/null || die "could not start rank $rank on $h"
#@ end worker_run
  done
}

start_head() {
  local -a head_args=()
  docker_common_args head_args "$HEAD_IP" "$GID"
  say "starting $HEAD_CTN rank 0 on $HEAD_HOST (/engram <- $ENGRAM_DIR)"
  docker run -d --name "$HEAD_CTN" "${head_args[@]}" -e NODE_RANK=0 -e API_KEY \
    -v "$ENGRAM_DIR:/engram" "$IMAGE" run >/dev/null || die "could not start rank 0"
}

#@ slot head_services
