#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: load and validate an experiment definition (run on the control node)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: experiment_definition
short_description: Load an experiments/<stage>.yml definition and refuse anything the schema does not know
description:
  - Reads one experiment definition (YAML) and validates it against the schema in
    C(module_utils/experiment_schema.py) before anything touches a host; run it on the control node
    (delegate to C(localhost)).
  - Unknown keys, unknown check names, unknown parameters of a check, fewer than 5 repetitions, an arm
    with no change or with two kinds of change, duplicate YAML keys and a C(name) that differs from the
    file name are refused; the message names the file and the dotted key.
  - Returns the definition with every default filled in (each arm carries its merged evidence,
    correctness checks, benchmark plan and acceptance rule) and the plan as text lines.
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  path:
    description: Path of the definition on the control node, e.g. C(experiments/stage_c_fence.yml).
    type: path
    required: true
  known_workloads:
    description:
      - Workload names the benchmark role can run (its prompt sets). When given, a benchmark plan naming
        another workload is refused.
    type: list
    elements: str
notes:
  - Reads only; C(changed) is always false. Check mode does the same as a normal run.
"""

EXAMPLES = r"""
- name: Load the stage C definition
  experiment_definition:
    path: "{{ playbook_dir }}/../experiments/stage_c_fence.yml"
    known_workloads: [prose, code, json, math]
  delegate_to: localhost
  run_once: true
  register: experiment
"""

RETURN = r"""
definition:
  description: The normalised definition (schema_version, name, stage, description, applicable_if, requires, baseline, arms).
  returned: success
  type: dict
plan:
  description: The plan as human-readable lines (arms, changes, timing plan, evidence counts, acceptance).
  returned: success
  type: list
  elements: str
source:
  description: The path read.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.experiment_schema import DefinitionError, load_text, plan_lines


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            known_workloads=dict(type="list", elements="str"),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
    except (IOError, OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg="%s: cannot read the experiment definition: %s" % (path, exc), source=path)
    stem = os.path.splitext(os.path.basename(path))[0]
    try:
        defn = load_text(text, source=path, stem=stem, known_workloads=module.params["known_workloads"])
    except DefinitionError as exc:
        module.fail_json(msg=str(exc), source=path)
    module.exit_json(changed=False, definition=defn, plan=plan_lines(defn), source=path)


def main():
    run_module()


if __name__ == "__main__":
    main()
