"""Stage C (folded-result fence) through the experiment engine, on the lab.

Each run writes its record under tmp_path (-e experiment_record_root); the lab engine's request path is
sped up through the host-side knob files (LAB_ENGINE_SPEED, tests/playbooks/experiment_lab.py), which the tests remove again.
"""
import pytest
import yaml

from experiment_lab import (HOOK, ROOT, fleet_state, lab_definition as _lab_definition,
                            record)
from experiment_lab import STAGE_TEST_SPEED
from labhelpers import playbook, sh

# stages C to I require stage_a and stage_b in the stage ledger for the running image (the report's order):
# these tests run as an operator does after committing both (tests/playbooks/conftest.py)
STAGES_PASSED = True


def lab_definition(tmp_path):
    return _lab_definition(tmp_path, "stage_c_fence")


def run_stage(tmp_path):
    """Stage C for real on the lab copy of its definition, its record under tmp_path/rec."""
    return playbook("stage_c_fence.yml", "-e", "maintenance_window=true", "-e", lab_definition(tmp_path),
                    "-e", "experiment_record_root=%s" % (tmp_path / "rec"))


@pytest.mark.smoke
def test_check_mode_refuses_stage_c_until_stages_a_and_b_passed_on_the_running_image(tmp_path, monkeypatch):
    """The report's order: no kernel test before pack + quiet baseline (A) and a stable autotune cache (B).
    Without their ledger entries for the running image the plan is refused naming each stage; with stage_a
    alone it names stage_b only. (With both, the check-mode test below prints the plan.)"""
    import labhelpers
    monkeypatch.setitem(labhelpers.STAGE_LEDGER, "on", False)
    before = fleet_state()
    digest = labhelpers.running_image_digest()
    for layer, missing in ((None, ["A", "B"]), (labhelpers.stage_ledger_layer(tmp_path / "a", ["stage_a"]), ["B"])):
        inventories = (labhelpers.LAB_INVENTORY,) + ((layer,) if layer else ())
        rc, out = playbook("stage_c_fence.yml", "--check", "-e", "experiment_record_root=%s" % tmp_path,
                           inventories=inventories)
        flat = " ".join(out.split())
        assert rc != 0 and "stage_c_fence refused, nothing changed" in flat, flat[-3000:]
        for stage in "AB":
            said = ("stage %s has not passed on image %s (no stage_%s entry in the stage ledger, dsv41_stages_passed: "
                    "run playbooks/stage_%s" % (stage, digest, stage.lower(), stage.lower()))
            assert (said in flat) == (stage in missing), (stage, flat[-3000:])
    assert fleet_state() == before, "a refused plan changes nothing"


@pytest.mark.smoke
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
    rc, out = run_stage(tmp_path)
    run, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    (verdict,) = rec["verdicts"]
    assert verdict["arm"] == "fence" and verdict["verdict"] == "pass", verdict
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert rec["arm_checks"]["fence"] == {"evidence_failures": [], "correctness_failures": []}
    assert sorted((c["workload"], c["concurrency"]) for c in verdict["comparisons"]) == [
        ("code", 1), ("code", 4), ("prose", 1), ("prose", 4)]
    assert all(c["baseline"]["n"] == 5 and c["arm"]["n"] == 5 for c in verdict["comparisons"])
    assert (run / "chart.png").read_bytes()[:4] == b"\x89PNG"
    md = (run / "record.md").read_text()
    print(md)
    # the hash comparison the restore judged: spark1's items before the run and after the restore
    print((run / "snapshot-before.json").read_text(), (run / "snapshot-after.json").read_text())
    assert "| C | baseline (block size 3) | fence (block size 3) |" in md
    assert '+  DSV41_FOLDED_FENCE: "1"' in rec["proposals"][0]["inventory_diff"]
    # what every node ran in each condition: the variables its container received (secrets masked), versions,
    # kernel, graph shapes, and MemAvailable with the pressure stalls at the three readings
    for name, fence in (("baseline", "0"), ("fence", "1")):
        nodes = rec["conditions"][name]["nodes"]
        assert sorted(nodes) == ["spark1", "spark2", "spark3"]
        for host, n in nodes.items():
            assert n["container_env"].get("DSV41_FOLDED_FENCE") == fence, (name, host, n["container_env"])
            assert all(v == "***" for k, v in n["container_env"].items() if "API_KEY" in k)
            assert n["engine_version"] and n["kernel"] and n["image_id"].startswith("sha256:")
            assert n["graph_shapes"].get("target"), (name, host)
            assert all(n["memory"][p]["mem_available_gib"] > 0 for p in ("before_restart", "after_capture",
                                                                          "after_measurement")), n["memory"]
    assert "## Each node (what it ran and its memory, per condition)" in md
    assert "sk-lab" not in (run / "record.json").read_text()
    assert fleet_state() == before


def test_fold_race_fails_the_fence_for_its_greedy_answers_and_restores(tmp_path, fast_engine):
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="fold_race")
    before = fleet_state()
    rc, out = run_stage(tmp_path)
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    (verdict,) = rec["verdicts"]
    assert verdict["verdict"] == "fail"
    print(verdict["reasons"])
    assert any(r.startswith("correctness: greedy_repeat_identical:") for r in verdict["reasons"]), verdict["reasons"]
    assert any(r.startswith("correctness: greedy_concurrent_identical:") for r in verdict["reasons"])
    assert rec["arm_checks"]["baseline"]["correctness_failures"] == [], "the race needs the fence armed"
    assert rec["restore"]["equal"] is True and rec["proposals"] == []
    assert fleet_state() == before


def test_an_arm_that_changes_answers_or_misses_a_needle_fails_its_quality_checks_naming_the_prompt(tmp_path,
                                                                                                    fast_engine):
    """Quality before speed (the report): an armed fence whose greedy answers differ from the baseline's on some
    prompts, and which loses a pass code hidden 100k tokens deep, fails; each failure names the prompt and shows
    both answers (or the answer and the needle). Its answers to the graded code, JSON and math tasks are wrong: each
    task is named with what was wrong (the code's asserts failed inside bubblewrap on the head). The baseline, with
    nothing armed, passes every check."""
    from ansible.module_utils.experiment import graded_tasks as g
    from ansible.module_utils.experiment import quality as q
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="answer_drift,needle_miss,graded_wrong")
    before = fleet_state()
    rc, out = run_stage(tmp_path)
    run, rec = record(tmp_path / "rec")
    assert rc != 0
    assert rec["arm_checks"]["baseline"]["correctness_failures"] == [], "nothing armed: both checks pass"
    failures = rec["arm_checks"]["fence"]["correctness_failures"]
    drift = [f for f in failures if f.startswith("greedy_matches_baseline: ")]
    assert drift and all(" the arm answered '" in f and "' where the baseline answered '" in f for f in drift), failures
    assert any(f.startswith(("greedy_matches_baseline: prose prompt ", "greedy_matches_baseline: code prompt "))
               for f in drift)
    f100 = q.needle_facts(100000)
    (needle,) = [f for f in failures if f.startswith("long_context_needles: ")]
    assert needle.startswith("long_context_needles: needle-100k (about 100,000 tokens, the pass code at 50%% depth): "
                             "answered 'I found no pass code for vault %s in the text.'" % f100["vault"]), needle
    assert "needle-30k" not in needle, "within the reach the needle is found"
    graded = [f for f in failures if f.startswith("graded_tasks: ")]
    assert [f.split(" ")[1] for f in graded] == [t["id"] for t in g.TASKS], graded
    assert "graded_tasks: math-odd-sum (math): final answer 2499, expected 2500; answer: '" in graded[0]
    assert any(f.startswith("graded_tasks: code-gcd (code): its code failed its asserts (exit 1") for f in graded)
    (verdict,) = rec["verdicts"]
    assert verdict["verdict"] == "fail" and rec["proposals"] == []
    assert rec["restore"]["equal"] is True and fleet_state() == before
    print("\n".join(failures))


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
