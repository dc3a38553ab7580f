"""Stage H (sampling, one switch per boot) through the experiment engine, on the lab.

The lab's launcher forwards neither SGLANG_DSPARK_FOLDED_SAMPLING nor the prefetch CHECK (as the report's
start.sh): the refusal names the fix, a forward that passes nothing while the variable stays unset (unset is
AUTO, not off), and the module fixture applies it as the operator would. The lab engine folds the sampled
proposal under AUTO when rank 0 keeps at least 0.75 GB after its captures, which the report's state does.
"""
import pytest
import yaml

from experiment_lab import engine_healthy, flat, fleet_state, lab_definition, record, verdicts
from experiment_lab import STAGE_TEST_SPEED
from labhelpers import ROOT, playbook

# stages C to I require stage_a and stage_b in the stage ledger for the running image (the report's order):
# these tests run as an operator does after committing both (tests/playbooks/conftest.py)
STAGES_PASSED = True

RUN = ("-e", "maintenance_window=true")
FORWARD = ("site.yml", "--tags", "container_env", "-e", "container_env_add_forwards=true",
           "-e", '{"container_env_forward_keys": ["SGLANG_DSPARK_FOLDED_SAMPLING"]}')


@pytest.fixture(scope="module")
def forwarded():
    rc, out = playbook(*FORWARD)
    assert rc == 0, out[-4000:]
    assert "changed: [spark1]" in out, "the managed forward was added"
    rc, out = playbook(*FORWARD)
    assert rc == 0 and "changed=0" in out.split("PLAY RECAP")[-1].split("\n")[1], "a second converge changes nothing"


def run_stage(tmp_path, *extra, **definition):
    return playbook("stage_h_sampling.yml", *RUN, "-e", lab_definition(tmp_path, "stage_h_sampling", **definition),
                    "-e", "experiment_record_root=%s" % (tmp_path / "rec"), *extra)


def test_refused_before_any_host_is_touched_until_folded_sampling_is_forwarded_unset(tmp_path):
    before = fleet_state()
    rc, out = run_stage(tmp_path)
    assert rc != 0
    out = flat(out)
    assert "stage_h_sampling refused, nothing changed:" in out
    assert ("SGLANG_DSPARK_FOLDED_SAMPLING is not forwarded on the head and worker launch path (unset is AUTO (the "
            "engine decides from the free memory), not off: leave it undeclared and add a forward that passes "
            "nothing while it stays unset: `ansible-playbook site.yml --tags container_env -e "
            "container_env_add_forwards=true -e '{\\\"container_env_forward_keys\\\": "
            "[\\\"SGLANG_DSPARK_FOLDED_SAMPLING\\\"]}'`)") in out
    assert fleet_state() == before


def test_check_mode_reads_the_folded_decision_first_and_changes_nothing(tmp_path, forwarded):
    before = fleet_state()
    rc, out = playbook("stage_h_sampling.yml", "--check", "-e", "experiment_record_root=%s" % tmp_path)
    assert rc == 0, out[-3000:]
    out = flat(out)
    assert ("arm draft_tau: DSV41_DRAFT_TAU=0.8; prose/code x C1/C4, 5 reps after 1 warm-up(s), sampled") in out
    assert "decision: folded (greedy + sampling)" in out
    assert "folded_force: []" in out and "draft_tau: []" in out and "block_verify: []" in out
    assert "serving_free_gib: spark1: 3.19" in out
    assert fleet_state() == before
    assert not any(tmp_path.iterdir()), "check mode writes no record"


def test_forcing_without_the_budget_is_refused_naming_every_short_rank(tmp_path, forwarded):
    doc = yaml.safe_load((ROOT / "experiments" / "stage_h_sampling.yml").read_text())
    doc["arms"][0]["requires"]["capture_headroom"]["gib"] = 3.5
    before = fleet_state()
    rc, out = run_stage(tmp_path, arms=doc["arms"])
    assert rc != 0
    out = flat(out)
    assert ('"folded_force": ["capture headroom 3.50 GiB per rank required (for folded_sampling_budget); the latest '
            'boot left after its graph captures: spark1 3.19 GiB, spark3 3.40 GiB"]') in out
    assert fleet_state() == before


def test_stage_h_each_switch_from_the_baseline_passes_and_restores(tmp_path, forwarded, fast_engine):
    before = fleet_state()
    rc, out = run_stage(tmp_path)
    run, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    v = verdicts(rec)
    for arm in ("folded_force", "draft_tau", "block_verify"):
        assert v[arm]["verdict"] == "pass", v[arm]
        assert rec["arm_checks"][arm] == {"evidence_failures": [], "correctness_failures": []}
        # one switch per boot: the arm's settings are the baseline's with its one change
        assert rec["conditions"][arm]["settings"] == rec["definition"]["arms"][
            [a["name"] for a in rec["definition"]["arms"]].index(arm)]["settings"]
    for name in ("baseline", "folded_force", "draft_tau", "block_verify"):
        assert rec["conditions"][name]["folded_sampling"]["decision"] == "folded (greedy + sampling)", name
        assert rec["conditions"][name]["mixed_results"][0]["greedy_output_digests"], name
    for arm in ("folded_force", "draft_tau", "block_verify"):
        dist = rec["conditions"][arm]["distribution"]
        assert sorted(dist) == ["code", "prose"] and all(f["p"] >= 0.001 for f in dist.values()), dist
    # the proposal test on every condition, the baseline too: each committed token's PIT in the target's reported
    # distribution, uniform over enough positions per workload
    for name in ("baseline", "folded_force", "draft_tau", "block_verify"):
        prop = rec["conditions"][name]["proposal"]
        print(name, dict((w, (f["positions"], f["bins"], round(f["p"], 4))) for w, f in prop.items()))
        assert sorted(prop) == ["code", "prose"], prop
        assert all(f["positions"] >= 500 and f["p"] >= 0.001 and f["outside"] == 0 for f in prop.values()), prop
    # forcing is promoted with the validation that lets site.yml converge SGLANG_DSPARK_FOLDED_SAMPLING=2
    (force,) = [p for p in rec["proposals"] if p["arm"] == "folded_force"]
    assert force["validation"]["name"] == "folded_sampling_budget"
    assert force["validation"]["image_digest"] == rec["image_digest"]
    # block verification that passes proposes the validation the confidence cap's sampled test needs
    (verify,) = [p for p in rec["proposals"] if p["arm"] == "block_verify"]
    assert verify["validation"]["name"] == "block_verify"
    assert verify["validation"]["image_digest"] == rec["image_digest"]
    md = (run / "record.md").read_text()
    print(md)
    assert "## Sampling: folded decision (rank 0) and sampled answers against the baseline" in md
    assert "## Speculative verification: proposal test and capped-block probe" in md
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()


def test_a_shifted_sampler_and_broken_mixed_batches_fail_their_arms_and_restore(tmp_path, forwarded, fast_engine):
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="sampler_shift,mixed_greedy")
    before = fleet_state()
    rc, out = run_stage(tmp_path, trim=True)
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    v = verdicts(rec)
    assert v["folded_force"]["verdict"] == "pass", v["folded_force"]
    tau = rec["arm_checks"]["draft_tau"]["correctness_failures"]
    verify = rec["arm_checks"]["block_verify"]["correctness_failures"]
    print(tau, verify)
    assert any(f.startswith("sampled_distribution: prose answers are not sampled like the baseline's: chi-square ")
               for f in tau), tau
    assert not any(f.startswith("mixed_batch_greedy") for f in tau), "tau leaves greedy rows alone"
    assert any(f.startswith("sampled_distribution: prose") for f in verify), verify
    assert any(f.startswith("mixed_batch_greedy: prose prompt ") and "not the same answer" in f for f in verify), verify
    assert v["draft_tau"]["verdict"] == "fail" and v["block_verify"]["verdict"] == "fail"
    assert rec["restore"]["equal"] is True
    assert all(p["arm"] == "folded_force" for p in rec["proposals"]), "a failed arm proposes nothing"
    assert fleet_state() == before and engine_healthy()


def test_acceptance_on_the_untempered_proposal_fails_the_proposal_test_naming_workload_bins_and_p(
        tmp_path, forwarded, fast_engine):
    """The report's test of a sampler switch: with draft temperature armed on a folded proposal, acceptance that
    uses the untempered draft distribution commits tokens off the target's; only the proposal test sees it."""
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="tau_untempered")
    doc = yaml.safe_load((ROOT / "experiments" / "stage_h_sampling.yml").read_text())
    before = fleet_state()
    rc, out = run_stage(tmp_path, trim=True, arms=[a for a in doc["arms"] if a["name"] == "draft_tau"])
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    failures = rec["arm_checks"]["draft_tau"]["correctness_failures"]
    print(failures)
    (msg,) = [f for f in failures if f.startswith("proposal_distribution: ")]
    assert msg.startswith("proposal_distribution: prose: committed tokens do not follow the target's reported "
                          "distribution (acceptance is not using the proposal it drew from): randomised PIT over ")
    assert " positions in 10 bins [" in msg and " on 9 df, p=" in msg and msg.endswith(" < 0.001")
    assert not any(f.startswith("mixed_batch_greedy") for f in failures), "greedy rows are not touched"
    base = rec["conditions"]["baseline"]["proposal"]["prose"]
    print("baseline", base["positions"], base["bins"], base["p"])
    assert base["p"] >= 0.001 and rec["arm_checks"]["baseline"]["correctness_failures"] == []
    assert verdicts(rec)["draft_tau"]["verdict"] == "fail" and rec["proposals"] == []
    assert rec["restore"]["equal"] is True
    assert fleet_state() == before and engine_healthy()
