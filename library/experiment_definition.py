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
    C(module_utils/experiment/schema.py) before anything touches a host; run it on the control node
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
    description:
      - Path of the definition on the control node, e.g. C(experiments/stage_c_fence.yml). One of I(path) and
        I(campaign) is required.
    type: path
  campaign:
    description:
      - Path of a campaign on the control node (C(campaigns/<name>.yml), C(module_utils/experiment/campaign.py)),
        several definitions run in one window with one snapshot, one baseline at the start and one at the end,
        and one restore. Each definition it names is loaded and validated from I(definitions_dir) as I(path) is,
        and the returned C(definition) is the one the experiment role runs for the whole campaign.
    type: path
  definitions_dir:
    description: Where the definitions a campaign names are (C(<name>.yml) each).
    type: path
  known_workloads:
    description:
      - Workload names the benchmark role can run (its prompt sets). When given, a benchmark plan naming
        another workload is refused.
    type: list
    elements: str
  record_root:
    description:
      - Where this control node keeps this fleet's experiment records (C(records/<fleet>/experiments)). The expected duration
        of each step is the median of what earlier runs of the same hosts measured there; without records,
        the fleet's figures (a boot of about 767 s) and stated assumptions are used.
    type: path
  hosts:
    description: The fleet's hosts; only records of runs on exactly these hosts are read for the estimate.
    type: list
    elements: str
  fleet:
    description:
      - The fleet's name (C(dsv41_fleet_name)); records of runs that recorded another fleet's name are not read
        for the estimate (the lab's hosts may carry the fleet's host names).
    type: str
  prompt_dir:
    description: The prompt sets (one C(<workload>.json) list each); a round sends every prompt of its workload.
    type: path
  slots:
    description: Request slots an untimed arm warms up to when it sets no C(MAX_RUNNING_REQUESTS).
    type: int
    default: 4
  window_minutes:
    description:
      - The maintenance window's length. When the run is expected to take longer, C(window_refusal) names
        what would fit; the role refuses the run with it before anything changes.
    type: float
notes:
  - Reads only; C(changed) is always false. Check mode does the same as a normal run.
"""

EXAMPLES = r"""
- name: Load the stage C definition
  experiment_definition:
    path: "{{ playbook_dir }}/../experiments/stage_c_fence.yml"
    known_workloads: [prose, code, json, math]
    record_root: "{{ preflight_records_dir }}/experiments"
    hosts: "{{ ansible_play_hosts_all }}"
    prompt_dir: "{{ playbook_dir }}/../roles/benchmark/files/prompts"
    window_minutes: 90
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
  description:
    - The plan as human-readable lines (arms, changes, timing plan, evidence counts, acceptance), then the
      expected duration on this fleet, in all and per condition and step.
  returned: success
  type: list
  elements: str
estimate:
  description:
    - The expected steps (C(module_utils/experiment/estimate.py)) - conditions (baseline, each arm, restore),
      each with apply_s, boot_s, benchmark_s, evidence_s, total_s; boots; total_s; figures (where each came from).
  returned: success
  type: dict
window_refusal:
  description: The refusal when the run does not fit C(window_minutes), naming what would fit; null otherwise.
  returned: success
  type: str
campaign:
  description:
    - For a campaign, its name, description, stages, baseline_drift and boots (campaign, one_by_one, saved);
      null for a single definition.
  returned: success
  type: dict
source:
  description: The path read.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.experiment import campaign as experiment_campaign, estimate as experiment_estimate
from ansible.module_utils.experiment.schema import DefinitionError, load_text
from ansible.module_utils.experiment.arms import plan_lines


def read(module, path, what):
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8")
    except (IOError, OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg="%s: cannot read the %s: %s" % (path, what, exc), source=path)


def stem_of(path):
    return os.path.splitext(os.path.basename(path))[0]


def load_definition(module, path):
    try:
        return load_text(read(module, path, "experiment definition"), source=path, stem=stem_of(path),
                         known_workloads=module.params["known_workloads"])
    except DefinitionError as exc:
        module.fail_json(msg=str(exc), source=path)


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            campaign=dict(type="path"),
            definitions_dir=dict(type="path"),
            known_workloads=dict(type="list", elements="str"),
            record_root=dict(type="path"),
            hosts=dict(type="list", elements="str"),
            fleet=dict(type="str"),
            prompt_dir=dict(type="path"),
            slots=dict(type="int", default=4),
            window_minutes=dict(type="float"),
        ),
        required_one_of=[("path", "campaign")],
        mutually_exclusive=[("path", "campaign")],
        supports_check_mode=True,
    )
    campaign = None
    if module.params["campaign"]:
        path = module.params["campaign"]
        try:
            info = experiment_campaign.load_text(read(module, path, "campaign"), path, stem_of(path))
            folder = module.params["definitions_dir"] or os.path.join(os.path.dirname(os.path.dirname(path)),
                                                                       "experiments")
            defs = [load_definition(module, os.path.join(folder, name + ".yml")) for name in info["stages"]]
            defn = experiment_campaign.merge(info, defs, path)
        except experiment_campaign.CampaignError as exc:
            module.fail_json(msg=str(exc), source=path)
        campaign = dict(info, boots=experiment_campaign.boots(defs))
        plan = experiment_campaign.plan_lines(info, defs)
        for d in defs:
            plan += ["[%s] %s" % (d["name"], line) for line in plan_lines(d)]
    else:
        path = module.params["path"]
        defn = load_definition(module, path)
        plan = plan_lines(defn)
    params = module.params
    window = params["window_minutes"]
    if window is not None and window <= 0:
        module.fail_json(msg="%s: window_minutes must be a positive number of minutes, got %s" % (path, window),
                         source=path)
    workloads = sorted(set(defn["baseline"]["benchmark"]["workloads"]) | set(
        w for arm in defn["arms"] if arm["benchmark"] for w in arm["benchmark"]["workloads"]))
    prompts = experiment_estimate.prompt_counts(params["prompt_dir"], dict((w, w + ".json") for w in workloads)) \
        if params["prompt_dir"] else {}
    figures = experiment_estimate.fleet_figures(params["record_root"], params["hosts"], params["fleet"])
    est = experiment_estimate.estimate(defn, figures, prompts, params["slots"])
    module.exit_json(changed=False, definition=defn, plan=plan + experiment_estimate.plan_lines(est),
                     estimate=est, window_refusal=experiment_estimate.window_refusal(defn["name"], est, window),
                     source=path, campaign=campaign)


def main():
    run_module()


if __name__ == "__main__":
    main()
