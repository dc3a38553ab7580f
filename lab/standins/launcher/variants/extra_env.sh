#@# The lab launcher variant "extra_env": adapter switches only through EXTRA_CONTAINER_ENV.
#@# Its pieces go into the core parts (../core_*.sh), put together by lab/seed/host_seed.py into one start.sh.
#@ piece about
# LAB STAND-IN for the dsv41 TP3 launcher (start.sh), variant "extra_env": the adapter switches reach the containers only
# through EXTRA_CONTAINER_ENV="FOO=1 BAR=2" (an unquoted loop: -e "$kv" on the head, -e $(printf %q "$kv")
# in the workers' heredoc); the engine settings are listed explicitly on both launch paths.
#@ piece env_defaults
EXTRA_CONTAINER_ENV="${EXTRA_CONTAINER_ENV:-}"
#@ piece head_locals
  local ip=$2 gid=$3 kv
#@ piece head_switches
#@# (none: no switch is listed on the head)
#@ piece head_extra_env
  # adapter switches and any other extra variable: only through EXTRA_CONTAINER_ENV
  for kv in $EXTRA_CONTAINER_ENV; do
    _a+=(-e "$kv")
  done
#@ piece worker_switches
$(for kv in $EXTRA_CONTAINER_ENV; do echo -n "-e $(printf '%q' "$kv") "; done)
