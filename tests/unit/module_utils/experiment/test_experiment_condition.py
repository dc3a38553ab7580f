"""module_utils/experiment/condition.py: a measured condition's entry of the run's conditions and arm checks,
and the {host: value} read out of the play's hostvars."""
from collections.abc import Mapping

import pytest

from ansible.module_utils.experiment import condition as ec
from test_experiment_checks import FENCE, RANKS, arm, boot
import experiment_filters as filters

HOSTS = ["spark1", "spark2", "spark3"]
ENTRY_KEYS = ["settings", "labels", "hook", "image_ids", "results", "decode_steps", "engram_cache", "telemetry",
              "workload_steps", "timing", "memory", "exposed_us", "mixed_results", "proposal", "capped_probe",
              "folded_sampling", "wo_a_modes", "same_lines", "probe", "nodes", "distribution"]


class HostVarsVars(Mapping):
    """Like Ansible's read-only view of one host's variables: a Mapping, not a dict."""

    def __init__(self, data):
        self._data = data

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)


def test_by_host_reads_the_dotted_path_in_the_order_of_the_hosts_with_the_default_where_missing():
    hostvars = {"spark1": HostVarsVars({"_boot": {"content": "one"}}),
                "spark2": HostVarsVars({"_boot": {"rc": 1}}),       # registered, but without the field
                "spark3": HostVarsVars({}),                         # never registered
                "spark4": HostVarsVars({"_boot": {"content": "not in the play"}})}
    out = ec.by_host(hostvars, ["spark3", "spark1", "spark2"], "_boot.content", "")
    assert list(out.items()) == [("spark3", ""), ("spark1", "one"), ("spark2", "")]
    # a whole registered result, {} where none
    assert ec.by_host(hostvars, HOSTS, "_boot", {}) == {"spark1": {"content": "one"}, "spark2": {"rc": 1}, "spark3": {}}


def test_by_host_keeps_a_present_none_and_gives_none_without_a_default():
    hostvars = {"a": {"snap": {"before": None}}, "b": {"snap": None}, "c": {"snap": {"before": {"x": 1}}}}
    assert ec.by_host(hostvars, ["a", "b", "c"], "snap.before") == {"a": None, "b": None, "c": {"x": 1}}
    assert ec.by_host(hostvars, ["a", "b", "c"], "snap.before", "-") == {"a": None, "b": "-", "c": {"x": 1}}
    assert ec.by_host(hostvars, [], "snap") == {}


def _definition(**memory):
    return {"arms": [arm()], "ranking": {"concurrency": 1}, "profile": {"exposed": None},
            "memory": dict({"floor_gib": 0, "cost_within_headroom": False}, **memory)}


def _inputs(definition, conditions=None, logs=None, **over):
    logs = logs if logs is not None else dict((h, boot(r, [FENCE])) for h, r in RANKS.items())
    readings = {"before_restart": {h: {} for h in HOSTS}, "after_capture": {h: {} for h in HOSTS},
                "after_measurement": {h: {} for h in HOSTS}}
    out = {"definition": definition, "conditions": conditions or {}, "ranks": RANKS, "facts": {"images": {}},
           "clock": {"start": 100.0, "applied": 110.0, "booted": 200.0, "measured": 260.0, "judged": 270.0},
           "logs": logs, "image_ids": {h: "sha256:abc" for h in HOSTS}, "readings": readings,
           "telemetry": {h: {} for h in HOSTS}, "profiles": {h: {} for h in HOSTS},
           "bench": {"results": []}, "short": {}, "needles": {}, "graded_probe": {}, "graded": {}, "mixed": {},
           "proposal_probe": {}, "capped": {}, "sent": {}, "running": {}, "images": {}}
    out.update(over)
    return out


def _condition(name="stage_c_fence", timed=True, **over):
    base = arm() if name not in ec.BASELINES else {"evidence": {}, "correctness": []}
    out = {"name": name, "settings": {"DSV41_FOLDED_FENCE": "1"}, "labels": {}, "timed": timed,
           "benchmark": {"concurrency": [1]}, "requires": {}, "evidence": base.get("evidence") or {},
           "correctness": base.get("correctness") or []}
    out.update(over)
    return out


def test_a_baseline_is_recorded_in_the_entry_order_and_not_judged_against_itself():
    rec = ec.condition_record(_condition("baseline", hook=None), **_inputs(_definition(floor_gib=500)))
    assert list(rec["condition"]) == ENTRY_KEYS
    assert list(rec["arm_checks"]) == ["evidence_failures", "correctness_failures"]
    # the floor judges arms only: a 500 GiB floor fails every arm but not the baseline
    assert rec["arm_checks"]["evidence_failures"] == []
    # nothing measured is nothing answered
    assert rec["arm_checks"]["correctness_failures"] == ["correctness: no answer was collected"]
    assert rec["condition"]["timing"] == filters.dsv41_experiment_phase_seconds(_inputs(_definition())["clock"])
    assert rec["condition"]["probe"] is None and rec["condition"]["distribution"] == {}
    assert rec["condition"]["image_ids"] == {h: "sha256:abc" for h in HOSTS}


def test_an_arm_fails_its_floor_its_pinned_image_and_its_cost_in_that_order():
    definition = _definition(floor_gib=500, cost_within_headroom=True)
    cond = _condition(requires={"pinned_image": "dsv41:pinned", "memory_headroom_gib_per_rank": 2})
    inputs = _inputs(definition, facts={"images": {"dsv41:pinned": {"image_id": "sha256:def"}}})
    rec = ec.condition_record(cond, **inputs)
    fails = rec["arm_checks"]["evidence_failures"]
    ledger = filters.dsv41_memory_ledger(inputs["logs"], RANKS)
    floor = filters.dsv41_memory_floor_failures(ledger, 500)
    pinned = filters.dsv41_experiment_pinned_image_failures(inputs["image_ids"], "dsv41:pinned", inputs["facts"]["images"])
    assert floor and pinned
    evidence = filters.dsv41_experiment_evidence(cond["evidence"], inputs["logs"], RANKS, {h: [] for h in HOSTS})
    assert fails == evidence + floor + pinned + [
        "memory: the baseline's ledger was not recorded; stage_c_fence's cost against its stated headroom 2.00 GiB "
        "cannot be shown"]
    assert rec["condition"]["memory"] == ledger


def test_an_arm_whose_fence_line_is_missing_fails_its_evidence_and_the_graded_failures_come_last():
    logs = dict((h, boot(r, [FENCE] if h != "spark3" else [])) for h, r in RANKS.items())
    cond = _condition()
    rec = ec.condition_record(cond, **_inputs(_definition(), logs=logs, graded={"failures": ["graded: code 3 wrong"]}))
    fails = rec["arm_checks"]["evidence_failures"]
    assert fails[0].startswith("spark3 rank 2: fence_armed missing from the latest boot")
    assert fails == filters.dsv41_experiment_evidence(cond["evidence"], logs, RANKS, {h: [] for h in HOSTS})
    assert rec["arm_checks"]["correctness_failures"][-1] == "graded: code 3 wrong"


def test_an_untimed_condition_records_what_it_sent_and_no_results():
    sent = {"workloads": ["short"], "concurrency": [1, 2, 3], "rounds": 1}
    rec = ec.condition_record(_condition(timed=False), **_inputs(_definition(), sent=sent,
                                                                 bench={"results": [{"workload": "short", "concurrency": 3}]}))
    entry = rec["condition"]
    assert entry["probe"] == {"workloads": ["short"], "concurrency": [1, 2, 3]}
    # what it sent warms the graphs: none of it is ranked or compared with the baseline
    assert entry["results"] == [] and entry["distribution"] == {}
    assert entry["workload_steps"] == filters.dsv41_experiment_workload_steps(_inputs(_definition())["logs"], RANKS, [])
    assert entry["decode_steps"] == filters.dsv41_experiment_decode_steps(_inputs(_definition())["logs"], RANKS, [])


def test_the_per_host_readings_feed_the_ledger_the_exposed_time_and_the_node_facts():
    meminfo = "MemTotal:       127535200 kB\nMemAvailable:    8126464 kB\n"
    inputs = _inputs(_definition())
    inputs["readings"]["before_restart"]["spark1"] = {"meminfo_text": meminfo}
    inputs["profiles"]["spark2"] = {"exposed_us": 1234.5, "kernels": []}
    rec = ec.condition_record(_condition("baseline"), **inputs)["condition"]
    assert rec["memory"]["spark1"]["mem_available_before_gib"] == 7.75
    assert rec["memory"]["spark2"]["mem_available_before_gib"] is None
    assert rec["exposed_us"] == {"spark1": None, "spark2": 1234.5, "spark3": None}
    assert rec["nodes"] == filters.dsv41_experiment_node_facts({}, {}, inputs["readings"], inputs["logs"], RANKS)


@pytest.mark.parametrize("name", ["baseline", "baseline_end"])
def test_the_baselines_are_not_compared_with_the_baseline(name):
    # an arm with the same inputs fails its cost (no baseline ledger) and its floor; a baseline neither
    definition = _definition(cost_within_headroom=True, floor_gib=500)
    cond = _condition(name, requires={"memory_headroom_gib_per_rank": 2})
    assert len(ec.condition_record(dict(cond, name="other"), **_inputs(definition))["arm_checks"]["evidence_failures"]) == 4
    assert ec.condition_record(cond, **_inputs(definition))["arm_checks"]["evidence_failures"] == []
