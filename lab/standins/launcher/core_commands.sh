#@# The lab launcher, core part 3 of 3: what every command shares, the commands and the dispatch.
# ---------------------------------------------------------------- shared by every command
remove_old() {
  local h
  docker rm -f "$HEAD_CTN" >/dev/null 2>&1 || true
  for h in @@workers@@; do remote_on "$h" "docker rm -f $WORKER_CTN >/dev/null 2>&1 || true"; done
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
      for h in @@workers@@; do
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
#@ slot serve_checks
  remove_old
#@ slot serve_services
  start_workers
  start_head
  wait_ready
}

cmd_stop() {
  local h
  say "stopping $HEAD_CTN on $HEAD_HOST"
  docker stop "$HEAD_CTN" >/dev/null 2>&1 || say "$HEAD_CTN not running"
  for h in @@workers@@; do
    say "stopping $WORKER_CTN on $h"
    remote_on "$h" "docker stop $WORKER_CTN >/dev/null 2>&1" || say "$WORKER_CTN on $h not running"
  done
#@ slot stop_services
}

cmd_status() {
  local h rank=0
  printf '%-10s rank=%s %-13s %-10s engram=%s\n' "$HEAD_HOST" 0 "$HEAD_CTN" "$(state_of "")" \
    "$(docker inspect "$HEAD_CTN" 2>/dev/null | engram_source || echo -)"
  for h in @@workers@@; do
    rank=$((rank + 1))
    printf '%-10s rank=%s %-13s %-10s engram=%s\n' "$h" "$rank" "$WORKER_CTN" "$(state_of "$h")" \
      "$(remote_on "$h" "docker inspect $WORKER_CTN 2>/dev/null" 2>/dev/null | engram_source || echo -)"
  done
#@ slot status_services
}

cmd_logs() {
  local rank=${1:-0} h q="" a i=0
  shift || true
  if [[ $rank == 0 ]]; then
    docker logs "$@" "$HEAD_CTN"
    return
  fi
  for h in @@workers@@; do
    i=$((i + 1))
    if [[ $i == "$rank" ]]; then
      for a in "$@"; do q+=" $(printf '%q' "$a")"; done
      remote_on "$h" "docker logs$q $WORKER_CTN"
      return
    fi
  done
  die "no rank $rank (workers: @@worker_names@@)"
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
  for h in @@workers@@; do
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
