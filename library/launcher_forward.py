#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: add forwards to the launcher as a managed, verified, backed-up edit (or roll it back)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: launcher_forward
short_description: Make the launcher forward settings to every container, as a managed edit that fits the script
description:
  - Runs on the head. Evaluates the launcher's C(serve) path in a sandbox (as C(launcher_effective)) with
    the settings in I(forward) set, and finds the ranks whose container does not receive each one.
  - Finds where each launch path builds its container environment by evaluating - each block that can
    hold C(-e NAME=value) arguments (a multi-line array such as the head's argument builder C(_a+=( ... )) or a
    worker argument array printed with C(printf %q), or an expanding heredoc of C(-e NAME=$NAME \\) lines in
    the worker command string) gets a probe in a scratch copy, and the containers that receive it tell
    which block feeds which rank. Forwards are added only there, in the block's form, forwarding the
    variable only when it is set (unset stays unset), marked with a C(dsv41-fleet managed forward) comment.
  - The edited script is evaluated again before it is written - every key must reach every rank with its
    value and nothing else may change. A timestamped copy is kept beside the script; with I(state=rollback)
    the latest (or I(backup)) is copied back.
  - Where the launcher's way is C(EXTRA_CONTAINER_ENV) (every container receives what it lists, found by
    evaluating with a probe), adding a forward is an edit of that line of the checkout's C(.env) instead
    (I(via)), backed up, marked and verified the same way; the inventory should then declare
    C(EXTRA_CONTAINER_ENV) with the same value so a converge keeps it.
  - Refuses, writing nothing, when the script has no block it can edit safely or the edit would not have
    exactly the intended effect. A second run changes nothing. Check mode shows the diff and writes nothing.
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  launcher:
    description: Path of the launcher script (C(start.sh)) in its checkout on the head.
    type: path
    required: true
  forward:
    description:
      - Settings that must reach every container, KEY -> the value the check sets (the declared value).
        Required with I(state=present).
    type: dict
  env_text:
    description: The C(.env) the check evaluates with (default the checkout's own); I(forward) is added to it.
    type: str
  via:
    description:
      - Where the forwards go - C(script) (the launcher's argument builder and worker heredoc), C(env) (the
        C(EXTRA_CONTAINER_ENV) line of the checkout's C(.env)), or C(auto) (C(env) when the launcher passes
        C(EXTRA_CONTAINER_ENV) to every container, else C(script)).
    type: str
    choices: [auto, script, env]
    default: auto
  state:
    description: C(present) adds the missing forwards; C(rollback) restores the newest backup (launcher or C(.env)).
    type: str
    choices: [present, rollback]
    default: present
  backup:
    description: With I(state=rollback), the backup to restore (default the latest beside the launcher).
    type: path
  home:
    description: Home directory of the head user (default the module user's).
    type: path
  worker_homes:
    description:
      - What was read beforehand in each worker user's home, by user name (the C(launch_sandbox) role's
        C(launch_sandbox_worker_homes)) - relative paths, directories ending in C(/). A worker's command string
        then sees those names (empty files) in its home, so its own tests (C([ -d ~/nccl-2.30.7 ])) answer as
        on the worker. Omitted - a worker user's home is empty (the head's own user keeps the head's home).
    type: dict
    default: {}
  head_host:
    description: Name of the head in the result (default this node's hostname).
    type: str
  timeout:
    description: Seconds one evaluation of the launcher may take.
    type: int
    default: 60
notes:
  - Supports check mode and diff mode.
"""

EXAMPLES = r"""
- name: Forward the folded-sampling switch and the prefetch check on both launch paths
  launcher_forward:
    launcher: "{{ dsv41_launcher_dir }}/start.sh"
    forward:
      SGLANG_DSPARK_FOLDED_SAMPLING: "0"
      DSV41_ENGRAM_PREFETCH_CHECK: "1"
  register: forward_edit

- name: Put the launcher back as it was before the last managed edit
  launcher_forward:
    launcher: /home/mia/dsv41-3x-spark/start.sh
    state: rollback
"""

RETURN = r"""
edited:
  description: The file that was (or in check mode would be) edited - the launcher or its C(.env).
  returned: always
  type: str
added:
  description: Per key added, the containers (host and rank) that did not receive it before.
  returned: always
  type: dict
diff_text:
  description: Unified diff of the launcher (what was, or in check mode would be, written).
  returned: always
  type: str
backup:
  description: The copy kept beside the launcher before writing (present), or the one restored (rollback).
  returned: when a backup was written or restored
  type: str
launcher:
  description: The launcher script.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.launcher import edit
from ansible.module_utils.launcher.sandbox import LaunchError
from ansible.module_utils.base.host_label import host_label


def _env_path(launcher):
    return os.path.join(os.path.dirname(os.path.abspath(launcher)), ".env")


def _env(launcher, env_text):
    if env_text is not None:
        return env_text
    path = _env_path(launcher)
    if os.path.isfile(path):
        with open(path) as fh:
            return fh.read()
    return None


def present(params, check_mode):
    """The result of adding the forwards; raises EditRefused / LaunchError (nothing written)."""
    kw = dict(home=params["home"], head=host_label(params["head_host"]),
              timeout=params["timeout"], worker_homes=params.get("worker_homes") or {})
    values = dict((k, "" if v is None else "%s" % v) for k, v in (params["forward"] or {}).items())
    env = _env(params["launcher"], params["env_text"])
    via = params["via"]
    if via == "auto":
        via = "env" if edit.extra_env_passthrough(params["launcher"], env, **kw) else "script"
    target = _env_path(params["launcher"]) if via == "env" else params["launcher"]

    def make_plan():
        if via == "env":
            return edit.plan_env(params["launcher"], values, target, **kw)
        return edit.plan(params["launcher"], values, env, **kw)

    plan = make_plan()
    result = {"launcher": params["launcher"], "edited": target, "added": plan["added"], "diff_text": plan["diff"],
              "changed": plan["new_text"] != plan["text"]}
    if result["changed"]:
        result["diff"] = {"before": plan["text"], "after": plan["new_text"], "before_header": target,
                          "after_header": target}
    if result["changed"] and not check_mode:
        result["backup"] = edit.write(target, plan["new_text"])
        # the file as written, evaluated once more: if it does not forward, it is put back
        again = make_plan()
        if again["new_text"] != again["text"]:
            edit.rollback(params["launcher"], result["backup"])
            raise edit.EditRefused("%s: as written it does not forward %s; it was restored from %s"
                                   % (target, ", ".join(sorted(again["added"])), result["backup"]))
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            launcher=dict(type="path", required=True),
            forward=dict(type="dict"),
            env_text=dict(type="str", no_log=True),
            via=dict(type="str", choices=["auto", "script", "env"], default="auto"),
            state=dict(type="str", choices=["present", "rollback"], default="present"),
            backup=dict(type="path"),
            home=dict(type="path"),
            worker_homes=dict(type="dict", default={}),
            head_host=dict(type="str"),
            timeout=dict(type="int", default=60),
        ),
        required_if=[("state", "present", ("forward",))],
        supports_check_mode=True,
    )
    p = module.params
    if not os.path.isfile(p["launcher"]):
        module.fail_json(msg="%s: no such launcher script" % p["launcher"], changed=False)
    try:
        if p["state"] == "rollback":
            changed, backup, diff = edit.rollback(p["launcher"], p["backup"], module.check_mode,
                                                  _env_path(p["launcher"]))
            module.exit_json(changed=changed, backup=backup, diff_text=diff, added={}, launcher=p["launcher"],
                             edited=backup[:backup.rindex(edit.BACKUP_INFIX)])
        result = present(p, module.check_mode)
    except (edit.EditRefused, LaunchError) as exc:
        module.fail_json(msg=str(exc), changed=False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
