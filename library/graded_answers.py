#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: grade an arm's answers to the graded task set (code run in isolation, JSON, math)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: graded_answers
short_description: Grade answers to the graded code, JSON and math tasks; code runs only inside bubblewrap
description:
  - >-
    Reads decode_bench results of the C(graded) workload (the prompts of C(module_utils/experiment/graded_tasks.py), asked
    with C(purpose=quality) so the answers are kept whole) and grades every distinct answer: math by the final
    number or fraction on the last line, JSON by parsing it and checking the asked keys, types and values, code by
    running the answer's code block followed by the task's asserts.
  - >-
    Code runs only inside real isolation (C(module_utils/base/isolated_python.py)): bubblewrap with new user, mount,
    pid and network namespaces, no capability, nothing of the host but C(/usr) read-only, a private C(/tmp), and
    limits on CPU time, memory, file size and wall time. Without bwrap the module fails and runs nothing (the
    C(launch_sandbox) role installs it on the head).
  - Read-only on the host; nothing the answers do survives the task.
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  results:
    description: decode_bench's C(results) holding the C(graded) workload (other workloads are ignored).
    type: list
    elements: dict
    required: true
  kinds:
    description: The kinds of task asked (the others are not expected to be answered).
    type: list
    elements: str
    choices: [code, json, math]
    default: [code, json, math]
  bwrap:
    description: The bubblewrap program (default the system's C(bwrap)).
    type: path
  python:
    description: The interpreter the code runs on inside the sandbox (it must be under C(/usr)).
    type: path
    default: /usr/bin/python3
  timeout:
    description: Seconds one answer's code may run before its process group is killed.
    type: int
    default: 10
  host_label:
    description: Name used in messages (default the node's hostname).
    type: str
notes:
  - Supports check mode (grading changes nothing, so it grades in check mode too).
"""

EXAMPLES = r"""
- name: Grade the arm's answers to the graded tasks on the head
  graded_answers:
    results: "{{ graded_probe.results }}"
  delegate_to: "{{ preflight_head_host }}"
  register: graded
"""

RETURN = r"""
failures:
  description: One line per answer graded wrong or task not answered, naming the task and showing the answer.
  returned: always
  type: list
  elements: str
graded:
  description: Every task with its verdict per distinct answer ({id, kind, answers, passed}).
  returned: always
  type: list
  elements: dict
msg: {description: One line for the play output, returned: always, type: str}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.base import isolated_python
from ansible.module_utils.experiment import graded_tasks
from ansible.module_utils.base.host_label import host_label


def grade(results, run_code, kinds=None):
    """(failures, per-task table) of the answers in ``results`` to the tasks of ``kinds`` (default all)."""
    answered = graded_tasks.answers(results)
    failures = graded_tasks.failures(answered, run_code, kinds)
    table = []
    for task in graded_tasks.tasks(kinds):
        given = answered.get(task["id"]) or []
        wrong = [f for f in failures if f.startswith("graded_tasks: %s " % task["id"])]
        table.append({"id": task["id"], "kind": task["kind"], "answers": len(given), "passed": bool(given) and not wrong})
    return failures, table


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results=dict(type="list", elements="dict", required=True),
            kinds=dict(type="list", elements="str", choices=list(graded_tasks.KINDS), default=list(graded_tasks.KINDS)),
            bwrap=dict(type="path"),
            python=dict(type="path", default=isolated_python.PYTHON),
            timeout=dict(type="int", default=isolated_python.TIMEOUT_S),
            host_label=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    who = host_label(p["host_label"])
    if not 1 <= p["timeout"] <= 300:
        module.fail_json(msg="%s: timeout=%s refused: 1 to 300 seconds" % (who, p["timeout"]), changed=False)

    def run_code(program):
        return isolated_python.run(program, bwrap=p["bwrap"], python=p["python"], timeout=p["timeout"])

    try:
        failures, table = grade(p["results"], run_code, p["kinds"])
    except isolated_python.IsolationError as exc:
        module.fail_json(msg="%s: graded code tasks not run: %s" % (who, exc), changed=False)
    passed = sum(1 for t in table if t["passed"])
    module.exit_json(changed=False, failures=failures, graded=table,
                     msg="%s: graded tasks %d of %d passed" % (who, passed, len(table)))


if __name__ == "__main__":
    main()
