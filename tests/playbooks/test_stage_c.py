"""Stage C (folded-result fence) through the experiment engine, on the lab.

Each run writes its record under tmp_path (-e experiment_record_root); the lab engine's request path is
sped up through its host-side knob file on the head (LAB_ENGINE_SPEED), which the tests remove again.
"""
import json

import pytest
import yaml

from labhelpers import ROOT, lab, playbook, sh

HOSTS = ("spark1", "spark2", "spark3")
KNOBS = "/etc/dsv41-lab/engine.env"
HOOK = "/home/mia/dsv41-3x-spark/adapter/sitecustomize.py"


@pytest.fixture(scope="module", autouse=True)
def fresh_lab():
    lab("up")
    yield


def knobs(**values):
    text = "".join("%s=%s\n" % kv for kv in sorted(values.items()))
    sh("spark1", "printf '%%s' '%s' > %s" % (text, KNOBS))


@pytest.fixture
def fast_engine():
    knobs(LAB_ENGINE_SPEED=40)
    yield knobs
    sh("spark1", "rm -f %s" % KNOBS)


def fleet_state():
    """What the snapshot covers, read directly on the hosts (not through the role)."""
    out = {}
    for host in HOSTS:
        home = "/home/mia" if host == "spark1" else "/home/zurih"
        out[host] = sh(host, "cd %s/dsv41-3x-spark && sha256sum .env start.sh adapter/*.py 2>/dev/null; "
                             "docker inspect --format '{{.Image}}' %s" % (home, "dsv41-head" if host == "spark1"
                                                                          else "dsv41-worker"), check=False)
    return out


def lab_definition(tmp_path):
    """Stage C's definition with regression allowed: on a shared lab machine the stand-in's timings move with
    the load of other work, so a noise 'loss' must not decide these tests; evidence, correctness and the
    restore do (the speed rule itself is unit-tested in tests/unit/test_experiment_stats.py)."""
    doc = yaml.safe_load((ROOT / "experiments" / "stage_c_fence.yml").read_text())
    doc["acceptance"]["regression_allowed"] = True
    path = tmp_path / "def" / "stage_c_fence.yml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(doc))
    return "experiment_definition_file=%s" % path


def record(root):
    (run,) = [p for p in root.iterdir() if p.is_dir()]
    return run, json.loads((run / "record.json").read_text())


def test_check_mode_prints_plan_and_verdicts_and_changes_nothing(tmp_path):
    before = fleet_state()
    rc, out = playbook("stage_c_fence.yml", "--check", "-e", "experiment_record_root=%s" % tmp_path)
    assert rc == 0, out[-3000:]
    out = " ".join(out.split())  # the result callback wraps long lines
    assert "arm fence: DSV41_FOLDED_FENCE=1; prose/code x C1/C4, 5 reps after 1 warm-up(s), greedy" in out
    assert "fence: []" in out, "the fence arm's precondition verdict (no failure)"
    assert "mem_available_gib:" in out and "spark2: 7.55" in out
    assert fleet_state() == before
    assert not any(tmp_path.iterdir()), "check mode writes no record"


def test_stage_c_passes_and_the_fleet_ends_equal_to_its_snapshot(tmp_path, fast_engine):
    before = fleet_state()
    rc, out = playbook("stage_c_fence.yml", "-e", "maintenance_window=true", "-e", lab_definition(tmp_path),
                       "-e", "experiment_record_root=%s" % (tmp_path / "rec"))
    run, rec = record(tmp_path / "rec")
    assert rc == 0, out[-4000:]
    (verdict,) = rec["verdicts"]
    assert verdict["arm"] == "fence" and verdict["verdict"] == "pass", verdict
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert rec["arm_checks"]["fence"] == {"evidence_failures": [], "correctness_failures": []}
    assert sorted((c["workload"], c["concurrency"]) for c in verdict["comparisons"]) == [
        ("code", 1), ("code", 4), ("prose", 1), ("prose", 4)]
    assert all(c["baseline"]["n"] == 5 and c["arm"]["n"] == 5 for c in verdict["comparisons"])
    assert (run / "chart.png").read_bytes()[:4] == b"\x89PNG"
    md = (run / "record.md").read_text()
    assert "| C | baseline (block size 3) | fence (block size 3) |" in md
    assert '+  DSV41_FOLDED_FENCE: "1"' in rec["proposals"][0]["inventory_diff"]
    assert fleet_state() == before


def test_fold_race_fails_the_fence_for_its_greedy_answers_and_restores(tmp_path, fast_engine):
    fast_engine(LAB_ENGINE_SPEED=40, LAB_ENGINE_FAULT="fold_race")
    before = fleet_state()
    rc, out = playbook("stage_c_fence.yml", "-e", "maintenance_window=true", "-e", lab_definition(tmp_path),
                       "-e", "experiment_record_root=%s" % (tmp_path / "rec"))
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    (verdict,) = rec["verdicts"]
    assert verdict["verdict"] == "fail"
    assert any(r.startswith("correctness: greedy_repeat_identical:") for r in verdict["reasons"]), verdict["reasons"]
    assert any(r.startswith("correctness: greedy_concurrent_identical:") for r in verdict["reasons"])
    assert rec["arm_checks"]["baseline"]["correctness_failures"] == [], "the race needs the fence armed"
    assert rec["restore"]["equal"] is True and rec["proposals"] == []
    assert fleet_state() == before


def test_not_applicable_without_the_fence_in_the_import_hook(tmp_path):
    hook = sh("spark1", "cat %s" % HOOK)
    assert '"folded_fence"' in hook
    try:
        sh("spark1", "sed -i '/folded_fence/d' %s" % HOOK)
        rc, out = playbook("stage_c_fence.yml", "--check", "-e", "experiment_record_root=%s" % tmp_path)
    finally:
        sh("spark1", "cat > %s <<'EOF'\n%sEOF" % (HOOK, hook))
    assert rc == 0, out[-3000:]
    assert "stage_c_fence: not applicable: engine feature folded_fence: adapter not in the image or not registered" \
        in " ".join(out.split())


def test_unknown_key_in_a_definition_is_refused_naming_file_and_key(tmp_path):
    doc = yaml.safe_load((ROOT / "experiments" / "stage_c_fence.yml").read_text())
    doc["arms"][0]["evidense"] = {}
    path = tmp_path / "stage_c_fence.yml"
    path.write_text(yaml.safe_dump(doc))
    before = fleet_state()
    rc, out = playbook("stage_c_fence.yml", "-e", "maintenance_window=true", "-e", "experiment_definition_file=%s" % path,
                       "-e", "experiment_record_root=%s" % tmp_path)
    assert rc != 0
    assert "%s: arms[0].evidense: unknown key" % path in " ".join(out.split())
    assert fleet_state() == before
