"""Stage G (block size, then the confidence cap) through the experiment engine, on the lab.

The cap runs only with the block5 validation for the running image: refused first, then given as an
inventory layer (what the operator commits after the block-size run proposes it).
"""
import pytest

from experiment_lab import (engine_healthy, flat, fleet_state, inventory_layer, lab_definition, record,
                            running_image_digest, validation_layer, verdicts)
from experiment_lab import STAGE_TEST_SPEED
from labhelpers import LAB_INVENTORY, playbook

# stages C to I require stage_a and stage_b in the stage ledger for the running image (the report's order):
# these tests run as an operator does after committing both (tests/playbooks/conftest.py)
STAGES_PASSED = True

RUN = ("-e", "maintenance_window=true")


@pytest.fixture(scope="module")
def image_digest(tmp_path_factory):
    return running_image_digest("stage_g_spec.yml", tmp_path_factory.mktemp("digest"))


@pytest.fixture(scope="module")
def block5_validated(image_digest, tmp_path_factory):
    return validation_layer(tmp_path_factory.mktemp("validated"), "block5", image_digest)


@pytest.fixture(scope="module")
def cap_sampled_validated(image_digest, tmp_path_factory):
    """The ledger with both validations the cap's sampled test needs: block5 (stage G) and block_verify (stage H)."""
    return inventory_layer(tmp_path_factory.mktemp("validated2"), "dsv41_validations:\n" + "".join(
        "  - {name: %s, image_digest: '%s', record: records/lab/experiments/%s/record.json}\n" % (n, image_digest, n)
        for n in ("block5", "block_verify")))


def run(tmp_path, name, *extra, inventories=(LAB_INVENTORY,), **definition):
    return playbook("stage_g_spec.yml", *RUN, "-e", lab_definition(tmp_path, name, **definition),
                    "-e", "experiment_record_root=%s" % (tmp_path / "rec"), *extra, inventories=inventories)


def test_check_mode_prints_the_plan_and_changes_nothing(tmp_path, image_digest):
    before = fleet_state()
    rc, out = playbook("stage_g_spec.yml", "--check", "-e", "experiment_record_root=%s" % tmp_path)
    assert rc == 0, out[-3000:]
    out = flat(out)
    assert "arm k5: DSPARK_BLOCK_SIZE=5; prose/code/json/thinking x C1/C2/C4, 5 reps after 1 warm-up(s), greedy" in out
    assert "k5: []" in out
    assert fleet_state() == before and not any(tmp_path.iterdir())


def test_the_cap_before_k5_was_measured_is_refused_before_any_host_is_touched(tmp_path, image_digest):
    before = fleet_state()
    rc, out = run(tmp_path, "stage_g_cap", "-e", "stage_g_part=cap")
    assert rc != 0
    out = flat(out)
    assert "stage_g_cap refused, nothing changed:" in out
    assert '"cap": ["validation block5 is not in the ledger for image %s"]' % image_digest in out
    assert fleet_state() == before


def test_block_size_5_against_3_every_rank_consistent(tmp_path, fast_engine):
    before = fleet_state()
    # Speed decides nothing on the lab, and at this speed a C2/C4 round is too short for rank 0 to log a line at its
    # concurrency in every round, which the per-round committed_per_s needs (the k=5-loses test judges it at C1);
    # the ranking at C1 below still reads the Decode batch lines of each workload's window.
    lab_acceptance = {"metric": "aggregate_tok_s", "rule": "separation", "wins_required": "none",
                      "regression_allowed": True, "promote": True}
    rc, out = run(tmp_path, "stage_g_spec", acceptance=lab_acceptance)
    assert list((tmp_path / "rec").glob("*/record.json")), flat(out)[-4000:]
    run_dir, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    assert verdicts(rec)["k5"]["verdict"] == "pass"
    assert rec["arm_checks"]["k5"] == {"evidence_failures": [], "correctness_failures": []}
    md = (run_dir / "record.md").read_text()
    print(md)
    assert "| C | baseline (block size 3) | k5 (block size 5) |" in md
    (prop,) = rec["proposals"]
    assert prop["validation"]["name"] == "block5"
    assert '+  DSPARK_BLOCK_SIZE: "5"' in prop["inventory_diff"] or 'DSPARK_BLOCK_SIZE: "5"' in prop["inventory_diff"]
    steps = {n: rec["conditions"][n]["decode_steps"]["C1"]["committed_tokens_per_step"]["median"] for n in ("baseline", "k5")}
    print(steps)
    # the report's rank: committed tokens per step / step time at C1, prose, code, structured (JSON) and thinking
    # traffic apart, from the lines rank 0 logged while each workload ran
    for name in ("baseline", "k5"):
        ws = rec["conditions"][name]["workload_steps"]
        assert sorted(ws) == ["code", "json", "prose", "thinking"], ws
        assert all(w["committed_per_s"] and w["lines"] >= 5 for w in ws.values()), ws
    # the thinking workload was asked with thinking on: its answers came with reasoning, the others without
    reasoning = dict((r["workload"], r["reasoning_tokens_total"] or 0)
                     for r in rec["conditions"]["baseline"]["results"] if r["concurrency"] == 1)
    assert reasoning["thinking"] > 0 and reasoning["code"] == reasoning["prose"] == reasoning["json"] == 0, reasoning
    assert "## Ranking at C1: committed tokens per step / step time, per workload" in md
    ranked = md.split("## Ranking at C1")[1].splitlines()
    assert [line.split(" | ")[0] for line in ranked if line.startswith(("| 1 |", "| 2 |"))] == ["| 1", "| 2"] * 4, \
        "both finalists ranked for each of the four workloads"
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()


def test_a_k5_that_loses_to_k3_is_not_promoted_yet_still_unlocks_the_cap(tmp_path, fast_engine):
    """The report: measure k=5 alone; if it does not beat k=3, the cap must still be triable. The lab's verify rows
    cost 30 ms each past three (LAB_ENGINE_STEP_MS_PER_ROW): k=5 commits more tokens per step but loses on
    committed tokens per second of step time. Judged by the definition's own acceptance (no lab relaxation)."""
    import yaml
    from labhelpers import ROOT
    # at the suites' usual speed (200) a step sleeps half a millisecond and the request path's own overhead decides
    # the step time the log reports; at 10 the modelled step time does, as on the fleet
    fast_engine(LAB_ENGINE_SPEED=10, LAB_ENGINE_STEP_MS_PER_ROW=30)
    real = yaml.safe_load((ROOT / "experiments" / "stage_g_spec.yml").read_text())["acceptance"]
    before = fleet_state()
    rc, out = run(tmp_path, "stage_g_spec", trim=True, acceptance=real)
    assert list((tmp_path / "rec").glob("*/record.json")), flat(out)[-4000:]
    _, rec = record(tmp_path / "rec")
    k5 = verdicts(rec)["k5"]
    print(rc, k5)
    assert k5["verdict"] == "fail" and k5["losses"], k5
    assert rec["arm_checks"]["k5"] == {"evidence_failures": [], "correctness_failures": []}
    (prop,) = rec["proposals"]
    assert prop["validation"]["name"] == "block5" and not prop.get("inventory_diff"), \
        "a losing k=5 is never promoted, and its validation is proposed all the same"
    assert rec["restore"]["equal"] is True
    assert fleet_state() == before and engine_healthy()


def test_a_rank_on_another_block_size_fails_rank_consistency_and_rolls_back(tmp_path, fast_engine):
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="rank_length_mismatch")
    before = fleet_state()
    rc, out = run(tmp_path, "stage_g_spec", trim=True)
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    failures = rec["arm_checks"]["k5"]["evidence_failures"]
    print(failures)
    assert ("rank_consistency: speculative_dspark_block_size differs across ranks: 3 on spark3 rank 2; "
            "5 on spark1 rank 0, spark2 rank 1") in failures
    assert any(f.startswith("spark3 rank 2: block_size_5 missing from the latest boot") for f in failures)
    assert rec["restore"]["equal"] is True and rec["proposals"] == []
    assert fleet_state() == before and engine_healthy()


def test_the_cap_on_k5_with_block5_in_the_ledger(tmp_path, block5_validated, fast_engine):
    before = fleet_state()
    rc, out = run(tmp_path, "stage_g_cap", "-e", "stage_g_part=cap", inventories=block5_validated, trim=True)
    _, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    assert verdicts(rec)["cap"]["verdict"] == "pass"
    # the capped block: the greedy probe answers as the uncapped k=5 baseline, with no more tokens per step
    steps = dict((n, rec["conditions"][n]["capped_probe"]["steps"]["prose"]) for n in ("baseline", "cap"))
    print(steps)
    assert steps["cap"]["mean_accept_len"] <= steps["baseline"]["mean_accept_len"] and steps["cap"]["lines"] >= 5
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()


def test_the_sampled_cap_check_mode_plans_it_and_names_both_missing_validations(tmp_path, image_digest):
    """--check prints the plan, then refuses: the cap's sampled test waits for block5 AND block_verify."""
    before = fleet_state()
    rc, out = playbook("stage_g_spec.yml", "--check", "-e", "stage_g_part=cap_sampled",
                       "-e", "experiment_record_root=%s" % tmp_path)
    assert rc != 0
    out = flat(out)
    assert "arm cap: DSV41_VERIFY_CAP=conf:0.1; prose/code/thinking x C1/C4, 5 reps after 1 warm-up(s), sampled" in out
    assert ('stage_g_cap_sampled refused, nothing changed: {"cap": ["validation block5 is not in the ledger for image '
            '%s", "validation block_verify is not in the ledger for image %s"]}' % (image_digest, image_digest)) in out
    assert fleet_state() == before and not any(tmp_path.iterdir())


def test_the_sampled_cap_with_block5_and_block_verify_in_the_ledger(tmp_path, cap_sampled_validated, fast_engine):
    before = fleet_state()
    rc, out = run(tmp_path, "stage_g_cap_sampled", "-e", "stage_g_part=cap_sampled",
                  inventories=cap_sampled_validated, trim=True)
    run_dir, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    assert verdicts(rec)["cap"]["verdict"] == "pass"
    assert rec["arm_checks"]["cap"] == {"evidence_failures": [], "correctness_failures": []}
    for name in ("baseline", "cap"):
        c = rec["conditions"][name]
        assert c["settings"].get("DSV41_VERIFY_CAP", "0") == ("conf:0.1" if name == "cap" else "0")
        prop, steps = c["proposal"]["prose"], c["capped_probe"]["steps"]["prose"]
        print(name, prop["positions"], prop["bins"], prop["p"], steps)
        assert prop["positions"] >= 500 and prop["p"] >= 0.001 and c["mixed_results"][0]["greedy_output_digests"]
    assert (rec["conditions"]["cap"]["capped_probe"]["steps"]["prose"]["mean_accept_len"]
            <= rec["conditions"]["baseline"]["capped_probe"]["steps"]["prose"]["mean_accept_len"])
    print((run_dir / "record.md").read_text().split("## Speculative verification")[1][:1500])
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()


def test_dead_rows_committed_under_the_cap_fail_the_capped_block_naming_prompt_and_figures(
        tmp_path, cap_sampled_validated, fast_engine):
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="cap_dead_rows")
    before = fleet_state()
    rc, out = run(tmp_path, "stage_g_cap_sampled", "-e", "stage_g_part=cap_sampled",
                  inventories=cap_sampled_validated, trim=True)
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    failures = rec["arm_checks"]["cap"]["correctness_failures"]
    print(failures)
    capped = [f for f in failures if f.startswith("capped_block: ")]
    assert any(f.startswith("capped_block: prose prompt ") and " under the cap where the uncapped baseline answered "
               in f for f in capped), capped
    assert any(f.startswith("capped_block: prose: ") and " committed tokens per step under the cap, above the "
               "uncapped baseline's " in f for f in capped), capped
    assert rec["arm_checks"]["baseline"]["correctness_failures"] == [], "the fault needs the cap armed"
    assert verdicts(rec)["cap"]["verdict"] == "fail" and rec["proposals"] == []
    assert rec["restore"]["equal"] is True
    assert fleet_state() == before and engine_healthy()
