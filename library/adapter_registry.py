#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module adapter_registry: does the import hook arm every enabled adapter on its switch?"""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: adapter_registry
short_description: Read the launcher's sitecustomize.py import hook and check it arms each enabled adapter
description:
  - Reads the launcher checkout's C(sitecustomize.py) import hook by its structure (Python C(ast), never
    executed) and reports the engine modules its finder wraps (and those it wraps only on the TP4 launcher,
    C(DSV41_LAUNCHER=tp4)), the variable its insertion into C(sys.meta_path) depends on, and every install call
    (an C(install_*) function, or one imported from an adapter module) with the adapter modules it comes from,
    the wrapped modules it runs for, its switch gate (or none) and whether it runs only on the TP4 launcher.
  - An adapter is named by the module its install functions come from and by the hook's own C(install_<name>)
    alias for them, so one adapter installed through several functions (C(install_verify_cap_gate),
    C(install_verify_cap_draft), ...) is one adapter.
  - Per adapter, reports the hooked modules, the gate and whether the declared switch (with its declared
    value) will arm it on the TP3 launcher. An ungated install counts only when the adapter file beside the
    hook reads the switch itself.
  - With I(expected), fails listing every enabled adapter the hook would not arm.
  - Read-only; runs the same in check mode.
options:
  path:
    description: The C(sitecustomize.py) file.
    type: path
    required: true
  expected:
    description: Adapter name (the part after C(install_)) to the switch that must arm it
      (e.g. C(autotune_keep) -> C(DSV41_AUTOTUNE_KEEP)).
    type: dict
    default: {}
  values:
    description: Declared value per switch, used to decide whether it arms the adapter (default C(1), on).
    type: dict
    default: {}
  adapter_dir:
    description: Directory of the adapter files, read to see whether an ungated adapter reads its switch
      itself. Defaults to the directory of I(path).
    type: path
  host_label:
    description: Name used in messages (defaults to the host name).
    type: str
author:
  - DSV41 fleet team
"""

EXAMPLES = r"""
- name: The retention adapter is registered and armed by its switch
  adapter_registry:
    path: /home/mia/dsv41-3x-spark/adapter/sitecustomize.py
    expected:
      autotune_keep: DSV41_AUTOTUNE_KEEP
    values:
      DSV41_AUTOTUNE_KEEP: "1"
"""

RETURN = r"""
finder:
  description: C(class), C(modules) (engine modules wrapped on the TP3 launcher, in order), C(tp4_only) (those
    wrapped only on the TP4 launcher), C(gate) (variables the finder's insertion depends on, e.g.
    C(DSV41_SOURCE); null when it is never inserted).
  returned: success
  type: dict
installs:
  description: One entry per install call; C(function), C(adapter), C(sources) (adapter modules the function is
    imported from), C(line), C(modules), C(module_named), C(gate) (list), C(tp4_only).
  returned: success
  type: list
  elements: dict
adapters:
  description: Per adapter, C(modules), C(gates), C(ungated), C(tp4_only), C(unwrapped); for each expected
    adapter also C(switch), C(value), C(arms) (true, false, or null when a condition cannot be read) and
    C(reason).
  returned: success
  type: dict
problems:
  description: One message per expected adapter the hook would not arm.
  returned: always
  type: list
  elements: str
missing:
  description: Expected adapters with no C(install_*) call at all.
  returned: success
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.adapters.hook import HookError, public, read_hook
from ansible.module_utils.adapters.arming import adapter_reads, arming, hook_problems
from ansible.module_utils.base.host_label import host_label


def report(text, expected, values=None, adapter_reads=None, source="sitecustomize.py"):
    """The module result (without ``changed``) for a hook's text; raises :class:`HookError`."""
    hook = read_hook(text, source=source)
    data = public(hook)
    missing = sorted(a for a in expected if a not in hook["adapters"])
    values = {k: str(v) for k, v in (values or {}).items() if v is not None}
    for adapter, switch in expected.items():
        value = values.get(switch, "1")
        verdict = arming(hook, adapter, switch, value, adapter_reads_switch=(adapter_reads or {}).get(adapter))
        entry = data["adapters"].setdefault(adapter, {"modules": [], "gates": [], "ungated": False,
                                                      "tp4_only": False, "unwrapped": [], "lines": []})
        entry.update(switch=switch, value=value, arms=verdict["arms"], reason=verdict["reason"])
    problems = hook_problems(hook, expected, values=values, source=source, reads_switch=adapter_reads)
    return dict(finder=data["finder"], installs=data["installs"], adapters=data["adapters"],
                problems=problems, missing=missing)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            expected=dict(type="dict", default={}),
            values=dict(type="dict", default={}),
            adapter_dir=dict(type="path"),
            host_label=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    label = host_label(p["host_label"])
    expected = {str(k): str(v) for k, v in (p["expected"] or {}).items()}
    try:
        with open(p["path"], encoding="utf-8") as handle:
            text = handle.read()
        reads = adapter_reads(p["adapter_dir"] or os.path.dirname(p["path"]), expected,
                              read_hook(text, source=p["path"]))
        result = report(text, expected, p["values"], reads, source=p["path"])
    except (OSError, UnicodeDecodeError, HookError) as exc:
        module.fail_json(msg="%s: cannot read the import hook %s: %s" % (label, p["path"], exc), problems=[])
    result["changed"] = False
    if result["problems"]:
        module.fail_json(msg="%s: %s" % (label, "; ".join(result["problems"])), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
