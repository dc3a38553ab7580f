"""Stage D (the wo_a FP8 twin) through the experiment engine, on the lab.

Each run writes its record under tmp_path (-e experiment_record_root). The lab engine's request path is
sped up through its knob file on the head; the fault tests add LAB_ENGINE_FAULT there and run a trimmed
copy of the definition (one workload at C1, still five measured repetitions): they judge evidence,
correctness and the restore, not speed.
"""
import json
import re
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.experiment.estimate import duration

from experiment_lab import (HOOK, ROOT, engine_healthy, flat, fleet_state, kill_during,
                            lab_definition, record, verdicts)
from experiment_lab import STAGE_TEST_SPEED
from labhelpers import playbook, sh

# stages C to I require stage_a and stage_b in the stage ledger for the running image (the report's order):
# these tests run as an operator does after committing both (tests/playbooks/conftest.py)
STAGES_PASSED = True

RUN = ("-e", "maintenance_window=true")


def expected_duration(name):
    """The estimate the plan must print for a fleet without records (module_utils/experiment/estimate.py)."""
    import json
    from ansible.module_utils.experiment import estimate as experiment_estimate, schema
    defn = schema.validate(yaml.safe_load((ROOT / "experiments" / (name + ".yml")).read_text()), name)
    prompts = {p.stem: len(json.loads(p.read_text()))
               for p in (ROOT / "roles" / "benchmark" / "files" / "prompts").glob("*.json")}
    return experiment_estimate.estimate(defn, {}, prompts)


def run_stage(tmp_path, *extra, **definition):
    rc, out = playbook("stage_d_wo_a.yml", *RUN, "-e", lab_definition(tmp_path, "stage_d_wo_a", **definition),
                       "-e", "experiment_record_root=%s" % (tmp_path / "rec"), *extra)
    return rc, out


@pytest.mark.smoke
def test_check_mode_prints_plan_and_verdicts_and_changes_nothing(tmp_path):
    before = fleet_state()
    rc, out = playbook("stage_d_wo_a.yml", "--check", "-e", "experiment_record_root=%s" % tmp_path)
    assert rc == 0, out[-3000:]
    out = flat(out)
    assert "arm w8: DSV41_WO_A_W8=1; prose/code x C1/C2/C4, 5 reps after 1 warm-up(s), greedy" in out
    assert "w8: []" in out and "mid: []" in out, "each arm's precondition verdict (no failure)"
    assert "mem_available_gib:" in out
    # the expected duration on the fleet: no record of this fleet under tmp_path, so the fleet's figures
    est = expected_duration("stage_d_wo_a")
    assert "expected on this fleet: %s in all, %d boots (boot 12 min 47 s, a fleet boot: Ready about 767 s after " \
           "start" % (duration(est["total_s"]), est["boots"]) in out, out[-3000:]
    for cond in est["conditions"]:
        assert "%s: %s (apply " % (cond["name"], duration(cond["total_s"])) in out
    assert fleet_state() == before
    assert not any(tmp_path.iterdir()), "check mode writes no record"


def test_a_window_too_short_is_refused_before_any_host_changes_naming_what_fits(tmp_path):
    """-e window_minutes=N: a stage expected to take longer is refused, in check mode and in a real run,
    before anything changes, naming the baseline and the arms that would fit with the restore."""
    est = expected_duration("stage_d_wo_a")
    minutes = int((est["conditions"][0]["total_s"] + est["conditions"][1]["total_s"]
                   + est["conditions"][-1]["total_s"]) / 60) + 1
    before = fleet_state()
    for mode in (["--check"], ["-e", "maintenance_window=true"]):
        rc, out = playbook("stage_d_wo_a.yml", *mode, "-e", "experiment_record_root=%s" % tmp_path,
                           "-e", "window_minutes=%d" % minutes)
        out = flat(out)
        assert rc != 0, out[-3000:]
        assert ("stage_d_wo_a refused, nothing changed: it is expected to take %s on this fleet (%d boots), more than "
                "the %d-minute window (window_minutes=%d); the baseline and arm(s) %s with the restore"
                % (duration(est["total_s"]), est["boots"], minutes, minutes, est["conditions"][1]["name"])) in out, \
            out[-3000:]
        assert fleet_state() == before
        assert not any(tmp_path.iterdir())


def test_stage_d_passes_with_the_fp8_kernels_in_every_rank_s_trace(tmp_path, fast_engine):
    before = fleet_state()
    rc, out = run_stage(tmp_path)
    run, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    v = verdicts(rec)
    assert v["w8"]["verdict"] == "pass" and v["mid"]["verdict"] == "pass", rec["verdicts"]
    assert rec["arm_checks"]["w8"] == {"evidence_failures": [], "correctness_failures": []}
    # C1, C2 and C4 of both workloads, labelled by block size, five measured repetitions each
    assert sorted((c["workload"], c["concurrency"]) for c in v["w8"]["comparisons"]) == [
        (w, c) for w in ("code", "prose") for c in (1, 2, 4)]
    assert all(c["baseline"]["n"] == 5 and c["arm"]["n"] == 5 for c in v["w8"]["comparisons"])
    md = (run / "record.md").read_text()
    assert "| C | baseline (block size 3) | w8 (block size 3) | mid (block size 3) |" in md
    assert "| C2 |" in md
    # the W8 validation is proposed for this image, pointing at this record
    (prop,) = [p for p in rec["proposals"] if p["arm"] == "w8"]
    assert prop["validation"]["name"] == "wo_a_w8"
    assert prop["validation"]["image_digest"] == rec["image_digest"] and "@sha256:" in rec["image_digest"]
    assert prop["validation"]["record"].endswith("record.json")
    # seconds per phase and the speculative steps of every condition
    for name in ("baseline", "w8", "mid"):
        t = rec["conditions"][name]["timing"]
        assert t["boot_s"] > 0 and t["benchmark_s"] > 0 and t["total_s"] >= t["boot_s"] + t["benchmark_s"], t
        steps = rec["conditions"][name]["decode_steps"]
        assert steps["host"] == "spark1" and steps["C1"]["committed_tokens_per_step"]["median"] >= 1, steps
    assert "## Each condition: seconds per phase" in md
    # today's image (the lab's default): W8 and MID ran through the einsum bridge on every rank, judged there
    for arm in ("w8", "mid"):
        modes = rec["conditions"][arm]["wo_a_modes"]
        assert sorted(modes) == ["spark1", "spark2", "spark3"] and {m["mode"] for m in modes.values()} == {"bridge"}
    assert "| mid | spark3 | 2 | bridge | no | no |" in md
    print(md)
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()


def test_nonfinite_fails_the_w8_arm_and_the_fleet_is_restored(tmp_path, fast_engine):
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="nonfinite")
    before = fleet_state()
    rc, out = run_stage(tmp_path, trim=True)
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    v = verdicts(rec)
    assert v["w8"]["verdict"] == "fail"
    reasons = " | ".join(v["w8"]["reasons"])
    assert "nonfinite present in the measured window: 'Detected errors during sampling! NaN in the logits.'" in reasons
    assert rec["arm_checks"]["baseline"]["correctness_failures"] == [], "the fault needs W8 armed"
    assert rec["arm_checks"]["mid"] == {"refused": "arm w8 must pass first in this run"}
    assert rec["restore"]["equal"] is True and rec["proposals"] == []
    assert fleet_state() == before and engine_healthy()
    print(reasons)


def test_g4_not_taken_fails_the_w8_arm_on_its_profile_trace(tmp_path, fast_engine):
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="g4_not_taken")
    before = fleet_state()
    rc, out = run_stage(tmp_path, trim=True)
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    failures = rec["arm_checks"]["w8"]["evidence_failures"]
    # the arming line is printed (the adapter ran), but no rank's trace names the fp8 kernel
    assert not any("w8_armed" in f for f in failures), failures
    for host, rank in (("spark1", 0), ("spark2", 1), ("spark3", 2)):
        assert any(f.startswith("%s rank %d: w8_kernel_target missing from the profile trace" % (host, rank))
                   for f in failures), failures
    assert verdicts(rec)["w8"]["verdict"] == "fail"
    assert rec["restore"]["equal"] is True
    assert fleet_state() == before and engine_healthy()
    print(failures)


def test_oom_at_boot_fails_the_arm_with_the_engine_s_own_line_and_restores(tmp_path, fast_engine):
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="oom_at_boot")
    before = fleet_state()
    rc, out = run_stage(tmp_path, trim=True)
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    failures = rec["arm_checks"]["w8"]["evidence_failures"]
    assert failures[0].startswith("did not complete: "), failures
    assert any("torch.OutOfMemoryError: CUDA out of memory" in f for f in failures), failures
    assert verdicts(rec)["w8"]["verdict"] == "fail"
    assert rec["restore"]["equal"] is True
    assert fleet_state() == before and engine_healthy()
    print(failures[:3])


def test_refused_before_any_host_is_touched_on_an_image_without_the_w8_adapter(tmp_path):
    hook = sh("spark1", "cat %s" % HOOK)
    assert '"wo_a_w8"' in hook
    try:
        sh("spark1", "sed -i '/wo_a_w8/d' %s" % HOOK)
        before = fleet_state()
        rc, out = run_stage(tmp_path)
        after = fleet_state()
    finally:
        sh("spark1", "cat > %s <<'EOF'\n%sEOF" % (HOOK, hook))
    assert rc != 0
    out = flat(out)
    assert "stage_d_wo_a refused, nothing changed:" in out
    assert "engine feature wo_a_w8: adapter not in the image or not registered in its import hook" in out
    assert after == before and not (tmp_path / "rec").exists() or not any((tmp_path / "rec").iterdir())


def test_an_arm_that_requires_a_validation_the_ledger_lacks_is_refused(tmp_path):
    doc = yaml.safe_load((ROOT / "experiments" / "stage_d_wo_a.yml").read_text())
    doc["arms"][1]["requires"]["validations"] = ["wo_a_w8"]   # MID as a later stage would ask for it
    before = fleet_state()
    rc, out = run_stage(tmp_path, arms=doc["arms"])
    assert rc != 0
    out = flat(out)
    assert "stage_d_wo_a refused, nothing changed:" in out
    assert "validation wo_a_w8 is not in the ledger for image dsv41-sglang@sha256:" in out
    assert fleet_state() == before


# The lab engine's request path for the killed run: slow enough that the baseline's benchmark (one workload
# at C1, 1 + 5 rounds of 8 answers of 64 tokens) spans several one-second progress rounds, about 10 s.
PROGRESS_TEST_SPEED = 15
# A progress round takes the poll (1 s on the lab inventory) plus one run of the wait module on the worker:
# on 2 busy cores that run takes up to a few seconds.
ROUND_SLACK_S = 4


def _progress_lines(out):
    """(status times in seconds of the day, finished-round lines) of the baseline benchmark's progress."""
    text = flat(out)
    stamp = r"(\d\d):(\d\d):(\d\d) UTC spark2 benchmark baseline: "
    status = [int(h) * 3600 + int(m) * 60 + int(s_) for h, m, s_ in re.findall(r"msg: '?" + stamp, text)]
    done = re.findall(stamp + r"(prose C1 (?:warm-up|repetition) \d of \d) done, ([\d.]+) tok/s", text)
    return status, [(w, float(rate)) for *_, w, rate in done]


def test_a_run_killed_in_an_arm_blocks_the_next_one_until_rollback_finishes_it(tmp_path, fast_engine):
    fast_engine(LAB_ENGINE_SPEED=PROGRESS_TEST_SPEED)
    before = fleet_state()
    root = tmp_path / "rec"
    # progress read every second (the lab's default is 5 s): the status lines below span many rounds
    killed, out = kill_during("stage_d_wo_a.yml", [*RUN, "-e", lab_definition(tmp_path, "stage_d_wo_a", trim=True),
                                                   "-e", "experiment_record_root=%s" % root,
                                                   "-e", "experiment_bench_poll_seconds=1"],
                              "Note when the engine was up: w8")
    assert killed, out[-3000:]
    (run,) = [p for p in root.iterdir() if p.is_dir()]
    # the inventories the run was given (the lab's and the committed stage ledger's), as it names them
    from labhelpers import ledger_inventories
    sources = " ".join("-i %s" % (Path(i).relative_to(ROOT) if str(i).startswith(str(ROOT)) else i)
                       for i in ledger_inventories())
    command = ("ansible-playbook playbooks/rollback.yml %s -e experiment_rollback_run=%s "
               "-e maintenance_window=true -e experiment_record_root=%s" % (sources, run.name, root))
    # the way back was printed before the first change
    said = flat(out).index("If it is interrupted, finish it with: %s" % command)
    assert said < flat(out).index("changed: ["), "the rollback command comes before any change"
    # the baseline's benchmark printed each warm-up and repetition once, and a status line every round
    status, done = _progress_lines(out)
    assert [w for w, _ in done] == ["prose C1 warm-up 1 of 1"] + ["prose C1 repetition %d of 5" % i for i in range(1, 6)]
    assert all(rate > 0 for _, rate in done)
    gaps = [b - a for a, b in zip(status, status[1:])]
    print("progress rounds: %d, seconds between them: %s" % (len(status), gaps))
    assert len(status) >= 4 and max(gaps) <= 1 + ROUND_SLACK_S, (status, gaps)
    killed_state = fleet_state()
    assert killed_state != before, "killed with the w8 settings in place"

    # the next stage is refused before it touches a host, naming the run and the command; check mode says the same
    for args in (RUN, ("--check",)):
        rc, refused = playbook("stage_c_fence.yml", *args, "-e", "experiment_record_root=%s" % root)
        assert rc != 0
        text = flat(refused)
        assert "Refused before touching any host: 1 experiment run(s) on the lab fleet" in text, text[-3000:]
        assert "run %s (stage_d_wo_a, stopped in condition w8 at step restart): %s" % (run.name, command) in text
        assert "PLAY [Stage C" not in refused
    assert fleet_state() == killed_state, "nothing touched"

    rc, out = playbook("rollback.yml", *RUN, "-e", "experiment_rollback_run=%s" % run.name,
                       "-e", "experiment_record_root=%s" % root)
    assert rc == 0, out[-4000:]
    assert "The fleet equals run %s's snapshot." % run.name in flat(out)
    assert fleet_state() == before and engine_healthy()
    # the interrupted run keeps what it measured, marked interrupted with where it stopped
    rec = json.loads((run / "record.json").read_text())
    assert rec["interrupted"] == {"condition": "w8", "step": "restart", "measured": ["baseline"]}
    assert rec["conditions"]["baseline"]["results"][0]["rounds"] == 5
    assert verdicts(rec)["w8"]["verdict"] == "refused"
    assert rec["restore"] == {"equal": True, "differences": {}}
    md = (run / "record.md").read_text()
    assert "**Interrupted** in condition w8 at step restart; finished by playbooks/rollback.yml" in md
    assert json.loads((run / "finished.json").read_text())["by"] == "rollback"
    print(md.split("## Verdicts")[0])

    # finished: the next stage's preflight no longer refuses (its guard runs with every tag)
    rc, out = playbook("stage_c_fence.yml", "--check", "--tags", "preflight", "-e", "experiment_record_root=%s" % root)
    assert rc == 0 and "Refused before touching any host" not in out, out[-3000:]


LONG_REPETITIONS = 120


def test_a_run_killed_mid_benchmark_leaves_no_benchmark_running_and_keeps_its_rounds(tmp_path, fast_engine):
    """Killed while the baseline's benchmark runs: the benchmark (an async job on the load-generating worker)
    outlives its controller and keeps loading the engine; the rollback stops it before the restore's boot (check
    mode only says so) and the record keeps the repetitions it finished, unjudged."""
    fast_engine(LAB_ENGINE_SPEED=PROGRESS_TEST_SPEED)
    before = fleet_state()
    root = tmp_path / "rec"
    # 120 repetitions (about two seconds each here, longer on a busy machine): the benchmark left behind still
    # runs through the check-mode rollback below
    definition = lab_definition(tmp_path, "stage_d_wo_a", trim=True)
    path = Path(definition.split("=", 1)[1])
    doc = yaml.safe_load(path.read_text())
    doc["benchmark"]["repetitions"] = LONG_REPETITIONS
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    killed, out = kill_during("stage_d_wo_a.yml", [*RUN, "-e", definition, "-e", "experiment_record_root=%s" % root,
                                                   "-e", "experiment_bench_poll_seconds=1"],
                              "benchmark baseline: prose C1 repetition 1 of %d done" % LONG_REPETITIONS)
    assert killed, out[-3000:]
    (run,) = [p for p in root.iterdir() if p.is_dir()]
    progress = "/tmp/dsv41-experiment/%s-baseline.progress.json" % run.name
    left = json.loads(sh("spark2", "cat %s" % progress))
    alive = "kill -0 %d 2>/dev/null && echo alive || echo gone" % left["pid"]
    assert left["state"] == "running" and sh("spark2", alive).strip() == "alive", "the benchmark outlived its run"

    args = ("-e", "experiment_rollback_run=%s" % run.name, "-e", "experiment_record_root=%s" % root)
    rc, checked = playbook("rollback.yml", "--check", *RUN, *args)
    assert rc == 0, checked[-3000:]
    assert "spark2 benchmark baseline is still running (pid %d): it would be stopped with SIGTERM" % left["pid"] \
        in flat(checked)
    assert sh("spark2", alive).strip() == "alive", "check mode stops nothing"

    rc, out = playbook("rollback.yml", *RUN, *args)
    assert rc == 0, out[-4000:]
    said = re.search(r"spark2 benchmark baseline was still running \(pid %d\): stopped with SIGTERM; (\d+) of \d+ "
                     r"rounds finished, (\d+) measured repetition\(s\) kept in the record: prose C1 #1 " % left["pid"],
                     flat(out))
    assert said and int(said.group(2)) >= 1, flat(out)[-3000:]
    assert flat(out).index("stopped with SIGTERM") < flat(out).index("The fleet equals run")
    assert sh("spark2", alive).strip() == "gone"
    assert fleet_state() == before and engine_healthy()
    rec = json.loads((run / "record.json").read_text())
    (cut,) = [b for b in rec["interrupted"]["unfinished_benchmarks"] if b["label"] == "baseline"]
    assert cut["stopped"] and [(r["kind"], r["number"]) for r in cut["rounds"]][:2] == [("warmup", 1), ("measured", 1)]
    assert rec["interrupted"]["step"] == "benchmark" and rec["interrupted"]["condition"] == "baseline"
    md = (run / "record.md").read_text()
    assert re.search(r"Benchmark \*\*baseline\*\* was cut off after \d+ of \d+ rounds \(\w+, stopped by the "
                     r"rollback\); its measured repetitions, kept here and not judged: prose C1 repetition 1 of "
                     r"%d: " % LONG_REPETITIONS, md)
    print(md.split("## Verdicts")[0])
