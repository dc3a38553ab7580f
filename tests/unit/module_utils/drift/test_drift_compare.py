"""Findings from a host snapshot against the declarations (module_utils/drift/compare.py)."""
import copy

import pytest

from ansible.module_utils.drift import compare as dc

MANIFEST = {"draft_tau.py": "a" * 64, "sitecustomize.py": "b" * 64}
DECLARED = {"adapters_manifest": MANIFEST, "clock_exec_start": "/usr/bin/nvidia-smi -lgc 0,2200", "clock_range": "0,2200",
            "layers": [1, 14], "mem_available_floor_gib": 2.0, "contention_names": ["grafana"],
            "default_target": "multi-user.target", "display_manager": "", "is_head": True, "accepted": []}
GOOD = {
    "host": "spark1", "errors": [],
    "clock": {"unit_file": "/etc/systemd/system/nvidia-clock-lock.service", "exec_start": ["/usr/bin/nvidia-smi -lgc 0,2200"],
              "enabled": "enabled", "active": "active", "reset_unit_file": False, "verdict": "locked", "in_state": True,
              "message": "locked (unit applied 0,2200)"},
    "env": {"path": "/home/mia/dsv41-3x-spark/.env", "declared": {"MAX_RUNNING_REQUESTS": "4", "API_KEY": "(secret)"},
            "actual": {"MAX_RUNNING_REQUESTS": "4", "API_KEY": "(secret)"}},
    "adapters": {"dir": "/x/adapter", "files": dict(MANIFEST), "registration_problems": []},
    "image_adapters": dict(MANIFEST),
    "container": {"name": "dsv41-head", "state": "running", "image": "dsv41-sglang:tp3", "image_id": "sha256:1",
                  "engram_source": "/home/mia/dsv41-engram"},
    "image": {"ref": "sha256:1", "id": "sha256:1", "digests": ["dsv41-sglang@sha256:9"]},
    "boot": {"source": "docker logs dsv41-head", "marker_found": True, "packed": {"1": True, "14": True}, "attached": [1, 14],
             "ready": True, "pool_full": 2999808, "max_total_tokens": 3000000, "page_size": 256, "autotune_disagree": 0,
             "autotune_drift": [], "fatal": 0},
    "shards": {"dest": "/e", "shards": [{"layer": 1, "path": "/e/engram-l1-r0of3.bin", "state": "complete", "stale_reason": None},
                                        {"layer": 14, "path": "/e/engram-l14-r0of3.bin", "state": "complete",
                                         "stale_reason": None}]},
    "memory": {"mem_available_bytes": 3 * 2 ** 30},
    "containers": [{"name": "dsv41-head", "state": "running", "serving": True, "image": "dsv41-sglang:tp3"},
                   {"name": "grafana", "state": "running", "serving": False, "image": "grafana/grafana"}],
    "desktop": {"default_target": "multi-user.target", "display_manager": None},
}


def changed(**edits):
    snap = copy.deepcopy(GOOD)
    for path, value in edits.items():
        node = snap
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return snap


def one(snap, declared=DECLARED):
    found = dc.compare_host("spark1", snap, declared)
    assert len(found) == 1, found
    f = found[0]
    return f["area"], f["item"], f["expected"], f["actual"], f["class"]


def test_a_snapshot_as_declared_has_no_finding():
    assert dc.compare_host("spark1", GOOD, DECLARED) == []


@pytest.mark.parametrize("edits,expected", [
    ({"clock__verdict": "drift", "clock__message": "drift (manual -rgc by zurih)"},
     ("clock_lock", "applied lock", "locked 0,2200", "drift (manual -rgc by zurih)", "drift")),
    ({"clock__exec_start": ["/usr/bin/nvidia-smi -lgc 0,1800"]},
     ("clock_lock", "ExecStart", "/usr/bin/nvidia-smi -lgc 0,2200", "/usr/bin/nvidia-smi -lgc 0,1800", "drift")),
    ({"clock__enabled": "disabled"}, ("clock_lock", "enabled at boot", "enabled", "disabled", "drift")),
    ({"clock__reset_unit_file": True}, ("clock_lock", "reset unit", "absent", "installed", "drift")),
    ({"env__actual__MAX_RUNNING_REQUESTS": "6"}, ("env", "MAX_RUNNING_REQUESTS", "4", "6", "drift")),
    ({"env__actual__API_KEY": "(secret changed)"}, ("env", "API_KEY", "(secret)", "changed", "drift")),
    ({"env__actual__EXTRA": "1"}, ("env", "EXTRA", "(unset)", "1", "unmanaged")),
    ({"env__actual": None}, ("env", "/home/mia/dsv41-3x-spark/.env", "present", "missing", "drift")),
    ({"adapters__files__draft_tau.py": "c" * 64}, ("adapters", "draft_tau.py", "a" * 64, "c" * 64, "drift")),
    ({"adapters__registration_problems": ["draft_tau: no finder entry"]},
     ("adapters", "import hook registration", "every enabled adapter registered", "draft_tau: no finder entry", "drift")),
    ({"image_adapters__sitecustomize.py": None}, ("image", "sitecustomize.py inside the image", "b" * 64, "missing", "drift")),
    ({"boot__packed": {"1": True, "14": False}}, ("engine", "layer 14 packed", "packed=True", "packed=False", "degradation")),
    ({"boot__pool_full": 491520, "boot__max_total_tokens": 750000},
     ("engine", "KV pool", ">= 749824 tokens", "491520 tokens (clamped)", "degradation")),
    ({"boot__autotune_disagree": 2}, ("engine", "autotune", "ranks agree", "2 disagreement(s) in the latest boot", "degradation")),
    ({"boot__ready": False}, ("engine", "serving", "Ready in the latest boot", "not ready", "degradation")),
    ({"container__state": "exited"}, ("engine", "serving", "dsv41-head running", "exited", "degradation")),
    ({"shards__shards__1__state": "stale", "shards__shards__1__stale_reason": "index digest changed"},
     ("shards", "layer 14 shard", "complete at /e/engram-l14-r0of3.bin", "stale: index digest changed", "degradation")),
    ({"memory__mem_available_bytes": 2 ** 30}, ("memory", "MemAvailable", ">= 2.0 GiB", "1.00 GiB", "degradation")),
    ({"desktop__default_target": "graphical.target"},
     ("desktop", "default target", "multi-user.target", "graphical.target", "unmanaged")),
    ({"desktop__display_manager": "gdm.service"}, ("desktop", "display manager", "none active", "gdm.service", "unmanaged")),
], ids=lambda v: v[1] if isinstance(v, tuple) else None)
def test_each_declared_item_gives_one_finding(edits, expected):
    snap = copy.deepcopy(GOOD)
    for path, value in edits.items():
        node = snap
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        node[keys[-1]] = value
    assert one(snap) == expected


def test_page_rounding_is_not_a_clamp():
    assert dc.kv_clamped({"max_total_tokens": 3000000, "pool_full": 2999808, "page_size": 256}) == (False, 2999808)
    assert dc.kv_clamped({"max_total_tokens": 750000, "pool_full": 491520, "page_size": None}) == (True, 749824)
    assert dc.kv_clamped({"max_total_tokens": None, "pool_full": 491520}) == (None, None)


def test_workers_are_not_asked_for_ready():
    assert dc.compare_host("spark2", changed(boot__ready=False), dict(DECLARED, is_head=False)) == []


def test_unknown_container_is_unmanaged_and_serving_ones_are_not():
    snap = copy.deepcopy(GOOD)
    snap["containers"].append({"name": "by-hand", "state": "running", "serving": False, "image": "busybox"})
    assert one(snap) == ("containers", "by-hand", "absent (not serving, not in the contention inventory)",
                         "running (busybox)", "unmanaged")


def test_probe_errors_are_probe_findings_and_exit_3():
    snap = changed(errors=[{"area": "shards", "message": "EngramError: no index"}], shards=None)
    found = dc.compare_host("spark1", snap, DECLARED)
    assert [(f["area"], f["class"]) for f in found] == [("shards", "probe")]
    assert dc.exit_code(found) == 3
    assert dc.exit_code([dc.unreachable("spark2", "ssh: connect refused")]) == 3


def test_exit_codes():
    assert dc.exit_code([]) == 0
    assert dc.exit_code(dc.compare_host("spark1", changed(boot__autotune_disagree=1), DECLARED)) == 2


def test_accepted_findings_do_not_count_and_keep_their_reason():
    found = dc.compare_host("spark1", changed(boot__autotune_disagree=2, memory__mem_available_bytes=1), DECLARED)
    open_, acc = dc.split_accepted(found, [{"area": "engine", "item": "auto*", "reason": "stage B"},
                                           {"host": "spark2", "area": "memory", "item": "*", "reason": "other host"}])
    assert [f["item"] for f in open_] == ["MemAvailable"] and [(f["item"], f["accepted"]) for f in acc] == [("autotune", "stage B")]
    assert dc.is_accepted(dc.unreachable("spark1", "x"), [{"area": "*", "item": "*"}]) is None  # never accepted


def test_image_against_the_last_recorded_stage_run():
    record = {"image_id": "sha256:1", "image_digests": ["dsv41-sglang@sha256:9"], "stage": "stage_a 20261130T1Z"}
    assert dc.compare_image("spark1", GOOD["image"], record) == []
    assert dc.compare_image("spark1", GOOD["image"], None) == []
    found = dc.compare_image("spark1", {"id": "sha256:2", "digests": []}, record)
    assert [(f["item"], f["actual"]) for f in found] == [("image id", "sha256:2"), ("image digest", "none")]


def test_unknown_class_is_refused():
    with pytest.raises(ValueError, match="unknown finding class"):
        dc.finding("h", "a", "i", "x", "y", "bogus")
