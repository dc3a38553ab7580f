#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: what each container receives at the next serve, from the launcher's own code."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: launcher_effective
short_description: Evaluate the launcher's serve path in a sandbox and report what each container receives
description:
  - Runs on the head. Runs the launcher's own C(serve) path (C(start.sh serve)) with bash in a sandbox - a
    scratch copy of the checkout, a scratch C(HOME), a C(PATH) of recording stand-ins for C(docker),
    C(ssh) (a worker command string is itself run through the stand-ins), C(sudo), C(rsync), C(curl),
    C(nvidia-smi), C(sleep) and every other external command - so nothing on the host changes.
  - Returns, for the head and each worker, in order of start, the container name, host, rank, image,
    the exact environment the container gets (C(-e), C(--env), C(--env-file); secrets masked by the
    project's one secret rule), the mounts with the real source of C(/engram), and the network.
    Containers that are not engine ranks (an NFS exporter on the head, for instance - no rank and no model,
    or another image than the engine's) are returned apart, as I(auxiliary), never as a rank.
  - The read-only docker queries the launcher makes (C(image inspect), C(inspect), C(ps), C(images),
    C(version), C(info), with their C(--format) templates) are answered from the head's real docker
    daemon, which the stand-in asks itself with a fixed argument list; what changes state (C(run),
    C(rm), C(stop), C(pull), C(build)...) is recorded, never run. When the daemon cannot be asked, the
    answer is an image of this fleet (arm64, linux) and no container but the sandbox's, returned in
    I(assumed) and warned about. A template or query the sandbox cannot answer faithfully fails the
    evaluation, naming it.
  - With I(env_text) a proposed C(.env) is evaluated instead of the checkout's, without writing it.
  - With I(effect_keys), each key is changed in turn and the launch evaluated again, to tell which
    settings the launcher reads (and which containers and C(/engram) sources they move).
  - Fails clearly, naming the launcher, when it cannot be evaluated - it runs a program by absolute
    path outside the sandbox, runs more than I(max_calls) external commands (a loop), does not finish
    within I(timeout) seconds, exits non-zero or starts no container - and when it starts fewer engine
    ranks than I(expected_ranks) (without it, than the engine containers' own C(--nnodes)), naming each
    missing rank, its host and the last command the launcher aimed at that host (an C(ssh), or a helper
    such as C(python3 scripts/remote.py user@host ...) whose remote command the sandbox does not run).
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  launcher:
    description: Path of the launcher script (C(start.sh)) in its checkout on the head.
    type: path
    required: true
  command:
    description: The launcher command to evaluate.
    type: str
    default: serve
  env_text:
    description:
      - A proposed C(.env) to evaluate instead of the checkout's (written only into the scratch copy).
        Omitted - the checkout's own C(.env) (or, when it is missing, what the launcher does then).
    type: str
  settings:
    description:
      - Declared settings to evaluate as the next serve will see them - converged into the checkout's C(.env)
        as C(launcher_env) writes them (undeclared keys kept), nothing written. Ignored with I(env_text).
    type: dict
  api_key:
    description: The API key the proposed C(.env) carries (with I(settings)).
    type: str
  remove_keys:
    description: Undeclared keys the converge would remove (with I(settings)).
    type: list
    elements: str
    default: []
  env_name:
    description:
      - Name of the launcher's settings file inside the checkout. Omitted - the name the launcher itself reads
        (C(source "$ROOT/fleet.env"), C(ENV_FILE="${ENV_FILE:-$ROOT/.env}")), else C(.env).
    type: str
  home:
    description:
      - Home directory of the head user (default the module user's); C($HOME) in the launcher and its C(.env)
        means this.
    type: path
  user:
    description: Login user on the head (default the module user).
    type: str
  worker_homes:
    description:
      - What was read beforehand in each worker user's home, by user name (the C(launch_sandbox) role's
        C(launch_sandbox_worker_homes)) - relative paths, directories ending in C(/). A worker's command string
        then sees those names (empty files) in its home, so its own tests (C([ -d ~/nccl-2.30.7 ])) answer as
        on the worker. Omitted - a worker user's home is empty (the head's own user keeps the head's home).
    type: dict
    default: {}
  head_host:
    description: Name reported as the head's host (default this node's hostname).
    type: str
  ports:
    description: API ports the stand-in C(docker logs) of the head reports ready on (the head's own C(--port) is added).
    type: list
    elements: int
    default: [8888]
  timeout:
    description: Seconds the evaluation may take.
    type: int
    default: 60
  max_calls:
    description: External commands the launcher may run before it counts as looping.
    type: int
    default: 2000
  effect_keys:
    description: Settings to change one at a time, re-evaluating the launch, to report their effect.
    type: list
    elements: str
    default: []
  expected_ranks:
    description:
      - The number of engine ranks the launch must start (the inventory's TP size, C(preflight_tp_size));
        ranks 0 to I(expected_ranks) - 1 must each get a container, else the module fails naming the missing
        ones. Omitted - the node count the engine containers are given (C(--nnodes)), when they are given
        one; otherwise hosts the launcher aimed commands at without starting an engine there are warnings.
    type: int
  known_launch:
    description:
      - A C(launch_record) that launcher_settings returned moments before (container_env's validation of the
        settings an experiment condition then wrote). For C(serve) without I(effect_keys), its prediction is
        returned as this one when the launcher's files have the same fingerprint and the checkout's C(.env) is
        byte for byte the text it was made from (and it starts every expected rank); otherwise the launcher is
        evaluated.
    type: dict
notes:
  - Supports check mode; the module never changes anything (C(changed) is always false).
  - The launcher runs inside bubblewrap (the launch_sandbox role provides it) - no network, no docker socket,
    a read-only root and home, nothing left running; a redirection to a place outside the sandbox's own fails
    as on a read-only disk. Read-only queries inside a worker command string (C(ip addr), C(hostname -I)) are
    answered by the head, and a worker's files are the head's.
"""

EXAMPLES = r"""
- name: What each container would receive at the next serve (every rank of the inventory's TP size)
  launcher_effective:
    launcher: "{{ dsv41_launcher_dir }}/start.sh"
    head_host: "{{ inventory_hostname }}"
    expected_ranks: "{{ preflight_tp_size | int }}"
  register: launch

- name: Evaluate a proposed .env without writing it, and which engram settings move /engram
  launcher_effective:
    launcher: /home/mia/dsv41-3x-spark/start.sh
    env_text: "{{ proposed_env }}"
    effect_keys: [WORKER_ENGRAM_DIR, WORKER_ENGRAM_DIR_SPARK2]
"""

RETURN = r"""
reused:
  description: True when the prediction is I(known_launch)'s (the launcher was not evaluated again).
  returned: success
  type: bool
containers:
  description:
    - Every container the launch starts, in order of start - name, host, role (head/worker), rank, image,
      env (secrets C(***)), env_order, env_sources, mounts (source, target, type, read_only),
      engram_source, network, command, argv (secrets masked), order.
  returned: always
  type: list
  elements: dict
ranks:
  description: Per rank (a string), host, container, role, image, order and the C(/engram) source.
  returned: always
  type: dict
auxiliary:
  description:
    - Containers the launch starts that are not engine ranks (same fields as I(containers), role
      C(auxiliary), rank null), in order of start.
  returned: always
  type: list
  elements: dict
assumed:
  description:
    - Read-only docker queries answered without the daemon (host, command, argv, reasons) - what the module
      assumed instead (an image of this fleet, arm64 and linux; no container but the sandbox's).
  returned: always
  type: list
  elements: dict
order:
  description: C(host/container) of the engine containers in order of start.
  returned: always
  type: list
  elements: str
unstubbed:
  description: External commands the launcher ran that have no stand-in (recorded, not run).
  returned: always
  type: list
  elements: dict
not_run:
  description: File-writing commands aimed outside the sandbox (recorded, not run).
  returned: always
  type: list
  elements: dict
calls:
  description: Every recorded external command (host, command, argv with secrets masked, kind).
  returned: always
  type: list
  elements: dict
key_effects:
  description: Per I(effect_keys) key, effect (bool), ranks whose container changed, engram_ranks, error.
  returned: always
  type: dict
skipped:
  description: Checkout files not copied into the sandbox (too large, or links leaving the checkout).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.launcher.effective import (effective_launch, key_effects, launcher_fingerprint, masked, prediction,
                                                reusable_launch)
from ansible.module_utils.launcher.sandbox import LaunchError, config_name
from ansible.module_utils.envfile.shell import EnvError
from ansible.module_utils.envfile.parse import parse_env
from ansible.module_utils.launcher.env import proposed_env
from ansible.module_utils.base.secrets import secret_values
from ansible.module_utils.base.host_label import host_label


def base_env_text(launcher, env_text, env_name):
    """The .env the evaluation sees: the proposal, else the checkout's, else its .env.example."""
    if env_text is not None:
        return env_text
    checkout = os.path.dirname(os.path.abspath(launcher))
    for name in (env_name, ".env.example"):
        path = os.path.join(checkout, name)
        if os.path.isfile(path):
            with open(path) as fh:
                return fh.read()
    return ""


def run(params):
    """The module result (without ``changed``); raises LaunchError (or EnvError for a proposal)."""
    params = dict(params, env_name=params.get("env_name") or config_name(params["launcher"]))
    if params.get("settings") is not None and params["env_text"] is None:
        checkout = os.path.dirname(os.path.abspath(params["launcher"]))
        params = dict(params, env_text=proposed_env(params["settings"], os.path.join(checkout, params["env_name"]),
                                                    params.get("api_key"), params.get("remove_keys") or ()))
    kw = dict(command=params["command"], env_name=params["env_name"], home=params["home"], user=params["user"],
              head=host_label(params["head_host"]), ports=params["ports"],
              timeout=params["timeout"], max_calls=params["max_calls"], expected_ranks=params.get("expected_ranks"),
              worker_homes=params.get("worker_homes") or {})
    # A prediction made moments before from the same launcher files and the same .env (container_env's
    # validation of the settings it then wrote, in an experiment's condition) is that serve's prediction.
    if params.get("known_launch") and params["command"] == "serve" and not params["effect_keys"]:
        text = base_env_text(params["launcher"], params["env_text"], params["env_name"])
        known = reusable_launch(params["known_launch"], launcher_fingerprint(params["launcher"], kw["worker_homes"],
                                                                             kw["head"]),
                                text, params.get("expected_ranks"))
        if known is not None:
            return dict(known, key_effects={}, reused=True), [], []
    launch = effective_launch(params["launcher"], env_text=params["env_text"], **kw)
    effects = {}
    if params["effect_keys"]:
        text = base_env_text(params["launcher"], params["env_text"], params["env_name"])
        try:
            values = parse_env(text, {"HOME": kw["home"] or os.path.expanduser("~")})
        except EnvError:
            values = {}
        effects = key_effects(params["launcher"], text, params["effect_keys"], values, **kw)
    shown = masked(launch)
    return dict(prediction(params["launcher"], launch, shown), key_effects=effects, reused=False), launch["secrets"], \
        shown["warnings"]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            launcher=dict(type="path", required=True),
            command=dict(type="str", default="serve"),
            env_text=dict(type="str", no_log=True),
            settings=dict(type="dict"),
            api_key=dict(type="str", no_log=True),
            remove_keys=dict(type="list", elements="str", default=[], no_log=False),
            env_name=dict(type="str"),
            home=dict(type="path"),
            worker_homes=dict(type="dict", default={}),
            user=dict(type="str"),
            head_host=dict(type="str"),
            ports=dict(type="list", elements="int", default=[8888]),
            timeout=dict(type="int", default=60),
            max_calls=dict(type="int", default=2000),
            effect_keys=dict(type="list", elements="str", default=[], no_log=False),
            expected_ranks=dict(type="int"),
            known_launch=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    # the settings' secrets (by name or by shape) never come back in the echo of the arguments
    module.no_log_values.update(secret_values(p["settings"] or {}))
    if p["timeout"] < 1 or p["max_calls"] < 1:
        module.fail_json(msg="launcher_effective: timeout and max_calls must be positive (got %d, %d)"
                         % (p["timeout"], p["max_calls"]), changed=False)
    if p["expected_ranks"] is not None and p["expected_ranks"] < 1:
        module.fail_json(msg="launcher_effective: expected_ranks %d is not a positive number of ranks"
                         % p["expected_ranks"], changed=False)
    try:
        result, secrets, warnings = run(p)
    except (LaunchError, EnvError) as exc:
        module.fail_json(msg=str(exc), changed=False)
    for value in secrets:
        module.no_log_values.add(value)
    for text in warnings:       # what the evaluation could not confirm (assumed docker answers, hosts left out)
        module.warn("launcher_effective: %s" % text)
    result["changed"] = False
    module.exit_json(**result)


if __name__ == "__main__":
    main()
