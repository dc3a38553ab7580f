#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: verdicts and the run record of an experiment (control node only)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: experiment_record
short_description: Judge an experiment's arms and write record.json, record.md and chart.png
description:
  - Runs on the control node only (delegate to C(localhost), with C(ansible_python_interpreter) set to
    C(ansible_playbook_python)) because the chart is drawn with matplotlib, pinned in
    C(requirements.txt); the verdicts and the Markdown need the standard library only.
  - Each arm is compared with the baseline measured in the same window, condition by condition
    (workload x concurrency, prose and code apart), by the separation rule of
    C(module_utils/experiment/stats.py) (every arm repetition beats every baseline repetition). A failed
    evidence or correctness check fails the arm whatever its speed.
  - Compares the snapshot taken before the run with the one taken after the restore, item by item.
  - A passing arm proposes, never applies, a diff of the launcher baseline file and a validation ledger
    entry keyed by image digest; both are written into the record for the operator to commit.
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  dest:
    description: Record directory on the control node (created); receives record.json, record.md, chart.png.
    type: path
    required: true
  definition:
    description: The normalised definition returned by M(experiment_definition).
    type: dict
    required: true
  conditions:
    description:
      - Condition name (C(baseline) or an arm name) -> C(results) (the M(decode_bench) results of that
        condition), and optionally C(settings) and C(labels).
    type: dict
    default: {}
  arm_checks:
    description:
      - Arm name -> C(evidence_failures) and C(correctness_failures) (lists of messages naming host and
        rank) and C(refused) (why the arm was not run).
    type: dict
    default: {}
  snapshot:
    description: Host -> items taken before the run (env hash, image id and digest, adapter hashes, clocks).
    type: dict
    default: {}
  restored:
    description: Host -> the same items taken after the restore; compared with I(snapshot).
    type: dict
  baseline_file:
    description: The launcher baseline file on the control node a promotion diff is made against.
    type: path
  image_digest:
    description: Digest of the image the arms ran on (keys a proposed validation).
    type: str
    default: ""
  measured_on:
    description: Label of every figure (lab output or the fleet's name).
    type: str
    default: ""
  started:
    description: Start of the measuring window (UTC text).
    type: str
    default: ""
  estimate:
    description:
      - The run's expected steps from its plan (C(experiment_definition)'s C(estimate)); the record puts each
        condition's expected seconds per step beside the measured ones.
    type: dict
  campaign_drift:
    description:
      - A campaign's A-B-A check (C(module_utils/experiment/campaign.py) C(baseline_drift)). The record tables
        the baseline at the start and at the end, and when it moved every timed arm's verdict fails saying so
        (an untimed arm compares nothing with it; the evidence and quality checks, and what they validate, stand).
    type: dict
  propose:
    description:
      - Propose baseline changes and validations. A campaign's own record does not (each stage's record
        proposes what its arms earned, as its own run would).
    type: bool
    default: true
  not_applicable:
    description: When set, the stage did not apply (the reason); the record says so and judges nothing.
    type: str
  images:
    description: The pinned images an arm ran ({ref - {present, problems, checks, image_id}}, the experiment role's
      facts); the record shows where each was found and the checks it passed before any change.
    type: dict
    default: {}
  interrupted:
    description:
      - The run was interrupted and is recorded by playbooks/rollback.yml from what it kept (C(run.json)),
        with C(condition) and C(step) where it stopped and C(measured) the conditions it had finished, and
        C(unfinished_benchmarks) the benchmarks it left (M(decode_bench_leftovers)), whose finished rounds
        are listed, never judged. The record says so first and does not pass.
    type: dict
  chart:
    description: Draw chart.png (needs matplotlib on the interpreter running the module).
    type: bool
    default: true
notes:
  - Writes only under I(dest) on the control node; in check mode writes nothing and returns the verdicts.
"""

EXAMPLES = r"""
- name: Judge the arms and write the record
  experiment_record:
    dest: "{{ experiment_record_dir }}"
    definition: "{{ experiment.definition }}"
    conditions: "{{ experiment_conditions }}"
    arm_checks: "{{ experiment_arm_checks }}"
    snapshot: "{{ experiment_snapshot }}"
    restored: "{{ experiment_restored }}"
    baseline_file: "{{ (inventory_dir ~ '/group_vars/dsv41_ranks/launcher_baseline.yml') | realpath }}"
  delegate_to: localhost
  run_once: true
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
"""

RETURN = r"""
verdicts:
  description: One per arm, C(arm), C(verdict) (pass, fail, refused), C(reasons), C(wins), C(losses), C(comparisons).
  returned: always
  type: list
  elements: dict
passed:
  description: Every arm passed (and the restore, when compared, was equal).
  returned: always
  type: bool
restore:
  description: C(equal) and per-host C(differences) between I(snapshot) and I(restored).
  returned: when restored is given
  type: dict
proposals:
  description: Per passing arm, the proposed C(inventory_diff) and C(validation) ledger entry.
  returned: always
  type: list
table:
  description: The Markdown record as lines (verdicts and the side-by-side tables).
  returned: always
  type: list
  elements: str
files:
  description: Paths written.
  returned: always
  type: list
  elements: str
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.experiment import campaign
from ansible.module_utils.experiment import record as er
from ansible.module_utils.experiment import snapshot as es


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            definition=dict(type="dict", required=True),
            conditions=dict(type="dict", default={}),
            arm_checks=dict(type="dict", default={}),
            snapshot=dict(type="dict", default={}),
            restored=dict(type="dict"),
            baseline_file=dict(type="path"),
            image_digest=dict(type="str", default=""),
            measured_on=dict(type="str", default=""),
            started=dict(type="str", default=""),
            estimate=dict(type="dict"),
            campaign_drift=dict(type="dict"),
            propose=dict(type="bool", default=True),
            not_applicable=dict(type="str"),
            images=dict(type="dict", default={}),
            interrupted=dict(type="dict"),
            chart=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    defn = p["definition"]
    if p["not_applicable"]:
        verdicts = []
    else:
        verdicts = er.evaluate(defn, p["conditions"], p["arm_checks"])
    drift_reason = campaign.drift_reason(p["campaign_drift"])
    for v in verdicts if drift_reason else []:
        if v["verdict"] != "refused" and v.get("comparisons"):   # an untimed arm compares nothing with it
            v["verdict"] = "fail"
            v["reasons"].append(drift_reason)
    baseline_text = None
    if p["baseline_file"]:
        try:
            with open(p["baseline_file"]) as fh:
                baseline_text = fh.read()
        except (IOError, OSError) as exc:
            module.fail_json(msg="%s: cannot read the launcher baseline: %s" % (p["baseline_file"], exc))
    record_path = os.path.join(p["dest"], "record.json")
    try:
        proposals = er.proposals(defn, verdicts, baseline_text, p["image_digest"], record_path) if p["propose"] else []
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    record = {
        "definition": defn, "measured_on": p["measured_on"], "started": p["started"],
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "conditions": p["conditions"],
        "labels": dict((name, c.get("labels") or {}) for name, c in p["conditions"].items()),
        "arm_checks": p["arm_checks"], "verdicts": verdicts, "snapshot": p["snapshot"],
        "proposals": proposals, "image_digest": p["image_digest"], "not_applicable": p["not_applicable"],
        "images": p["images"],
    }
    if p["estimate"]:
        record["estimate"] = p["estimate"]
    if p["campaign_drift"] is not None:
        record["campaign_drift"] = p["campaign_drift"]
    if p["interrupted"]:
        record["interrupted"] = p["interrupted"]
    if p["restored"] is not None:
        record["restore"] = es.compare(p["snapshot"], p["restored"])
        record["restored"] = p["restored"]
    passed = bool(verdicts) and all(v["verdict"] == "pass" for v in verdicts) and \
        record.get("restore", {"equal": True})["equal"] and not p["interrupted"]
    files = []
    if not module.check_mode:
        try:
            if not os.path.isdir(p["dest"]):
                os.makedirs(p["dest"])
            timed = [a["name"] for a in defn["arms"] if a["timed"] and a["name"] in p["conditions"]]
            if p["chart"] and p["conditions"].get("baseline", {}).get("results"):
                from ansible.module_utils.experiment import chart as experiment_chart
                chart = os.path.join(p["dest"], "chart.png")
                experiment_chart.draw(chart, "%s (stage %s)" % (defn["name"], defn["stage"]), p["conditions"],
                                      ["baseline"] + timed,
                                      verdicts[0]["metric"] if verdicts else "aggregate_tok_s",
                                      verdicts, subtitle=p["measured_on"] or None)
                record["chart"] = chart
                files.append(chart)
            er.write_text(record_path, json.dumps(record, indent=1, sort_keys=True, default=str))
            files.append(record_path)
            md = os.path.join(p["dest"], "record.md")
            er.write_text(md, er.markdown(record))
            files.append(md)
        except Exception as exc:     # noqa: BLE001 - any failure to write is reported with the path
            module.fail_json(msg="%s: cannot write the record: %s: %s" % (p["dest"], type(exc).__name__, exc),
                             verdicts=verdicts)
    module.exit_json(changed=bool(files), verdicts=verdicts, passed=passed, restore=record.get("restore"),
                     proposals=proposals, table=er.markdown(record).splitlines(), files=files)


def main():
    run_module()


if __name__ == "__main__":
    main()
