"""experiment_checks (through the experiment filters): evidence lines, preconditions, correctness."""
from pathlib import Path

from ansible.module_utils.experiment import schema as es
import experiment_filters as filters

ROOT = Path(__file__).resolve().parents[4]
RANKS = {"spark1": 0, "spark2": 1, "spark3": 2}
FENCE = "[folded_fence] folded DSpark results cloned off the persistent verify buffers"


def arm(name="stage_c_fence", index=0):
    path = ROOT / "experiments" / ("%s.yml" % name)
    return es.load_text(path.read_text(), str(path), name)["arms"][index]


# The report's latest rank-0 boot (lab/seed/dsv41.log, as docker logs --timestamps gives it), re-ranked and
# with packed shards: a healthy boot for the named checks (graphs captured, pool allocated, autotune retuned).
_REPORT_BOOT = (ROOT / "lab" / "seed" / "dsv41.log").read_text().rsplit("server_args=", 1)
_REPORT_BOOT = (_REPORT_BOOT[0].rsplit("\n", 1)[1] + "server_args=" + _REPORT_BOOT[1]).replace("packed=False", "packed=True")


def boot(rank, extra_boot=(), extra_run=()):
    """A rank's latest boot as engine_boot_log hands it over (both streams merged, docker timestamps removed)."""
    ts = ""
    text = _REPORT_BOOT.replace("TP0 EP0", "TP%d EP%d" % (rank, rank)).replace("rank=0 ", "rank=%d " % rank)
    head, ready, tail = text.partition("INFO:     Uvicorn running on")
    pre, _, last = head.rpartition("\n")
    first, _, rest = tail.partition("\n")
    lines = pre.splitlines() + list(extra_boot) + [last + ready + first] + rest.splitlines() + list(extra_run)
    return "".join(ts + line + "\n" for line in lines)


def test_fence_evidence_passes_with_the_line_on_every_rank():
    logs = dict((h, boot(r, [FENCE])) for h, r in RANKS.items())
    assert filters.dsv41_experiment_evidence(arm()["evidence"], logs, RANKS) == []


def test_fence_missing_on_one_rank_is_named():
    logs = dict((h, boot(r, [FENCE] if h != "spark3" else [])) for h, r in RANKS.items())
    out = filters.dsv41_experiment_evidence(arm()["evidence"], logs, RANKS)
    assert out == ["spark3 rank 2: fence_armed missing from the latest boot (0 of 1 line(s) matching %r)" % FENCE]


def test_a_line_seen_only_after_ready_is_not_boot_evidence():
    logs = dict((h, boot(r, [], [FENCE])) for h, r in RANKS.items())
    assert len(filters.dsv41_experiment_evidence(arm()["evidence"], logs, RANKS)) == 3


def test_must_not_run_line_fails_with_the_line_quoted():
    logs = dict((h, boot(r, [FENCE])) for h, r in RANKS.items())
    logs["spark1"] = boot(0, [FENCE], ["[2026-11-30 17:01:00 TP0 EP0] Detected errors during sampling! NaN in the logits."])
    out = filters.dsv41_experiment_evidence(arm()["evidence"], logs, RANKS)
    assert out == ["spark1 rank 0: nonfinite present in the measured window: "
                   "'Detected errors during sampling! NaN in the logits.'"]


def test_prefetch_check_nonzero_is_caught_by_the_negative_lookahead():
    check = arm("stage_e_prefetch", 0)
    armed = ("[2026-11-30 17:00:02 TP0 EP0] DSV41 Engram prefetch ARMED: rows fetched on a side stream after the "
             "hasher (CHECK mode: old path re-run and compared)")
    line = "[2026-11-30 17:02:00 TP0 EP0] DSV41 Engram prefetch CHECK: gathers differing from the synchronous path per layer = %s"
    good = dict((h, boot(r, [armed], [line % "[0, 0]"])) for h, r in RANKS.items())
    assert filters.dsv41_experiment_evidence(check["evidence"], good, RANKS) == []
    bad = dict(good, spark2=boot(1, [armed], [line % "[0, 0]", line % "[2, 0]"]))
    out = filters.dsv41_experiment_evidence(check["evidence"], bad, RANKS)
    assert len(out) == 1 and out[0].startswith("spark2 rank 1: check_nonzero present in the measured window")
    minus = dict(good, spark3=boot(2, [armed], [line % "[-1, 0]"]))
    assert any("check_zero missing" in m or "check_nonzero" in m
               for m in filters.dsv41_experiment_evidence(check["evidence"], minus, RANKS))


def test_profile_evidence_reads_the_kernel_names():
    w8 = arm("stage_d_wo_a", 0)
    twins = "[wo_a_w8] fp8 twins for 43 wo_a weights, 0 left on bf16"
    logs = dict((h, boot(r, [twins])) for h, r in RANKS.items())
    taken = dict((h, ["wo_a_fp8_gemv_g4 (target)", "wo_a_fp8_gemv_g4 (draft)"]) for h in RANKS)
    assert filters.dsv41_experiment_evidence(w8["evidence"], logs, RANKS, taken) == []
    not_taken = dict((h, ["wo_a_bf16_gemv (target)", "wo_a_bf16_gemv (draft)"]) for h in RANKS)
    out = filters.dsv41_experiment_evidence(w8["evidence"], logs, RANKS, not_taken)
    assert len(out) == 6 and out[0].startswith("spark1 rank 0: w8_kernel_target missing from the profile trace")


def test_preconditions_name_every_missing_thing():
    req = dict(arm()["requires"], stages_passed=["A"], packed=True)
    facts = {"features": [], "forwarded": {"head": ["DSV41_FOLDED_FENCE"], "worker": []},
             "packed": {"spark1": True, "spark2": False, "spark3": True},
             "mem_available_gib": {"spark1": 0.3, "spark2": 7.5, "spark3": 4.1}, "ledger": [], "image_digest": "sha256:ab"}
    out = filters.dsv41_experiment_preconditions(req, facts)
    assert out == [
        "stage A has not passed on image sha256:ab (no stage_a entry in the stage ledger, dsv41_stages_passed: "
        "run playbooks/stage_a_pack.yml and commit the entry it proposes)",
        "engine feature folded_fence: adapter not in the image or not registered in its import hook",
        "DSV41_FOLDED_FENCE is not forwarded on the worker launch path (declare it in the inventory, off, and add "
        "the forward: `ansible-playbook site.yml --tags container_env -e container_env_add_forwards=true`)",
        "packed shards required: packed=True missing on spark2",
        "memory headroom 0.50 GiB per rank required; short: spark1 0.30 GiB"]


def test_preconditions_met():
    facts = {"features": ["folded_fence"], "forwarded": {"head": ["DSV41_FOLDED_FENCE"], "worker": ["DSV41_FOLDED_FENCE"]},
             "packed": dict((h, True) for h in RANKS), "mem_available_gib": dict((h, 3.0) for h in RANKS),
             "ledger": [{"name": "stage_a", "image_digest": "sha256:ab"}], "image_digest": "sha256:ab"}
    assert filters.dsv41_experiment_preconditions(dict(arm()["requires"], stages_passed=["A"], packed=True), facts) == []
    assert filters.dsv41_experiment_preconditions({"validations": ["wo_a_w8"]}, facts) == [
        "validation wo_a_w8 is not in the ledger for image sha256:ab"]
    other = dict(facts, image_digest="sha256:cd")
    assert filters.dsv41_experiment_preconditions({"stages_passed": ["A"]}, other)[0].startswith("stage A has not passed")


def res(c, digests, distinct=1, **extra):
    return dict({"workload": "prose", "concurrency": c, "distinct_outputs": distinct,
                 "output_digests": {"p0": digests}, "finish_reasons": {"length": 5}}, **extra)


def test_correctness_checks_repeat_concurrency_finite_and_abort():
    # the quality checks (greedy_matches_baseline, long_context_needles, graded_tasks) have their own tests
    # (test_quality_checks, test_graded_tasks)
    checks = [c for c in arm()["correctness"]
              if c["name"] not in ("greedy_matches_baseline", "long_context_needles", "graded_tasks")]
    good = [res(1, ["aa"]), res(4, ["aa"])]
    assert filters.dsv41_experiment_correctness(checks, good, {}) == []
    raced = [res(1, ["aa", "bb"], distinct=2), res(4, ["cc"])]
    out = filters.dsv41_experiment_correctness(checks, raced, {})
    assert "greedy_repeat_identical: prose C1 gave 2 distinct outputs for one prompt" in out
    assert "greedy_concurrent_identical: prose prompt p0 answered 3 ways across concurrency" in out
    nan = filters.dsv41_experiment_correctness(checks, [res(1, ["aa"], degenerate_outputs=5), res(4, ["aa"])],
                                               {"spark1": boot(0, [], ["Detected errors during sampling! NaN in the logits."])})
    assert nan[0].startswith("finite_outputs: spark1 logged 1 non-finite") and "one repeated token" in nan[1]
    aborted = [res(1, ["aa"], finish_reasons={"abort": 1}), res(4, ["aa"])]
    assert filters.dsv41_experiment_correctness(checks, aborted) == ["no_abort: prose C1 1 repetition(s) ended in abort"]
    assert filters.dsv41_experiment_correctness(checks, []) [-1] == "correctness: no answer was collected"


def test_graded_tasks_fails_only_when_no_graded_answer_came_back():
    """The answers are graded on the head (module graded_answers, whose failures join these); here the check says
    when the graded probe brought nothing back to grade."""
    checks = [{"name": "graded_tasks", "args": {}}]
    graded = dict(res(1, ["aa"]), workload="graded")
    assert filters.dsv41_experiment_correctness(checks, [res(1, ["aa"]), graded]) == []
    assert filters.dsv41_experiment_correctness(checks, [res(1, ["aa"])]) == ["graded_tasks: no graded task was answered"]


def test_snapshot_compare_filter():
    assert filters.dsv41_snapshot_compare({"a": {"x": 1}}, {"a": {"x": 1}})["equal"] is True


def test_fatal_lines_name_host_and_rank():
    tail = ("[2026-11-30 18:16:18 TP0 EP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3015, in run\n'
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB.\n"
            "[2026-11-30 18:16:19] Received sigquit from a child process. It usually means the child failed.\n")
    out = filters.dsv41_experiment_fatal_lines({"spark1": tail, "spark2": boot(1)}, RANKS)
    assert out == ["spark1 rank 0: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB."]


def test_needs_profile_only_for_profile_evidence():
    assert filters.dsv41_experiment_needs_profile({"must": [{"id": "k", "text": "x", "when": "profile"}]})
    assert not filters.dsv41_experiment_needs_profile({"must": [{"id": "k", "text": "x"}], "must_not": []})
    assert not filters.dsv41_experiment_needs_profile(None)


def test_phase_seconds_from_clock_marks_strings_included():
    # set_fact hands the marks over as strings
    out = filters.dsv41_experiment_phase_seconds({"start": "10.0", "applied": "12.5", "booted": "70.04"})
    assert out == {"apply_s": 2.5, "boot_s": 57.5, "benchmark_s": None, "evidence_s": None, "total_s": None}


def _short(**kw):
    return dict({"workload": "short", "concurrency": 1, "complete": True, "failed_requests": 0,
                 "finish_reasons": {"stop": 12, "length": 8}}, **kw)


def test_short_prefill_reads_the_short_prompt_answers():
    check = [{"name": "short_prefill", "args": {"max_prompt_tokens": 16}}]
    assert filters.dsv41_experiment_correctness(check, [_short()]) == []
    assert filters.dsv41_experiment_correctness(check, [{"workload": "prose", "concurrency": 1}]) == [
        "short_prefill: no prompt of the 'short' set was answered"]
    out = filters.dsv41_experiment_correctness(check, [_short(failed_requests=2, error_codes={"503": 2},
                                                               finish_reasons={"stop": 18, "abort": 2})])
    assert out == ["short_prefill: short C1 2 of the short prompts failed (503 x2)",
                   "short_prefill: short C1 finished {'abort': 2}"]


def test_the_short_prompt_set_is_short():
    import json
    from pathlib import Path
    prompts = json.loads((Path(__file__).resolve().parents[4] / "roles" / "benchmark" / "files" / "prompts"
                          / "short.json").read_text())
    # a few tokens each: at most 4 words and 16 characters (well under max_prompt_tokens 16 in stage D)
    assert len(prompts) >= 4
    assert all(len(p["messages"][0]["content"].split()) <= 4 and len(p["messages"][0]["content"]) <= 16
               for p in prompts)


# ---- named checks (module_utils/experiment/evidence.py), on the report's boot re-ranked ----
from ansible.module_utils.experiment import evidence as ev  # noqa: E402


def named(names, logs):
    return ev.named_failures([{"name": n, "args": {}} for n in names], logs, RANKS)


def healthy():
    return dict((h, boot(r)) for h, r in RANKS.items())


def test_named_checks_pass_on_healthy_packed_boots():
    assert named(sorted(ev.CHECKS), healthy()) == []


def test_packed_all_names_the_rank_and_layer():
    logs = dict(healthy(), spark2=boot(1).replace("layer=14 rank=1 rows", "layer=14 rank=1 rows").replace(
        "packed=True", "packed=False"))
    assert named(["packed_all"], logs) == ["packed_all: spark2 rank 1: layer 1 packed=False",
                                           "packed_all: spark2 rank 1: layer 14 packed=False"]


def test_a_capture_that_never_ended_and_a_fatal_line_fail_health_and_capture():
    cut = boot(2).split("Capture draft verify CUDA graph end")[0].rsplit("\n", 1)[0] + "\n"
    cut += "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB.\n"
    out = named(["boot_healthy", "graph_capture_clean"], dict(healthy(), spark3=cut))
    assert "graph_capture_clean: spark3 rank 2: draft verify graph capture has no end line" in out
    assert "boot_healthy: spark3 rank 2: did not finish its graph captures" in out


def test_kv_pool_missing_and_head_never_up():
    no_pool = "\n".join(line for line in boot(0).splitlines()
                        if "pool sizes" not in line and "max_total_num_tokens" not in line
                        and "Ready: API" not in line) + "\n"
    out = named(["kv_pool", "boot_healthy"], dict(healthy(), spark1=no_pool))
    assert out == ["kv_pool: spark1 rank 0: no DSV4 pool sizes line (the KV pool was not allocated)",
                   "boot_healthy: spark1 rank 0 (head): never came up (no Ready line, no max_total_num_tokens line "
                   "after its graph captures)"]


def test_rank_consistency_names_the_differing_argument():
    logs = dict(healthy(), spark3=boot(2).replace("'speculative_dspark_block_size': 3", "'speculative_dspark_block_size': 5"))
    assert "'speculative_dspark_block_size': 3" in boot(2)
    assert named(["rank_consistency"], logs) == [
        "rank_consistency: speculative_dspark_block_size differs across ranks: 3 on spark1 rank 0, spark2 rank 1; "
        "5 on spark3 rank 2"]


def test_autotune_agreement_fails_a_partial_hit_and_ranks_that_disagree():
    from ansible.module_utils.engine_log.autotune import autotune_verdict
    base = {"drift": [], "armed": 1, "reused": ["a"], "tuned_saved": [], "disagree": 0, "run_count": 0, "completed": 0}
    assert autotune_verdict(base) == "reused"
    assert autotune_verdict(dict(base, tuned_saved=["b"])) == "mixed"
    facts = [("spark1", 0, {"autotune": base}), ("spark2", 1, {"autotune": dict(base, reused=[], tuned_saved=["b"])}),
             ("spark3", 2, {"autotune": dict(base, tuned_saved=["c"])})]
    assert ev.autotune_agreement(facts) == [
        "autotune_agreement: spark3 rank 2: a partial hit (reused 1, tuned and saved 1, disagreement warnings 0)",
        "autotune_agreement: ranks disagree: reused on spark1 rank 0; tuned on spark2 rank 1"]
    # stock boots retune on every rank: they agree
    assert named(["autotune_agreement"], healthy()) == []


def test_named_checks_without_any_log():
    assert ev.named_failures([{"name": "kv_pool", "args": {}}], {}, RANKS) == [
        "evidence: no rank's log was read; kv_pool cannot be shown"]


def test_exposed_time_must_fall_on_every_rank():
    exposed = {"name": "engram", "pattern": "engram", "must_fall": True}
    base = {"spark1": 1000.0, "spark2": 1000.0, "spark3": 1000.0}
    conditions = {"baseline": {"exposed_us": base}}
    assert filters.dsv41_experiment_exposed_failures(exposed, dict(base, spark1=150.0, spark2=150.0, spark3=150.0),
                                                     conditions, RANKS) == []
    assert filters.dsv41_experiment_exposed_failures(exposed, dict(base, spark1=150.0, spark3=None), conditions,
                                                     RANKS) == [
        "profile: exposed engram time did not fall on spark2 rank 1: 1000.0 -> 1000.0 us per profiled step",
        "profile: spark3 rank 2 has no exposed engram time (baseline 1000.0, arm None us)"]
    # no baseline recorded yet (or it was not profiled): every rank fails, naming the missing side
    assert filters.dsv41_experiment_exposed_failures(exposed, base, {}, RANKS)[0] == (
        "profile: spark1 rank 0 has no exposed engram time (baseline None, arm 1000.0 us)")
    assert filters.dsv41_experiment_exposed_failures(None, {}, conditions, RANKS) == []
    assert filters.dsv41_experiment_exposed_failures(dict(exposed, must_fall=False), {}, conditions, RANKS) == []


def test_exposed_by_host_gives_none_where_a_rank_was_not_profiled():
    profiles = {"spark1": {"exposed_us": 150.0, "traces": ["t"]}, "spark2": {}, "spark3": {"exposed_us": None}}
    assert filters.dsv41_experiment_exposed_by_host(profiles) == {"spark1": 150.0, "spark2": None, "spark3": None}
    assert filters.dsv41_experiment_exposed_by_host(None) == {}


def test_forward_probe_evaluates_unset_switches_at_their_off_value():
    definition = {"baseline": {"settings": {"SGLANG_DSPARK_FOLDED_SAMPLING": None, "DSV41_BLOCK_VERIFY": "0"}},
                  "arms": [{"requires": {"switches_forwarded": ["SGLANG_DSPARK_FOLDED_SAMPLING"]}},
                           {"requires": {"switches_forwarded": ["DSV41_DRAFT_TAU", "DSV41_BLOCK_VERIFY"]}}, {}]}
    out = filters.dsv41_forward_probe({"DSPARK_BLOCK_SIZE": "3"}, definition)
    assert out == {"DSPARK_BLOCK_SIZE": "3", "SGLANG_DSPARK_FOLDED_SAMPLING": "0", "DSV41_DRAFT_TAU": "1"}
    assert filters.dsv41_forward_probe({"A": "1"}, None) == {"A": "1"}


def test_an_unforwarded_switch_whose_unset_is_not_off_names_the_unset_forward():
    (msg,) = filters.dsv41_experiment_preconditions(
        {"switches_forwarded": ["SGLANG_DSPARK_FOLDED_SAMPLING"]}, {"forwarded": {"head": [], "worker": []}})
    assert msg == ("SGLANG_DSPARK_FOLDED_SAMPLING is not forwarded on the head and worker launch path (unset is AUTO "
                   "(the engine decides from the free memory), not off: leave it undeclared and add a forward that "
                   "passes nothing while it stays unset: `ansible-playbook site.yml --tags container_env -e "
                   "container_env_add_forwards=true -e '{\"container_env_forward_keys\": "
                   "[\"SGLANG_DSPARK_FOLDED_SAMPLING\"]}'`)")


def test_an_unforwarded_switch_whose_off_is_unset_names_the_forward_by_key():
    # a declared empty DRM node passes nothing, so the launcher finds no forward missing: ask for it by name
    (msg,) = filters.dsv41_experiment_preconditions(
        {"switches_forwarded": ["DSV41_ENGRAM_DRM_NODE"]}, {"forwarded": {"head": ["DSV41_ENGRAM_DRM_NODE"]}})
    assert msg == ("DSV41_ENGRAM_DRM_NODE is not forwarded on the worker launch path (a DRM device path; unset is "
                   "off: leave it undeclared and add a forward that passes nothing while it stays unset: "
                   "`ansible-playbook site.yml --tags container_env -e container_env_add_forwards=true -e "
                   "'{\"container_env_forward_keys\": [\"DSV41_ENGRAM_DRM_NODE\"]}'`)")


def test_driver_precondition_names_every_rank_on_another_driver():
    req = {"driver_version": ["580.173.02"]}
    facts = {"driver_version": {"spark1": "580.95.05", "spark2": "580.173.02", "spark3": None}}
    assert filters.dsv41_experiment_preconditions(req, facts) == [
        "GPU driver 580.173.02 required on every rank; found: spark1 580.95.05, spark3 unknown"]
    assert filters.dsv41_experiment_preconditions(req, {"driver_version": {}}) == [
        "GPU driver 580.173.02 required on every rank; found: no rank answered nvidia-smi"]
    ok = {"driver_version": dict((h, "580.173.02") for h in RANKS)}
    assert filters.dsv41_experiment_preconditions(req, ok) == []


def test_driver_versions_filter_reads_each_ranks_nvidia_smi_answer():
    assert filters.dsv41_driver_versions({"spark1": "580.95.05\n", "spark2": "", "spark3": "Failed to initialize NVML"}) == {
        "spark1": "580.95.05", "spark2": None, "spark3": None}


def test_clocks_precondition_needs_every_rank_locked():
    req = {"clocks": "locked"}
    facts = {"clocks": {"spark1": "locked", "spark2": "drift", "spark3": ""}}
    assert filters.dsv41_experiment_preconditions(req, facts) == [
        "clocks locked required on every rank (from the journal of this boot); found: spark2 drift, spark3 unknown"]
    assert filters.dsv41_experiment_preconditions(req, {}) == [
        "clocks locked required on every rank (from the journal of this boot); found: no rank's clock state was read"]
    assert filters.dsv41_experiment_preconditions(req, {"clocks": dict((h, "locked") for h in RANKS)}) == []


def test_decode_steps_are_counted_at_c1_c2_c4_and_every_benchmarked_concurrency():
    line = ("[2026-11-30 10:00:0%d] Decode batch, #running-req: %d, #full token: 10, full token usage: 0.00, "
            "accept len: 3.00, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 30.00, #queue-req: 0\n")
    head = "server_args={'x': 1}\n" + line % (0, 8) + line % (1, 8) + line % (2, 4)
    slots = filters.dsv41_experiment_decode_steps({"spark1": head, "spark2": ""}, RANKS, [1, 8])
    assert sorted(k for k in slots if k != "host") == ["C1", "C2", "C4", "C8", "all"]
    assert slots["C8"]["lines"] == 2 and slots["C4"]["lines"] == 1 and slots["C1"]["lines"] == 0
    # an untimed condition (no benchmark) and a benchmark within C1..C4 count at C1, C2 and C4 only
    for benchmarked in ([], [1, 4]):
        got = filters.dsv41_experiment_decode_steps({"spark1": head}, RANKS, benchmarked)
        assert sorted(k for k in got if k != "host") == ["C1", "C2", "C4", "all"]


def test_every_shipped_definition_from_stage_c_on_requires_stages_a_and_b():
    """The report's order: pack and a quiet, clean baseline (A), a stable autotune cache (B), then kernel tests.
    Every shipped definition from C on carries both in requires.stages_passed (each arm inherits it), and a
    ledger holding them for another image only does not satisfy it."""
    from pathlib import Path
    from ansible.module_utils.experiment import schema as es
    root = Path(__file__).resolve().parents[4] / "experiments"
    seen = []
    for path in sorted(root.glob("stage_*.yml")):
        d = es.load_text(path.read_text(), str(path), path.stem)
        seen.append(d["stage"])
        for arm in d["arms"]:
            assert set(arm["requires"].get("stages_passed", [])) >= {"A", "B"}, (path.name, arm["name"])
            facts = {"ledger": [{"name": "stage_a", "image_digest": "sha256:old"},
                                {"name": "stage_b", "image_digest": "sha256:new"}], "image_digest": "sha256:new"}
            out = filters.dsv41_experiment_preconditions({"stages_passed": arm["requires"]["stages_passed"]}, facts)
            assert out == ["stage A has not passed on image sha256:new (no stage_a entry in the stage ledger, "
                           "dsv41_stages_passed: run playbooks/stage_a_pack.yml and commit the entry it proposes)"]
    assert sorted(set(seen)) == ["C", "D", "E", "F", "G", "H", "I"]


W8 = "[wo_a_w8] fp8 twins for 172 wo_a weights, 0 left on bf16"
BRIDGE = "[wo_a_w8] einsum bridge armed: fp8 twin for verify/draft rows, gemv left at M=1"
MID = "[wo_a_w8] mid path armed: 9..192 rows from the fp8 twin"
DROP = "[wo_a_w8] released the bf16 copy of 168 wo_a weights (12096 MB); 4 kept (dequantized copy not bit-identical)"
DRAFT_KEPT = "[wo_a_w8] draft wo_a left on bf16 (this engine's draft does not use the shared dispatch)"


def _wo_a(lines_by_host, names=("wo_a_mode",)):
    from ansible.module_utils.experiment import evidence as ev
    logs = dict((h, boot(r, lines_by_host[h])) for h, r in RANKS.items())
    return ev.named_failures([{"name": n, "args": {}} for n in names], logs, RANKS), ev.wo_a_modes(logs, RANKS)


def test_wo_a_mode_passes_today_s_bridge_image_with_mid_and_drop_when_the_draft_is_kept():
    """Today's image has no small-row kernel: W8 arms the einsum bridge, MID and DROP still work there, and
    with DROP the adapter keeps the draft's wo_a on bf16 and says so (the report's real runs used all three)."""
    failures, modes = _wo_a(dict((h, [W8, BRIDGE, MID, DROP, DRAFT_KEPT]) for h in RANKS))
    assert failures == []
    assert {h: (m["mode"], m["drop"], m["draft_kept"]) for h, m in modes.items()} == dict(
        (h, ("bridge", True, True)) for h in RANKS)
    # the canary's kernel replacement: no bridge line, no draft line
    failures, modes = _wo_a(dict((h, [W8, MID, DROP]) for h in RANKS))
    assert failures == [] and set(m["mode"] for m in modes.values()) == {"kernel"}


def test_wo_a_mode_names_a_bridge_drop_without_the_kept_draft_a_mixed_fleet_and_an_unarmed_rank():
    failures, _ = _wo_a({"spark1": [W8, BRIDGE, MID, DROP, DRAFT_KEPT], "spark2": [W8, BRIDGE, MID, DROP],
                         "spark3": [W8, MID, DROP]})
    assert failures == [
        "wo_a_mode: spark2 rank 1: DROP in bridge mode without '[wo_a_w8] draft wo_a left on bf16 (this engine's "
        "draft does not use the shared dispatch)': the bridge's draft reads the bf16 weight, and nothing shows it "
        "was kept",
        "wo_a_mode: ranks run wo_a_w8 in different modes: bridge on spark1 rank 0, spark2 rank 1; kernel on spark3 "
        "rank 2"]
    failures, _ = _wo_a({"spark1": [W8, BRIDGE], "spark2": [W8, BRIDGE], "spark3": []})
    assert failures == ["wo_a_mode: spark3 rank 2: wo_a_w8 did not arm in the latest boot (no '[wo_a_w8] fp8 twins "
                        "for ...' line)"]
    failures, _ = _wo_a(dict((h, [W8, DROP, DRAFT_KEPT]) for h in RANKS))
    assert len(failures) == 3 and all("without the einsum bridge" in f for f in failures)


def test_wo_a_mode_reads_only_the_boot_not_a_request_that_quotes_the_lines():
    from ansible.module_utils.experiment import evidence as ev
    logs = dict((h, boot(r, [W8, BRIDGE, DROP], extra_run=["Receive: obj=... '%s'" % DRAFT_KEPT]))
                for h, r in RANKS.items())
    failures = ev.named_failures([{"name": "wo_a_mode", "args": {}}], logs, RANKS)
    assert len(failures) == 3 and all("DROP in bridge mode without" in f for f in failures)


def test_an_untimed_condition_warms_every_graph_shape():
    """Stage E's CHECK phase: every workload of the definition at every concurrency 1..slots (the report: warm
    all graph shapes before comparing synchronous and prefetched rows)."""
    base = {"workloads": ["prose"], "concurrency": [1], "repetitions": 5, "warmups": 0, "max_tokens": 64}
    plan = filters.dsv41_experiment_probe_plan(base, ["prose", "code"], {"MAX_RUNNING_REQUESTS": 4})
    assert plan == dict(base, workloads=["prose", "code"], concurrency=[1, 2, 3, 4])
    assert filters.dsv41_experiment_probe_plan(base, ["prose"], {"MAX_RUNNING_REQUESTS": "8"})["concurrency"] == list(range(1, 9))
    assert filters.dsv41_experiment_probe_plan(base, [], {"MAX_RUNNING_REQUESTS": "four"})["concurrency"] == [1, 2, 3, 4]
    assert base["concurrency"] == [1], "the role's default is not changed"


# --------------------------------------------------------------------------- stage I: EP1 and the DRM cache

MOE_EP1 = ("MoE expert GEMM: backend=b12x, quant=mxfp4, ep_size=1, experts_per_rank=all, intermediate_per_rank=768 "
           "(of 2304)")
PAD = ("DSV41 TP padding: attention heads 64->96 (32 per rank), wo_a groups 8->12 (4 per rank), vocab "
       "129280->129408 (43136 per rank)")
DRAFT_PAD = "DSV41 TP padding (draft): experts 128->129 (43 per rank), vocab 129280->129408 (43136 per rank)"


def ep1_logs(moe=None, draft_pad=None):
    """Every rank's EP1 boot; ``moe`` / ``draft_pad``: {host: line} replacing that rank's line."""
    return dict((h, boot(r, ["[2026-09-11 23:34:14 TP%d] %s" % (r, (moe or {}).get(h, MOE_EP1)),
                             "[2026-09-11 23:34:14 TP%d] %s" % (r, PAD),
                             "[2026-09-11 23:34:20 TP%d] %s" % (r, (draft_pad or {}).get(h, DRAFT_PAD)),
                             "'ep_size': 1}"]))
                for h, r in RANKS.items())


def test_ep1_moe_path_judged_on_every_rank_and_a_rank_off_mxfp4_named():
    ev = arm("stage_i_ep1")["evidence"]
    assert filters.dsv41_experiment_evidence(dict(ev, checks=[]), ep1_logs(), RANKS) == []
    off = MOE_EP1.replace("quant=mxfp4", "quant=bf16")
    failures = filters.dsv41_experiment_evidence(dict(ev, checks=[]), ep1_logs(moe={"spark3": off}), RANKS)
    assert failures == [
        "spark3 rank 2: moe_mxfp4_768 missing from the latest boot (0 of 1 line(s) matching %r)"
        % [m for m in ev["must"] if m["id"] == "moe_mxfp4_768"][0]["pattern"],
        "spark3 rank 2: moe_off_mxfp4 present in the latest boot: %r" % off]
    # EP3's whole experts (2304 wide) are not the EP1 path either
    wide = MOE_EP1.replace("intermediate_per_rank=768", "intermediate_per_rank=2304")
    assert any("spark2 rank 1: moe_mxfp4_768 missing" in f for f in filters.dsv41_experiment_evidence(
        dict(ev, checks=[]), ep1_logs(moe={"spark2": wide}), RANKS))


def test_draft_padding_must_equal_the_baselines_on_every_rank():
    d = es.load_text((ROOT / "experiments" / "stage_i_ep1.yml").read_text(), "ep1", "stage_i_ep1")
    ev = d["arms"][0]["evidence"]
    base_lines = filters.dsv41_experiment_same_lines(ep1_logs(), RANKS, d)
    assert base_lines["draft_padding"]["spark2"] == [DRAFT_PAD]
    conditions = {"baseline": {"same_lines": base_lines}}
    same = filters.dsv41_experiment_same_lines(ep1_logs(), RANKS, d)
    assert filters.dsv41_experiment_same_failures(ev, same, conditions, RANKS) == []
    changed = DRAFT_PAD.replace("128->129 (43 per rank)", "128->128 (128 per rank)")
    other = filters.dsv41_experiment_same_lines(ep1_logs(draft_pad={"spark2": changed}), RANKS, d)
    assert filters.dsv41_experiment_same_failures(ev, other, conditions, RANKS) == [
        "spark2 rank 1: draft_padding differs from the baseline: %r (baseline %r)" % (changed, DRAFT_PAD)]
    # a baseline that printed no padding line shows nothing unchanged; an unrecorded baseline is named
    empty = {"baseline": {"same_lines": dict((k, dict((h, []) for h in RANKS)) for k in base_lines)}}
    assert ("spark1 rank 0: tp3_padding: the baseline printed no line matching '^DSV41 TP padding: ', so nothing "
            "shows it unchanged") in filters.dsv41_experiment_same_failures(ev, same, empty, RANKS)
    assert filters.dsv41_experiment_same_failures(ev, same, {}, RANKS)[0].startswith(
        "tp3_padding: the baseline's lines matching '^DSV41 TP padding: ' were not recorded")


def led(rank, weights, serving, kv, avail=None):
    return {"rank": rank, "weights_gib": weights, "serving_free_gib": serving, "kv_pool_tokens": kv,
            "mem_available_after_gib": avail}


def test_memory_cost_against_the_stated_headroom_names_rank_and_figures():
    base = {"spark1": led(0, 96.61, 1.04, 491520, 3.07), "spark2": led(1, 96.61, 1.42, 491520, 7.55)}
    ep1 = {"spark1": led(0, 96.70, 0.88, 431360, 3.07), "spark2": led(1, 96.70, 1.26, 431360, 6.80)}
    conditions = {"baseline": {"memory": base}}
    # 0.09 GiB more weights + 0.16 GiB less for serving = 0.25 GiB: within 0.5, over 0.2
    assert filters.dsv41_memory_cost_failures(ep1, conditions, 0.5, "ep1") == [
        "memory: spark2 rank 1: MemAvailable after the boot of ep1 is 0.75 GiB below the baseline's (7.55 -> 6.80 "
        "GiB), over its stated headroom 0.50 GiB per rank"]
    failures = filters.dsv41_memory_cost_failures(ep1, conditions, 0.2, "ep1")
    assert failures[0] == ("memory: spark1 rank 0: ep1 costs 0.25 GiB more than the baseline (weights +92.2 MiB, left "
                           "for serving -163.8 MiB, KV pool -60,160 tokens), over its stated headroom 0.20 GiB per rank")
    assert len(failures) == 3
    assert filters.dsv41_memory_cost_failures(ep1, {}, 0.5, "ep1") == [
        "memory: the baseline's ledger was not recorded; ep1's cost against its stated headroom 0.50 GiB cannot be "
        "shown"]
    assert "spark2 rank 1 has no weights or serving figure" in " ".join(filters.dsv41_memory_cost_failures(
        dict(ep1, spark2=led(1, None, None, None)), conditions, 0.5, "ep1"))
    assert filters.dsv41_memory_cost_failures(ep1, conditions, 0, "ep1") == [], "no headroom stated, nothing judged"


def probe_result(**changes):
    r = {"driver_version": "580.173.02", "node": {"path": "/dev/dri/renderD128", "kind": "char", "major": 226,
                                                  "minor": 128},
         "container": "dsv41-worker", "container_found": True, "container_has_node": True,
         "container_devices": [{"PathOnHost": "/dev/dri/renderD128", "PathInContainer": "/dev/dri/renderD128"}],
         "modeset": "Y", "modeset_path": "/sys/module/nvidia_drm/parameters/modeset"}
    r.update(changes)
    return r


def test_drm_arm_refused_naming_each_host_and_what_the_probe_found():
    req = arm("stage_i_drm")["requires"]
    facts = {"features": ["engram_drm", "engram_layer_budget"],
             "forwarded": {"head": req["switches_forwarded"], "worker": req["switches_forwarded"]},
             "packed": {"spark1": True}, "mem_available_gib": dict((h, 9.0) for h in RANKS),
             "serving_free_gib": dict((h, 1.0) for h in RANKS), "driver_version": dict((h, "580.173.02") for h in RANKS),
             "ledger": [{"name": "stage_a", "image_digest": "d"}, {"name": "stage_b", "image_digest": "d"}],
             "image_digest": "d", "drm_probe": dict((h, probe_result()) for h in RANKS)}
    assert filters.dsv41_experiment_preconditions(req, facts) == []
    broken = dict(facts, drm_probe={
        "spark1": probe_result(modeset="N"),
        "spark2": probe_result(node={"path": "/dev/dri/renderD128", "kind": "missing", "major": None, "minor": None}),
        "spark3": probe_result(container_has_node=False, container_devices=[])})
    assert filters.dsv41_experiment_preconditions(req, broken) == [
        "DRM probe on spark1: nvidia_drm modeset is N (/sys/module/nvidia_drm/parameters/modeset), Y needed; changing "
        "it needs a host change and a reboot, a later experiment",
        "DRM probe on spark2: render node /dev/dri/renderD128 is not a character device on the host (absent)",
        "DRM probe on spark3: serving container dsv41-worker has no device /dev/dri/renderD128 (docker inspect: Devices "
        "none); pass it on both launch paths (docker run --device) and restart before the DRM cache can be tried"]
    assert filters.dsv41_experiment_preconditions(req, dict(facts, drm_probe={})) == [
        "DRM driver compatibility probe required before the arm; no rank was probed"]
    assert filters.dsv41_experiment_preconditions(req, dict(facts, drm_probe={"spark2": {"failed": True, "msg": "boom"}})) \
        == ["DRM probe on spark2: the probe did not run (boom)"]


def test_the_forward_probe_gives_per_layer_budgets_a_valid_off_value():
    d = es.load_text((ROOT / "experiments" / "stage_i_drm.yml").read_text(), "drm", "stage_i_drm")
    probe = filters.dsv41_forward_probe({"DSV41_CACHE_GIB": "0"}, d)
    assert probe["DSV41_CACHE_LAYER_GIB"] == "1:0,14:0" and probe["DSV41_ENGRAM_DRM_NODE"] == "0"


def test_a_rank_without_a_memavailable_reading_is_short_and_named():
    facts = {"features": ["folded_fence"], "forwarded": {"head": ["DSV41_FOLDED_FENCE"], "worker": ["DSV41_FOLDED_FENCE"]},
             "packed": dict((h, True) for h in RANKS), "mem_available_gib": {"spark1": 3.0, "spark2": None, "spark3": 3.0},
             "ledger": [{"name": "stage_a", "image_digest": "sha256:ab"}], "image_digest": "sha256:ab"}
    assert filters.dsv41_experiment_preconditions(dict(arm()["requires"], stages_passed=["A"], packed=True), facts) == [
        "memory headroom 0.50 GiB per rank required; short: spark2 no figure"]
