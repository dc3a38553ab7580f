#@# The lab launcher variant "family": the fleet's own family (scripts/remote.py, $HOME defaults, image check, NFS).
#@# Its pieces go into the core parts (../core_*.sh), put together by lab/seed/host_seed.py into one start.sh.
#@ piece about
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
#@ piece usage
#   ./start.sh [serve|start]  check the image's architecture, remove the old containers, start the NFS exporter
#                           (ENGRAM_SHARE=nfs), the workers (ranks 1..N in WORKER_HOSTS order), then the head;
#                           wait for "^Ready: API on port $PORT" in the head's `docker logs` (both streams):
#                           SERVE_TIMEOUT seconds (3600: 360 rounds of 10 s), one round every
#                           LAB_SERVE_POLL_SECONDS (lab knob)
#   ./start.sh stop         stop the head, then the workers (then the NFS exporter, ENGRAM_SHARE=nfs)
#   ./start.sh status       one line per rank: host rank container state engram=<docker inspect /engram source>
#                           (and one for the NFS exporter, ENGRAM_SHARE=nfs)
#@ piece model_path
MODEL_PATH="${MODEL_PATH:-$HOME/NewModels/DeepSeek-V4.1-Flash}"
#@ piece ssh_defaults
export SSH_IDENTITY  # read by scripts/remote.py
#@ piece variant_defaults
IMAGE_ARCH="${IMAGE_ARCH:-arm64}"
ENGRAM_SHARE="${ENGRAM_SHARE:-off}"
NFS_CTN=dsv41-nfs
NFS_IMAGE="${NFS_IMAGE:-erichough/nfs-server:2.2.1}"
NFS_EXPORT="${NFS_EXPORT:-$MODELS_DIR}"
NFS_CLIENTS="${NFS_CLIENTS:-$WORKER_IPS}"
#@ piece remote_on
remote_on() {  # remote_on HOST COMMAND-STRING (the string is expanded here, on the head; scripts/remote.py runs ssh)
  local h=$1; shift
  python3 "$ROOT/scripts/remote.py" "$WORKER_USER@$h" "$*"
}
#@ piece checks
# ENGRAM_SHARE: nfs runs the NFS exporter on the head; off (or empty, none) does not. Checked before any command.
case $ENGRAM_SHARE in nfs | off | none | "") ;; *) die "ENGRAM_SHARE must be nfs or off, not '$ENGRAM_SHARE'" ;; esac
share_on() { [[ $ENGRAM_SHARE == nfs ]]; }

#@ piece head_mounts
    -v "$HOME/nccl-2.30.7:/nccl:ro"
    -e "LD_LIBRARY_PATH=/nccl"
#@ piece worker_run
    python3 "$ROOT/scripts/remote.py" "$WORKER_USER@$h" "bash -lc 'docker run -d --name $WORKER_CTN --network host \
      --ipc host --shm-size 32g --gpus all --ulimit memlock=-1 -v $MODELS_DIR:$MODELS_DIR:ro \
      -v /home/$WORKER_USER/.cache:/root/.cache -v \$HOME/nccl-2.30.7:/nccl:ro -e LD_LIBRARY_PATH=/nccl \
      -v $WORKER_ENGRAM_DIR:/engram $(worker_env_lines "$ip" "$GID" "$rank") \
      -e API_KEY=$API_KEY $IMAGE run'" >/dev/null || die "could not start rank $rank on $h"
#@ piece head_services
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

#@ piece serve_checks
  check_image_arch
#@ piece serve_services
  if share_on; then start_share; fi
#@ piece stop_services
  if share_on; then
    say "stopping $NFS_CTN on $HEAD_HOST"
    docker stop "$NFS_CTN" >/dev/null 2>&1 || say "$NFS_CTN not running"
  fi
#@ piece status_services
  if share_on; then
    printf '%-10s %-6s %-13s %-10s export=%s\n' "$HEAD_HOST" nfs "$NFS_CTN" \
      "$(docker inspect --format '{{.State.Status}}' "$NFS_CTN" 2>/dev/null || echo absent)" "$NFS_EXPORT"
  fi
