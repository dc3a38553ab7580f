#!/usr/bin/env bash
# Prove that the project sets up a machine with none of the lab's packages: in a clean Debian 12
# container (the lab's debootstrap base image: systemd, sshd, python3, sudo and nothing else) run
# `make apt` (which must install every package the lab needs and pass `make apt-check`) and
# `make setup` (the pinned venv), from a copy of the repository's set-up files.
#
# `make` itself is the one prerequisite the README names (`apt-get install make`): it is installed
# first, as a user would, before `make` can run.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 lab/labctl.py build >/dev/null            # the base image (debootstrap) is a build cache
base=$(podman images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/dsv41-lab-base:' | head -1)
[ -n "$base" ] || { echo "fresh-check: no lab base image" >&2; exit 1; }
# The machine's own network trust (a TLS-inspecting proxy's CA in its bundle, pip index settings)
# belongs to the machine, not to the project: it is handed to the container as it is.
net=()
ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
if [ -f "$ca" ]; then net+=(-v "$ca:/host-ca.crt:ro" -e PIP_CERT=/host-ca.crt); fi
for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_DEFAULT_TIMEOUT http_proxy https_proxy HTTP_PROXY HTTPS_PROXY; do
  if [ -n "${!v:-}" ]; then net+=(-e "$v=${!v}"); fi
done
started=$(date +%s)
podman --runtime runc run --rm --ulimit nofile=20000:20000 --ulimit nproc=4096:4096 "${net[@]}" \
  -v "$PWD/Makefile:/src/Makefile:ro" -v "$PWD/requirements.txt:/src/requirements.txt:ro" \
  "$base" bash -euo pipefail -c '
    cp -r /src /repo && cd /repo
    echo "fresh-check: installing make (the README prerequisite)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make >/dev/null
    if make --no-print-directory apt-check 2>/dev/null; then
      echo "fresh-check: the clean image already has every package; the check proves nothing" >&2; exit 1
    fi
    make --no-print-directory apt
    make --no-print-directory setup >/dev/null
    .venv/bin/ansible-playbook --version | head -1
    echo "fresh-check: make apt and make setup succeeded from a clean Debian 12 root filesystem"
  '
echo "fresh-check: cold set-up took $(( $(date +%s) - started ))s"
