"""sampling_checks: the chi-square tail, the homogeneity test of two conditions' sampled answers, the mixed
greedy/sampled check; decode_bench's mixed batches and word counts against the fake endpoint; the stage H
preconditions and the folded-sampling decision read from rank 0's boot."""
import math
import random

import pytest

from ansible.module_utils.bench import client, inputs, record
from ansible.module_utils.experiment import evidence as ev
from ansible.module_utils.bench import sampling as sc
import experiment_filters as filters

from test_decode_bench import bench, engine, prompt_files  # noqa: F401  (fixtures)

RANKS = {"spark1": 0, "spark2": 1, "spark3": 2}


# --------------------------------------------------------------------------- the chi-square tail

@pytest.mark.parametrize("stat,df,expected", [
    (3.841458820694124, 1, 0.05), (6.634896601021214, 1, 0.01), (10.827566170662733, 1, 0.001),
    (18.307038053275146, 10, 0.05), (36.41502850180731, 24, 0.05), (51.17859777, 24, 0.001),
    (0.0, 5, 1.0), (2.0, 2, math.exp(-1.0)),
])
def test_chi2_tail_matches_the_tables(stat, df, expected):
    assert sc.chi2_sf(stat, df) == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_chi2_tail_refuses_no_degrees_of_freedom():
    with pytest.raises(ValueError, match="degrees of freedom"):
        sc.chi2_sf(1.0, 0)


# --------------------------------------------------------------------------- homogeneity

def words(n, vocab, rng, skew=0.0):
    third = vocab[:len(vocab) // 3]
    out = {}
    for _ in range(n):
        w = rng.choice(third) if rng.random() < skew else rng.choice(vocab)
        out[w] = out.get(w, 0) + 1
    return out


VOCAB = ["w%02d" % i for i in range(30)]


def test_same_sampler_passes_a_shifted_one_fails():
    rng = random.Random(7)
    a, b = words(4000, VOCAB, rng), words(4000, VOCAB, rng)
    same = sc.homogeneity(a, b)
    assert same["p"] > 0.001 and same["tvd"] < 0.06 and same["words_a"] == same["words_b"] == 4000
    shifted = sc.homogeneity(a, words(4000, VOCAB, rng, skew=0.5))
    assert shifted["p"] < 1e-12 and shifted["tvd"] > 0.2 and shifted["df"] == 24


def test_identical_counts_give_zero_statistic_and_p_one():
    a = {"x": 10, "y": 20, "z": 5}
    fig = sc.homogeneity(a, dict(a))
    assert fig["chi2"] == 0.0 and fig["p"] == 1.0 and fig["tvd"] == 0.0 and fig["df"] == 2


def test_rare_words_are_pooled_into_one_bin():
    a = dict(("w%d" % i, 1) for i in range(100))
    fig = sc.homogeneity(a, dict(a), bins=5)
    assert fig["df"] == 5       # five kept words + "other", minus one


def test_answer_words_count_each_distinct_answer_once():
    reqs = [{"prompt": "p0", "text": "a b a"}] * 5 + [{"prompt": "p1", "text": "a b a"}, {"prompt": "p0", "text": "c"}]
    assert sc.answer_words(reqs) == {"a": 4, "b": 2, "c": 1}


def result(workload, counts, **extra):
    return dict({"workload": workload, "concurrency": 1, "answer_word_counts": counts}, **extra)


def test_distribution_failures_name_the_workload_and_figures():
    rng = random.Random(3)
    base = [result("prose", words(3000, VOCAB, rng)), result("code", words(3000, VOCAB, rng))]
    good = [result("prose", words(3000, VOCAB, rng)), result("code", words(3000, VOCAB, rng))]
    failures, figures = sc.distribution_failures(good, base)
    assert failures == [] and sorted(figures) == ["code", "prose"]
    bad = [result("prose", words(3000, VOCAB, rng, skew=0.5)), result("code", words(3000, VOCAB, rng))]
    failures, figures = sc.distribution_failures(bad, base)
    assert len(failures) == 1 and failures[0].startswith(
        "sampled_distribution: prose answers are not sampled like the baseline's: chi-square ")
    assert "< 0.001 (total variation " in failures[0]


def test_distribution_needs_enough_words_and_a_baseline():
    assert sc.distribution_failures([result("prose", {"a": 3})], [])[0] == [
        "sampled_distribution: the baseline has no sampled answers to compare with"]
    (msg,), _ = sc.distribution_failures([result("prose", {"a": 3})], [result("prose", {"a": 500})])
    assert msg == ("sampled_distribution: prose has too few sampled answer words to compare (baseline 500, arm 3; "
                   "at least 200 each)")


def test_mixed_greedy_answers_must_equal_the_baseline_ones():
    base = [{"workload": "prose", "greedy_output_digests": {"p0": ["aa"], "p1": ["bb"]}}]
    assert sc.mixed_greedy_failures([{"workload": "prose", "greedy_output_digests": {"p0": ["aa"], "p1": ["bb"]}}],
                                    base) == []
    out = sc.mixed_greedy_failures([{"workload": "prose", "greedy_output_digests": {"p0": ["aa", "cc"],
                                                                                   "p1": ["bb"]}}], base)
    assert out == ["mixed_batch_greedy: prose prompt p0 answered greedy 2 way(s) in mixed batches, the baseline "
                   "1 way(s), not the same answer"]
    assert sc.mixed_greedy_failures([], base) == ["mixed_batch_greedy: no greedy answer of a mixed batch was collected"]
    assert sc.mixed_greedy_failures(base, []) == [
        "mixed_batch_greedy: the baseline sent no mixed greedy/sampled batch to compare with"]


def test_correctness_filter_compares_arms_with_the_baseline_only():
    checks = [{"name": "sampled_distribution", "args": {}}, {"name": "mixed_batch_greedy", "args": {}}]
    rng = random.Random(5)
    base = {"results": [result("prose", words(3000, VOCAB, rng))],
            "mixed_results": [{"workload": "prose", "greedy_output_digests": {"p0": ["aa"]}}]}
    mixed = [{"workload": "prose", "greedy_output_digests": {"p0": ["aa"]}}]
    shifted = [result("prose", words(3000, VOCAB, rng, skew=0.5))]
    # the baseline itself: nothing to compare with, only that its mixed batch was sent
    assert filters.dsv41_experiment_correctness(checks, shifted, {}, {}, "baseline", mixed) == []
    assert filters.dsv41_experiment_correctness(checks, shifted, {}, {}, "baseline", []) == [
        "mixed_batch_greedy: no mixed greedy/sampled batch was sent"]
    out = filters.dsv41_experiment_correctness(checks, shifted, {}, {"baseline": base}, "block_verify", mixed)
    assert len(out) == 1 and out[0].startswith("sampled_distribution: prose answers are not sampled like")
    figures = filters.dsv41_experiment_distribution(shifted, {"baseline": base}, "block_verify")
    assert figures["prose"]["p"] < 0.001
    assert filters.dsv41_experiment_distribution(shifted, {"baseline": base}, "baseline") == {}


# --------------------------------------------------------------------------- decode_bench mixed batches

def test_mixed_batches_send_greedy_and_sampled_streams(engine, prompt_files):  # noqa: F811
    res = bench(engine, prompt_files, names=("code",), temperature=0.7, top_p=0.9, top_k=20, seed=1234,
                concurrency=[4], greedy_streams=2, warmups=0, timeout=30)
    kinds = sorted((b["temperature"], "seed" in b, "top_p" in b) for b in engine.bodies)
    assert kinds.count((0.0, False, False)) == kinds.count((0.7, True, True)) == len(engine.bodies) // 2
    (r,) = res["results"]
    assert sorted(r["greedy_output_digests"]) == sorted(r["output_digests"])
    assert sum(n for _, n in r["answer_word_counts"]) > 0 and r["settings"]["greedy_streams"] == 2


def test_word_counts_are_pairs_so_a_word_named_like_a_secret_survives_redaction():
    from ansible.module_utils.bench import summary as dbs
    reqs = [{"prompt_id": "p0", "text": "key token key"}, {"prompt_id": "p1", "text": "x"}]
    counts = dbs.word_counts(reqs, keep=1)
    assert counts == [["key", 2], ["(other)", 2]]
    from ansible.module_utils.base.secrets import redact
    assert redact({"answer_word_counts": counts}, "sk-1") == {"answer_word_counts": counts}
    # and the check reads pairs as it reads a mapping
    assert sc._by_workload([{"workload": "w", "concurrency": 1, "answer_word_counts": counts}]) == {
        "w": {"key": 2, "(other)": 2}}


def test_word_counts_only_for_sampled_and_mixed_only_when_mixed(engine, prompt_files):  # noqa: F811
    (r,) = bench(engine, prompt_files, names=("code",), warmups=0, timeout=30)["results"]
    assert "answer_word_counts" not in r and "greedy_output_digests" not in r
    (r,) = bench(engine, prompt_files, names=("code",), warmups=0, temperature=0.5, seed=1, timeout=30)["results"]
    assert "answer_word_counts" in r and "greedy_output_digests" not in r


@pytest.mark.parametrize("settings,word", [
    ({"greedy_streams": 2, "concurrency": [4]}, "needs temperature > 0"),
    ({"greedy_streams": 4, "concurrency": [4], "temperature": 0.6, "seed": 1}, "fewer greedy streams"),
    ({"greedy_streams": -1}, "greedy_streams must be >= 0"),
])
def test_mixed_batch_settings_refused(settings, word):
    with pytest.raises(client.BenchError, match=word):
        inputs.validate_settings(settings)


# --------------------------------------------------------------------------- folded decision, preconditions

FOLDED = "[2026-09-24 02:51:10 TP0 EP0] DSpark draft proposal (greedy + sampling) folded into the draft cuda graph."
GREEDY_ONLY = "[2026-09-24 02:51:10 TP0 EP0] DSpark draft proposal (greedy only) folded into the draft cuda graph."
EAGER = "[2026-09-24 02:51:10 TP0 EP0] DSpark draft proposal kept eager (reason=SGLANG_DSPARK_FOLDED_SAMPLING=0)"
SHORT = ("[2026-09-24 02:51:10 TP0 EP0] DSpark folded sampling disabled: its static buffers need 0.09 GB but only "
         "0.41 GB GPU memory is free; sampling batches will take the eager proposal path. Set "
         "SGLANG_DSPARK_FOLDED_SAMPLING=2 to force.")


def test_the_folded_decision_in_each_of_its_forms():
    assert ev.folded_sampling(FOLDED)["folded"] is True
    assert ev.folded_sampling(GREEDY_ONLY) == dict(ev.folded_sampling(GREEDY_ONLY), folded=False,
                                                   decision="folded (greedy only)")
    assert ev.folded_sampling(EAGER)["decision"] == "eager (reason=SGLANG_DSPARK_FOLDED_SAMPLING=0)"
    short = ev.folded_sampling(SHORT)
    assert (short["folded"], short["need_gib"], short["free_gib"]) == (False, 0.09, 0.41)
    assert ev.folded_sampling("nothing here")["folded"] is None
    # the last decision of the text wins (a log that holds more than one)
    assert ev.folded_sampling(SHORT + "\n" + FOLDED)["folded"] is True


def test_folded_decision_check_names_the_head():
    assert ev.folded_decision({"spark1": FOLDED}, RANKS) == []
    assert ev.folded_decision({"spark1": "x"}, RANKS) == [
        "folded_decision: spark1 rank 0 logged no folded-sampling decision in its latest boot (no 'DSpark draft "
        "proposal ...' or 'DSpark folded sampling disabled' line)"]
    assert ev.named_failures([{"name": "folded_decision", "args": {}}], {"spark1": FOLDED}, RANKS) == []


def test_capture_headroom_and_folded_preconditions():
    facts = {"serving_free_gib": {"spark1": 2.9, "spark2": 0.4, "spark3": None},
             "folded_sampling": ev.folded_sampling(SHORT)}
    need = {"capture_headroom": {"gib": 1.0, "grants": "folded_sampling_budget"}, "folded_sampling": True}
    out = filters.dsv41_experiment_preconditions(need, facts)
    assert out[0] == ("capture headroom 1.00 GiB per rank required (for folded_sampling_budget); the latest boot "
                      "left after its graph captures: spark2 0.40 GiB, spark3 no figure")
    assert out[1].startswith("folded sampling is not active on the running fleet (rank 0: AUTO disabled: short of "
                             "memory: 'DSpark folded sampling disabled: its static buffers need 0.09 GB")
    ok = {"serving_free_gib": {"spark1": 2.9, "spark2": 3.1, "spark3": 3.0}, "folded_sampling": ev.folded_sampling(FOLDED)}
    assert filters.dsv41_experiment_preconditions(need, ok) == []
    assert filters.dsv41_experiment_preconditions(need, {})[0].endswith("no rank's boot was read")


def test_boot_facts_filter_reads_every_rank_and_the_heads_decision():
    out = filters.dsv41_experiment_boot_facts({"spark1": FOLDED, "spark2": ""}, RANKS)
    assert out["folded_sampling"]["folded"] is True and out["serving_free_gib"] == {"spark1": None, "spark2": None}


def test_only_the_lowest_concurrency_of_a_workload_is_counted():
    rng = random.Random(11)
    base = [result("prose", words(3000, VOCAB, rng))]
    shifted_c4 = dict(result("prose", words(3000, VOCAB, rng, skew=0.5)), concurrency=4)
    same_c1 = result("prose", words(3000, VOCAB, rng))
    assert sc.distribution_failures([shifted_c4, same_c1], base)[0] == []
    assert sc.distribution_failures([shifted_c4], base)[0] != []


def test_a_decision_quoted_by_a_request_after_ready_is_not_read():
    ready = "[2026-09-24 02:51:20] INFO:     Uvicorn running on http://0.0.0.0:8888 (Press CTRL+C to quit)"
    echoed = ("[2026-09-24 02:52:00] Receive: obj=GenerateReqInput(text='DSpark draft proposal (greedy + sampling) "
              "folded into the draft cuda graph.')")
    assert ev.folded_sampling("\n".join([SHORT, ready, echoed]))["folded"] is False
    assert ev.folded_sampling("\n".join([ready, FOLDED]))["folded"] is None
