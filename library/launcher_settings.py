#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: are these launcher settings allowed, and does start.sh forward every one?"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: launcher_settings
short_description: Check launcher settings against the rules of the fleet's TP size and what each container receives
description:
  - Runs on the head. Evaluates the launcher's own C(serve) path in a sandbox (the module
    C(launcher_effective); nothing on the host changes) with the C(.env) these settings give
    (I(env_text), else the settings rendered by the project's one C(.env) writer), and reads what each
    container - the head and every worker - would receive at the next serve.
  - A declared setting is forwarded on a launch path when the container on that path receives exactly
    the declared value. A setting no container receives is checked by changing it and evaluating again -
    when the launch changes, the launcher reads it itself (engine arguments, mounts, hosts); when nothing
    changes it has no effect (for example a per-host C(WORKER_ENGRAM_DIR_SPARK2) the launcher never
    builds) and is reported as such.
  - Applies the rules of SPEC section 3 ("Adapters and switches" and its "Never" list; the rules live
    in C(module_utils/launcher/rules.py), one rule set per TP size chosen by I(tp_size)) to the declared
    settings and to what each container receives,
    so a launcher-side default the rules forbid (C(DSV41_CACHE_GIB=4), C(SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=1))
    is refused naming the key, the value the container would get and where it comes from, with the fix
    (set it explicitly in the C(.env)). C(DSPARK_SPS_TABLE) is refused only when the file it names exists
    where the container reads it (the container path mapped through its mounts); otherwise the engine
    stays on the verify-all schedule and that is returned in C(notes).
  - Warnings (e.g. C(DSV41_CACHE_WAYS) with a zero cache) are returned in C(setting_warnings) and shown
    as Ansible warnings, never fatal. Fails with one line per problem when a rule is broken or (with
    I(fail_on_unforwarded)) a set variable is not forwarded by a path, or when the launcher cannot be
    evaluated. Read-only.
  - Keys that are not shell identifiers (or are the shell's or the loader's own variables) and values
    the C(.env) cannot hold as data are errors (rule C(env_writable)) naming the key; nothing is evaluated.
  - Secret values (the project's one secret rule, C(module_utils/base/secrets.py)) never appear in the
    result or in messages; they are shown as C(***).
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  settings:
    description:
      - The declared launcher settings (the C(.env) as a mapping KEY -> value). None or an empty
        string means unset; booleans mean 1/0.
    type: dict
    required: true
  launcher:
    description: Path of the launcher C(start.sh) in its checkout on the head.
    type: path
    required: true
  tp_size:
    description:
      - Tensor-parallel size of the fleet (from the inventory); C(TP_SIZE) must equal it, and it chooses the rule
        set. TP3 refuses the TP4 profile's values (16 slots, 8M-token pool, 0.80 fraction, 4 GiB row cache,
        shared-expert padding, C(DSV41_TP_PAD=0)); TP4 takes them and requires C(DSV41_SHARED_PAD_K) to be the
        padding adapter's 0/1 switch and C(EP_SIZE) 4, 2 or 1. Any other size fails naming the value, before
        anything is evaluated.
    type: int
    required: true
  env_text:
    description:
      - The C(.env) the next serve will read (a check-mode preview of a change). Default - the settings
        (and I(api_key)) rendered by the project's C(.env) writer.
    type: str
  env_path:
    description:
      - The checkout's current C(.env) on the head. When given (and I(env_text) is not), the evaluated
        C(.env) is that file with the declared settings converged into it as C(launcher_env) writes it, so
        the keys the inventory does not declare (addresses, worker names, site keys the launcher reads)
        take part exactly as they will at the next serve. A missing file means the settings alone.
    type: path
  remove_keys:
    description: Undeclared keys the converge will remove (C(container_env_remove_keys)); with I(env_path).
    type: list
    elements: str
    default: []
  api_key:
    description: The API key the rendered C(.env) carries (only used when I(env_text) is not given).
    type: str
  validated:
    description:
      - Validations recorded by earlier stages that unlock dependent settings. Known values
        C(wo_a_w8) (unlocks C(DSV41_WO_A_W8_DROP)), C(block5) (k=5 alone measured; unlocks
        C(DSV41_VERIFY_CAP)), C(folded_sampling_budget) (unlocks C(SGLANG_DSPARK_FOLDED_SAMPLING=2)),
        C(block_verify) (block verification passed its checks; the confidence cap's sampled test needs it).
    type: list
    elements: str
    default: []
  packed:
    description: Every rank runs from packed Engram shards (required for C(DSV41_ENGRAM_PREFETCH)).
    type: bool
    default: false
  timing:
    description: The settings are for a timing run (C(DSV41_ENGRAM_PREFETCH_CHECK) is then refused).
    type: bool
    default: false
  varied:
    description:
      - Keys an experiment arm varies deliberately (the keys of its settings). A hold rule leaves such a key to
        the arm (today C(MEM_FRACTION_STATIC), otherwise held at 0.95 on TP3).
    type: list
    elements: str
    default: []
  fail_on_unforwarded:
    description: Fail when a set variable is not forwarded by a launch path (else only report it).
    type: bool
    default: true
  worker_files:
    description:
      - Host paths known to exist on each worker (host -> list of paths), for the C(DSPARK_SPS_TABLE)
        verdict on workers; a worker path not listed here cannot be judged from the head (a note).
    type: dict
    default: {}
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
  host_label:
    description: Name used in messages (default the node's hostname).
    type: str
  known_effects:
    description:
      - A C(key_effects_record) an earlier run of this module returned (an experiment passes the one read at
        its start to every condition). The effect of a key no container receives is then taken from it when the
        launcher's files (its checkout, the workers' homes and the head's name, C(launcher_fingerprint)) are the
        same and the key is declared with the same value; every other such key is evaluated again.
    type: dict
notes:
  - Supports check mode; the module never changes anything (C(changed) is always false).
"""

EXAMPLES = r"""
- name: Check the declared settings against what each container receives at the next serve
  launcher_settings:
    settings: "{{ dsv41_launcher_settings }}"
    launcher: "{{ dsv41_launcher_dir }}/start.sh"
    tp_size: "{{ groups['dsv41_ranks'] | length }}"
    validated: "{{ dsv41_validated | default([]) }}"
    packed: "{{ dsv41_all_packed | default(false) }}"
  register: launcher_check

- name: Report only (a forwarding gap is listed, not fatal)
  launcher_settings:
    settings: {SGLANG_DSPARK_FOLDED_SAMPLING: "0", SGLANG_FLASHINFER_MOE_FUSED_FINALIZE: "0"}
    launcher: /home/mia/dsv41-3x-spark/start.sh
    tp_size: 3
    fail_on_unforwarded: false
"""

RETURN = r"""
key_effects_record:
  description:
    - What the effects of the keys no container receives were (fingerprint of the launcher's files, and per
      key its declared value and effect), for I(known_effects) of a later run.
  returned: when the launcher could be evaluated
  type: dict
launch_record:
  description:
    - The prediction of this serve (what launcher_effective returns), with the fingerprint of the launcher's
      files and the sha256 of the C(.env) text it was made from; launcher_effective's I(known_launch) reuses it
      when the C(.env) written afterwards is that text and the files are the same.
  returned: when the launcher could be evaluated
  type: dict
effects_reused:
  description: The keys whose effect came from I(known_effects) instead of a new evaluation.
  returned: when the launcher could be evaluated
  type: list
  elements: str
forward_lists:
  description: Variables every container of each launch path receives (head, worker), in launch order.
  returned: always
  type: dict
  contains:
    head: {description: Received by the head container, type: list, elements: str}
    worker: {description: Received by every worker container, type: list, elements: str}
unforwarded:
  description: Per path, the set variables some container of the path does not receive (sorted).
  returned: always
  type: dict
  contains:
    head: {description: Not received by the head container, type: list, elements: str}
    worker: {description: Not received by a worker container, type: list, elements: str}
forwarding_gaps:
  description: One message per container that does not receive a set variable.
  returned: always
  type: list
  elements: str
no_effect:
  description: Set variables the launcher does not read and no container receives.
  returned: always
  type: list
  elements: str
overridden:
  description: Containers that receive another value than the declared one (the launcher sets it).
  returned: always
  type: list
  elements: str
launcher_reads:
  description: Set variables no container receives that the launcher reads itself (changing them changes the launch).
  returned: always
  type: list
  elements: str
errors:
  description:
    - One message per broken rule (and key), naming the key, its value and, for a container, where it
      comes from.
  returned: always
  type: list
  elements: str
setting_warnings:
  description:
    - Warning-level notes (never fatal), e.g. cache ways without a row cache, or a I(validated)
      name that unlocks nothing here (possibly a typo). Each is also raised as an Ansible warning
      (C(warnings) is Ansible's own result key, so the list has this name).
  returned: always
  type: list
  elements: str
notes:
  description: C(DSPARK_SPS_TABLE) verdicts per container (not found - verify-all; cannot tell on a worker).
  returned: always
  type: list
  elements: str
findings:
  description: Every broken rule as {rule, level, key, message, hosts}.
  returned: always
  type: list
  elements: dict
problems:
  description: The lines of the failure message (errors, then forwarding gaps when fatal).
  returned: always
  type: list
  elements: str
ranks:
  description: Per rank, host, container, role, image, order and C(/engram) source at the next serve.
  returned: when the launcher could be evaluated
  type: dict
settings:
  description: The settings that were checked, secret values masked as C(***).
  returned: always
  type: dict
launcher:
  description: The start.sh that was evaluated.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.base.host_label import host_label
from ansible.module_utils.launcher import check
from ansible.module_utils.envfile import parse, shell
from ansible.module_utils.launcher import rules, values
from ansible.module_utils.launcher.effective import (effective_launch, effects_record, key_effects, launch_record,
                                                launcher_fingerprint, reusable_effects, summary)
from ansible.module_utils.launcher.sandbox import LaunchError
from ansible.module_utils.launcher.env import proposed_env
from ansible.module_utils.base.secrets import secret_values


def _probe(worker_files):
    known = dict((h, set(p or [])) for h, p in (worker_files or {}).items())

    def exists(host, path, is_head):
        if is_head:
            return os.path.exists(path)
        return True if path in known.get(host, ()) else (False if host in known else None)
    return exists


def evaluate(settings, launcher, tp_size, validated=(), packed=False, timing=False, fail_on_unforwarded=True,
             env_text=None, api_key=None, worker_files=None, home=None, head_host=None, timeout=60,
             env_path=None, remove_keys=(), worker_homes=None, varied=(), known_effects=None):
    """The module result (without ``changed``); raises LaunchError when the launcher cannot be evaluated."""
    base = {"launcher": launcher, "settings": values.mask_settings(settings),
            "forward_lists": {"head": [], "worker": []}, "unforwarded": {"head": [], "worker": []}, "forwarding_gaps": [], "no_effect": [], "overridden": [],
            "launcher_reads": [], "notes": []}
    writable = [f for f in rules.check_settings(settings, tp_size=tp_size) if f.rule == "env_writable"]
    if writable:        # nothing to evaluate: the .env could not be written
        errors = [f.message for f in writable]
        base.update(errors=errors, setting_warnings=[], problems=errors,
                    findings=[dict(f._asdict(), hosts=[]) for f in writable])
        return base
    home = home or os.path.expanduser("~")
    if env_text is None:        # the one writer takes the API key apart from the settings
        env_text = proposed_env(settings, env_path, api_key or values.norm_value(settings.get("API_KEY")), remove_keys)
    text = env_text
    # one cache of the daemon's read-only answers for the base launch and every trial of key_effects: the
    # trials ask the same questions (image arch, running containers) at the same moment
    kw = dict(home=home, head=host_label(head_host), timeout=timeout,
              worker_homes=worker_homes or {}, query_cache={})
    launch = effective_launch(launcher, env_text=text, **kw)
    try:
        env_values = parse.parse_env(text, {"HOME": home})
    except shell.EnvError:
        env_values = {}
    # Each key no container receives is found out by evaluating again (key_effects: a launch per trial). An
    # earlier evaluation's answer for the same key and value on the same launcher files (known_effects, e.g. the
    # experiment's reading at its start) still holds: only the other keys are evaluated.
    wanted = check.unreceived_keys(settings, launch)
    declared = check.declared_keys(settings)
    fingerprint = launcher_fingerprint(launcher, kw["worker_homes"], kw["head"])
    effects = reusable_effects(known_effects, fingerprint, declared, wanted)
    fresh = [k for k in wanted if k not in effects]
    if fresh:
        effects.update(key_effects(launcher, text, fresh, env_values, base=launch, **kw))
    fwd = check.forwarding(settings, launch, effects)
    findings, notes = check.check_launch(settings, launch, env_values, tp_size=tp_size,
                                         validated=frozenset(validated or ()), packed=packed, timing=timing,
                                         varied=frozenset(varied or ()),
                                         path_exists=_probe(worker_files))
    errors = [f["message"] for f in findings if f["level"] == "error"]
    gaps = fwd["gaps"]
    base.update({
        "forward_lists": {"head": check.received(launch, "head"), "worker": check.received(launch, "worker")},
        "unforwarded": fwd["unforwarded"], "forwarding_gaps": fwd["gaps"], "no_effect": fwd["no_effect"],
        "overridden": fwd["overridden"], "launcher_reads": fwd["launcher_reads"], "notes": notes,
        "errors": errors,
        "setting_warnings": [f["message"] for f in findings if f["level"] != "error"] + fwd["no_effect"],
        "findings": findings, "problems": errors + (gaps if fail_on_unforwarded else []), "ranks": summary(launch),
        "key_effects_record": effects_record(fingerprint, declared, dict((k, effects[k]) for k in fresh), known_effects),
        "effects_reused": sorted(k for k in wanted if k not in fresh),
        # this serve's prediction, for the restart right after the .env is written (launcher_effective known_launch)
        "launch_record": launch_record(fingerprint, text, launcher, launch),
    })
    return base


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            settings=dict(type="dict", required=True),
            launcher=dict(type="path", required=True),
            tp_size=dict(type="int", required=True),
            env_text=dict(type="str", no_log=True),
            env_path=dict(type="path"),
            remove_keys=dict(type="list", elements="str", default=[], no_log=False),
            api_key=dict(type="str", no_log=True),
            validated=dict(type="list", elements="str", default=[]),
            packed=dict(type="bool", default=False),
            timing=dict(type="bool", default=False),
            varied=dict(type="list", elements="str", default=[]),
            fail_on_unforwarded=dict(type="bool", default=True),
            worker_files=dict(type="dict", default={}),
            home=dict(type="path"),
            worker_homes=dict(type="dict", default={}),
            head_host=dict(type="str"),
            timeout=dict(type="int", default=60),
            host_label=dict(type="str"),
            known_effects=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    settings = p["settings"] or {}
    # Secret values must not leak through the module's echo of its arguments either.
    # (secret by name, or shaped like a secret under any name: the one rule's secret_values)
    module.no_log_values.update(secret_values(dict((k, values.norm_value(v)) for k, v in settings.items())))
    who = host_label(p["host_label"])
    if p["tp_size"] < 1:
        module.fail_json(msg="%s: tp_size %d is not a positive integer" % (who, p["tp_size"]), changed=False)
    try:
        rules.rules_for(p["tp_size"])
    except rules.UnsupportedTPSize as exc:
        module.fail_json(msg="%s: %s" % (who, exc), changed=False)
    if not os.path.isfile(p["launcher"]):
        module.fail_json(msg="%s: cannot read the launcher %s: no such file" % (who, p["launcher"]), changed=False)
    try:
        result = evaluate(settings, p["launcher"], p["tp_size"], p["validated"], p["packed"], p["timing"],
                          p["fail_on_unforwarded"], p["env_text"], p["api_key"], p["worker_files"], p["home"],
                          p["head_host"], p["timeout"], p["env_path"], p["remove_keys"], p["worker_homes"],
                          p["varied"], p["known_effects"])
    except (LaunchError, shell.EnvError) as exc:
        module.fail_json(msg="%s: %s" % (who, exc), changed=False)
    result["changed"] = False
    unknown = sorted(set(p["validated"]) - set(rules.VALIDATIONS))
    if unknown:   # a typo must not pass silently, but other stages may record their own names
        result["setting_warnings"].extend(["validated: %r unlocks nothing here (known: %s)"
                                           % (v, ", ".join(sorted(rules.VALIDATIONS))) for v in unknown])
    for text in result["setting_warnings"]:
        module.warn("%s: %s" % (who, text))
    if result["problems"]:
        module.fail_json(msg="%s: %d launcher setting problem(s):\n%s"
                         % (who, len(result["problems"]), "\n".join(result["problems"])), **result)
    module.exit_json(**result)


def main():
    run_module()


if __name__ == "__main__":
    main()
