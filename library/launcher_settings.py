#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: are these launcher settings allowed, and does start.sh forward every one?"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: launcher_settings
short_description: Check launcher settings against the TP3 rules and start.sh's forward lists
description:
  - Runs on the head. Reads the launcher C(start.sh), parses its explicit C(HEAD_FORWARD=( ... ))
    and C(WORKER_FORWARD=( ... )) arrays (the only variables that reach the containers), and
    reports, per launch path, every variable the settings set that the path does not forward.
  - Checks the settings against the rules of SPEC section 3 ("Adapters and switches" and its
    "Never" list), e.g. no C(expandable_segments:True), C(SGLANG_FLASHINFER_MOE_FUSED_FINALIZE)
    explicitly 0, no TP4 values on TP3, DROP only after W8 is validated, prefetch only with
    packed shards, the confidence cap only at k=5 after k=5 alone was measured. The rules live
    in C(module_utils/launcher.py) (C(RULES)); warnings (e.g. C(DSV41_CACHE_WAYS) with a zero
    cache) are returned in C(setting_warnings) and shown as Ansible warnings, never fatal.
  - Fails with one line per problem when a rule is broken or (with I(fail_on_unforwarded)) a set
    variable is not forwarded by a path. Read-only.
  - Keys that are not shell identifiers (or are the shell's or the loader's own variables, such as
    C(BASH_ENV), C(PS4), C(PATH), C(LD_PRELOAD)) and values the C(.env) cannot hold as data (a
    newline, carriage return, NUL or other control character, not UTF-8) are errors (rule
    C(env_writable)) naming the key, so nothing is written.
  - Secret values (the project's one secret rule, C(module_utils/secret_rule.py) - API_KEY and any
    name with a KEY, TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL or PAT word in any case, e.g.
    C(hf_token), C(OPENAI_APIKEY), C(DB_PASSWORD2)) never appear in the result or in messages; they
    are shown as C(***).
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  settings:
    description:
      - The rendered launcher settings (the C(.env) as a mapping KEY -> value). None or an empty
        string means unset; booleans mean 1/0.
    type: dict
    required: true
  launcher:
    description: Path of the launcher C(start.sh) on the head.
    type: path
    required: true
  tp_size:
    description: Tensor-parallel size of the fleet (from the inventory); C(TP_SIZE) must equal it.
    type: int
    required: true
  validated:
    description:
      - Validations recorded by earlier stages that unlock dependent settings. Known values
        C(wo_a_w8) (unlocks C(DSV41_WO_A_W8_DROP)), C(block5) (k=5 alone measured; unlocks
        C(DSV41_VERIFY_CAP)), C(folded_sampling_budget) (unlocks C(SGLANG_DSPARK_FOLDED_SAMPLING=2)).
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
  fail_on_unforwarded:
    description: Fail when a set variable is not forwarded by a launch path (else only report it).
    type: bool
    default: true
  host_label:
    description: Name used in messages (default the node's hostname).
    type: str
notes:
  - Supports check mode; the module never changes anything (C(changed) is always false).
  - Keys start.sh consumes itself (engine arguments such as C(MAX_TOTAL_TOKENS), directories,
    hosts) need no forwarding (C(LAUNCHER_KEYS) in C(module_utils/launcher.py)); C(API_KEY) is
    head-only by design.
"""

EXAMPLES = r"""
- name: Check the declared settings against start.sh before a restart
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
forward_lists:
  description: Variables each launch path forwards, in start.sh order.
  returned: always
  type: dict
  contains:
    head: {description: HEAD_FORWARD names, type: list, elements: str}
    worker: {description: WORKER_FORWARD names, type: list, elements: str}
unforwarded:
  description: Per path, the set variables the path does not forward (sorted).
  returned: always
  type: dict
  contains:
    head: {description: Not forwarded to the head container, type: list, elements: str}
    worker: {description: Not forwarded to the worker containers, type: list, elements: str}
errors:
  description: One message per broken rule (and key), naming the key and its value.
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
findings:
  description: Every broken rule as {rule, level, key, message}.
  returned: always
  type: list
  elements: dict
problems:
  description: The lines of the failure message (errors, then forwarding gaps when fatal).
  returned: always
  type: list
  elements: str
settings:
  description: The settings that were checked, secret values masked as C(***).
  returned: always
  type: dict
launcher:
  description: The start.sh that was read.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils import launcher as L
from ansible.module_utils.secret_rule import MIN_SECRET_CHARS


def _label(name):
    if name:
        return name
    try:
        return os.uname().nodename
    except AttributeError:  # pragma: no cover - non-POSIX
        return "this host"


def evaluate(settings, script_text, launcher_path, tp_size, validated, packed, timing, fail_on_unforwarded):
    """The module result (without ``changed``); raises :class:`L.LauncherError` for a bad start.sh."""
    name = os.path.basename(launcher_path) or launcher_path
    forward = L.parse_forward_lists(script_text, source=launcher_path)
    findings = L.check_settings(settings, tp_size=tp_size, validated=frozenset(validated or ()),
                                packed=packed, timing=timing)
    missing = L.unforwarded(settings, forward)
    errors = [f.message for f in findings if f.level == "error"]
    warnings = [f.message for f in findings if f.level != "error"]
    gaps = L.unforwarded_messages(missing, launcher_name=name)
    problems = list(errors) + (gaps if fail_on_unforwarded else [])
    return {
        "launcher": launcher_path,
        "forward_lists": forward,
        "unforwarded": missing,
        "errors": errors,
        "setting_warnings": warnings,
        "findings": [f._asdict() for f in findings],
        "problems": problems,
        "forwarding_gaps": gaps,
        "settings": L.mask_settings(settings),
    }


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            settings=dict(type="dict", required=True),
            launcher=dict(type="path", required=True),
            tp_size=dict(type="int", required=True),
            validated=dict(type="list", elements="str", default=[]),
            packed=dict(type="bool", default=False),
            timing=dict(type="bool", default=False),
            fail_on_unforwarded=dict(type="bool", default=True),
            host_label=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    settings = p["settings"] or {}
    # Secret values must not leak through the module's echo of its arguments either.
    for key, value in settings.items():
        v = L.norm_value(value)
        if L.is_secret(key) and v is not None and len(v) >= MIN_SECRET_CHARS:
            module.no_log_values.add(v)
    who = _label(p["host_label"])
    if p["tp_size"] < 1:
        module.fail_json(msg="%s: tp_size %d is not a positive integer" % (who, p["tp_size"]), changed=False)
    try:
        with open(p["launcher"], "r") as fh:
            script = fh.read()
    except (IOError, OSError) as exc:
        module.fail_json(msg="%s: cannot read the launcher %s: %s" % (who, p["launcher"], exc), changed=False)
    try:
        result = evaluate(settings, script, p["launcher"], p["tp_size"], p["validated"], p["packed"],
                          p["timing"], p["fail_on_unforwarded"])
    except L.LauncherError as exc:
        module.fail_json(msg="%s: %s" % (who, exc), changed=False)
    result["changed"] = False
    unknown = sorted(set(p["validated"]) - set(L.VALIDATIONS))
    if unknown:   # a typo must not pass silently, but other stages may record their own names
        result["setting_warnings"].extend(["validated: %r unlocks nothing here (known: %s)"
                                        % (v, ", ".join(sorted(L.VALIDATIONS))) for v in unknown])
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
