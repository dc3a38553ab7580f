#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module experiment_run: an experiment run's state on the control node (run.json, finished.json)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: experiment_run
short_description: Keep where an experiment run is, what it measured, and whether it finished
description:
  - Runs on the control node (delegate to C(localhost)). Writes C(run.json) in the run's record directory
    (C(<root>/<run>/)) as the run goes, so a run killed in the middle leaves what it had measured and
    where it stopped, and C(finished.json) when a restore proved the fleet equal to the run's snapshot
    (the meaning of a finished run; C(module_utils/experiment/runs.py)).
  - I(state=started) records what runs (definition, fleet, hosts, the exact rollback command and the
    record's inputs); I(state=step) where the run is (condition and step); I(state=measured) what
    conditions measured; I(state=finished) the restore's comparison (C(finished.json) only when equal);
    I(state=status) only reads.
  - Writes are atomic; in check mode nothing is written and the status is still returned.
options:
  root:
    description: Control-node root of the run records (the experiment role's C(experiment_record_root)).
    type: path
    required: true
  run:
    description: The run id (its directory name under I(root)).
    type: str
    required: true
  state:
    description: What to record (see the description), or C(status) to read only.
    type: str
    choices: [started, step, measured, finished, status]
    default: status
  fleet:
    description: With I(state=started), the fleet's name (C(dsv41_fleet_name)); a guard only counts this fleet's runs.
    type: str
  hosts:
    description: With I(state=started), the rank hosts the run acts on.
    type: list
    elements: str
  rollback_command:
    description: With I(state=started), the exact command that finishes this run if it is interrupted.
    type: str
  definition:
    description: With I(state=started), the normalised definition (an interrupted run's record is written from it).
    type: dict
  record_inputs:
    description: With I(state=started), what else the record needs (image digest, images, measured_on, baseline file, start).
    type: dict
  condition:
    description: With I(state=step), the condition running (C(baseline) or an arm; none during the snapshot or restore).
    type: str
  step:
    description: With I(state=step), the step of that condition (settings, restart, benchmark, evidence, restore, ...).
    type: str
  conditions:
    description: With I(state=measured), condition name -> what it measured (merged into the run's).
    type: dict
  arm_checks:
    description: With I(state=measured), condition name -> its evidence and correctness verdicts (merged).
    type: dict
  restore:
    description: With I(state=finished), the restore's comparison (C(equal), C(differences)).
    type: dict
  by:
    description: With I(state=finished), who restored (C(run) at its own end, C(rollback) from playbooks/rollback.yml).
    type: str
    default: run
author:
  - DSV41 fleet team
"""

EXAMPLES = r"""
- name: Say where the run is (a run killed now leaves this in its record)
  experiment_run:
    root: "{{ experiment_record_root }}"
    run: "{{ experiment_run_id }}"
    state: step
    condition: w8
    step: restart
  delegate_to: localhost
  run_once: true

- name: Mark the run finished when the restore proved the fleet equal
  experiment_run:
    root: "{{ experiment_record_root }}"
    run: "{{ experiment_run_id }}"
    state: finished
    restore: "{{ experiment_restore }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
status:
  description: The run's status (run, changed, finished, how, state, at, fleet, hosts, definition, rollback_command).
  returned: always
  type: dict
run_state:
  description: The contents of run.json (empty when there is none).
  returned: when state is status
  type: dict
interrupted:
  description:
    - What the record of this run is written from if it was interrupted (when C(run_state) has a
      definition), namely C(conditions) measured, C(arm_checks) with every condition not finished marked as
      not run, and C(at) (C(condition), C(step), C(measured)).
  returned: when state is status and the run recorded its definition
  type: dict
finished:
  description: With I(state=finished), whether the run is now finished (the fleet equals its snapshot).
  returned: when state is finished
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.experiment import runs as er

STARTED_KEYS = ("fleet", "hosts", "rollback_command", "definition", "record_inputs")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", required=True),
            run=dict(type="str", required=True),
            state=dict(type="str", default="status", choices=["started", "step", "measured", "finished", "status"]),
            fleet=dict(type="str"),
            hosts=dict(type="list", elements="str"),
            rollback_command=dict(type="str"),
            definition=dict(type="dict"),
            record_inputs=dict(type="dict"),
            condition=dict(type="str"),
            step=dict(type="str"),
            conditions=dict(type="dict"),
            arm_checks=dict(type="dict"),
            restore=dict(type="dict"),
            by=dict(type="str", default="run"),
        ),
        required_if=[("state", "step", ["step"]), ("state", "finished", ["restore"]),
                     ("state", "started", ["rollback_command"])],
        supports_check_mode=True,
    )
    p = module.params
    if not p["run"] or os.sep in p["run"] or p["run"] in (".", ".."):
        module.fail_json(msg="experiment_run: run must be a directory name under %s, got %r" % (p["root"], p["run"]))
    run_dir = os.path.join(p["root"], p["run"])
    out = {"changed": False}
    try:
        if p["state"] != "status" and not module.check_mode:
            if p["state"] == "started":
                er.update_run(run_dir, state="running", started=er.utc_now(), at={"condition": None, "step": "snapshot"},
                              **dict((k, p[k]) for k in STARTED_KEYS if p[k] is not None))
            elif p["state"] == "step":
                er.update_run(run_dir, state="running", at={"condition": p["condition"], "step": p["step"]})
            elif p["state"] == "measured":
                er.update_run(run_dir, conditions=p["conditions"] or {}, arm_checks=p["arm_checks"] or {})
            else:
                out["finished"] = er.finish_run(run_dir, p["restore"], p["by"])
            out["changed"] = True
        if p["state"] == "status":  # the whole state (what was measured) only when asked: it can be large
            out["run_state"] = er.read_json(os.path.join(run_dir, er.RUN_FILE)) or {}
            if out["run_state"].get("definition"):
                conditions, checks, stopped = er.interrupted_inputs(out["run_state"])
                out["interrupted"] = {"conditions": conditions, "arm_checks": checks, "at": stopped}
        out["status"] = er.run_status(run_dir) if os.path.isdir(run_dir) else {"run": p["run"], "changed": False}
    except er.RunError as exc:
        module.fail_json(msg="experiment_run %s: %s" % (p["run"], exc), changed=out["changed"])
    module.exit_json(**out)


if __name__ == "__main__":
    main()
