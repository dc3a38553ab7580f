"""verify_checks: the proposal test (randomised PIT of every committed token in the target's reported
distribution) and the capped-block check; the filters and the correctness dispatch that run them; decode_bench's
logprobs against the fake endpoint; the definition schema's parameters."""
import calendar
import math
import random
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.bench import decode as db
from ansible.module_utils.bench import client, inputs
from ansible.module_utils.experiment import schema as es
from ansible.module_utils.experiment import verify as vc
import experiment_filters as filters

from test_decode_bench import engine, prompt_files  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[4]
RANKS = {"spark1": 0, "spark2": 1, "spark3": 2}
VOCAB = ["w%02d" % i for i in range(40)]
SAMPLING = {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "seed": 1234}


# --------------------------------------------------------------------------- one position

def test_top_k_then_top_p_cut_the_reported_tokens_and_renormalise():
    top = [("a", math.log(0.5)), ("b", math.log(0.3)), ("c", math.log(0.1)), ("d", math.log(0.05))]
    buckets, other = vc.kept_distribution(top, 0.6, top_p=None, top_k=3)
    assert [t for t, _ in buckets] == ["a", "b", "c"] and other == 0.0
    assert [round(p, 4) for _, p in buckets] == [0.5556, 0.3333, 0.1111]
    # top-p 0.8 on the top-3 renormalised: a (0.556) + b (0.333) reach it
    buckets, other = vc.kept_distribution(top, 0.6, top_p=0.8, top_k=3)
    assert [t for t, _ in buckets] == ["a", "b"] and other == 0.0
    # no top-k and a nucleus past the reported tokens: the rest top-p still needs is the "other" bucket
    buckets, other = vc.kept_distribution(top, 0.6, top_p=0.99, top_k=None)
    assert len(buckets) == 4 and other == pytest.approx(0.04 / 0.99, rel=1e-6)
    assert sum(p for _, p in buckets) + other == pytest.approx(1.0)


def test_original_logprobs_are_tempered_by_the_check():
    top = [("a", math.log(0.6)), ("b", math.log(0.4))]
    buckets, other = vc.kept_distribution(top, 0.5, top_k=2, logprobs="original")
    assert dict(buckets)["a"] == pytest.approx(0.36 / 0.52) and other == 0.0
    with pytest.raises(vc.VerifyCheckError):
        vc.kept_distribution(top, 0.5, logprobs="raw")


def test_pit_value_places_the_token_in_its_bucket_and_refuses_a_cut_one():
    buckets = [("a", 0.5), ("b", 0.3)]
    assert vc.pit_value(buckets, 0.2, "a", 0.5) == pytest.approx(0.25)
    assert vc.pit_value(buckets, 0.2, "b", 0.5) == pytest.approx(0.65)
    assert vc.pit_value(buckets, 0.2, "zz", 0.5) == pytest.approx(0.9), "unreported: the other bucket"
    assert vc.pit_value(buckets, 0.2, "c", 0.5, reported={"a", "b", "c"}) is None, "reported but cut by top-k/top-p"
    assert vc.pit_value(buckets, 0.0, "zz", 0.5) is None, "nothing unreported is kept"


# --------------------------------------------------------------------------- a sampler, right and wrong

def softmax(z, t):
    m = max(v / t for v in z)
    w = [math.exp(v / t - m) for v in z]
    s = sum(w)
    return [x / s for x in w]


def truncated(p, top_k, top_p):
    order = sorted(range(len(p)), key=lambda i: -p[i])[:top_k]
    total = sum(p[i] for i in order)
    keep, cum = [], 0.0
    for i in order:
        keep.append(i)
        cum += p[i] / total
        if cum >= top_p:
            break
    kept = sum(p[i] for i in keep)
    return dict((i, p[i] / kept) for i in keep)


def sampled_requests(n_prompts=6, length=200, sharpen=1.0, seed=7):
    """Requests as decode_bench records them: answers sampled from each position's truncated tempered
    distribution (``sharpen`` < 1 samples a sharper one than the reported: acceptance off the proposal)."""
    rng = random.Random(seed)
    out = []
    for p in range(n_prompts):
        content, words = [], []
        for i in range(length):
            z = [rng.gauss(0, 1.5) for _ in VOCAB]
            reported = softmax(z, SAMPLING["temperature"])
            drawn = truncated(softmax(z, SAMPLING["temperature"] * sharpen), SAMPLING["top_k"], SAMPLING["top_p"])
            u, cum, pick = rng.random(), 0.0, None
            for j, q in sorted(drawn.items(), key=lambda kv: -kv[1]):
                cum += q
                pick = j
                if u < cum:
                    break
            top = sorted(range(len(VOCAB)), key=lambda j: -reported[j])[:20]
            content.append({"token": VOCAB[pick], "logprob": math.log(reported[pick]),
                            "top_logprobs": [{"token": VOCAB[j], "logprob": math.log(reported[j])} for j in top]})
            words.append(VOCAB[pick])
        out.append({"greedy": False, "prompt_id": "p%d" % p, "text": " ".join(words), "logprobs": content})
    return out


def probe_result(requests, workload="prose", top_logprobs=20):
    return {"workload": workload, "concurrency": 1, "settings": {"top_logprobs": top_logprobs},
            "proposal_pit": vc.condition_pits(requests, SAMPLING)}


def test_tokens_sampled_from_the_reported_distribution_are_uniform_and_a_sharper_sampler_is_not():
    right = probe_result(sampled_requests())
    assert right["proposal_pit"]["positions"] == 1200 and right["proposal_pit"]["outside"] == 0
    failures, figures = vc.proposal_failures([right])
    assert failures == [] and figures["prose"]["p"] >= 0.001 and figures["prose"]["positions"] == 1200
    wrong = probe_result(sampled_requests(sharpen=0.8))
    failures, figures = vc.proposal_failures([wrong])
    print(failures)
    (msg,) = failures
    assert msg.startswith("proposal_distribution: prose: committed tokens do not follow the target's reported "
                          "distribution (acceptance is not using the proposal it drew from): randomised PIT over "
                          "1200 positions in 10 bins [")
    assert "(expected 120.0 each), chi-square " in msg and " on 9 df, p=" in msg and msg.endswith(" < 0.001")
    assert figures["prose"]["p"] < 0.001 and figures["prose"]["bins"][0] > figures["prose"]["bins"][-1]


def test_the_pit_is_seeded_by_the_answer_and_a_repeated_answer_counts_once():
    reqs = sampled_requests(n_prompts=2, length=50)
    a = vc.condition_pits(reqs, SAMPLING)
    b = vc.condition_pits(reqs + reqs, SAMPLING)
    assert a["pit"] == b["pit"] and a["positions"] == b["positions"] == 100
    assert a["requests"] == 2 and b["requests"] == 4
    assert vc.condition_pits(reqs, dict(SAMPLING, seed=99))["pit"] != a["pit"]


def test_no_logprobs_fails_and_never_passes():
    reqs = [dict(r, logprobs=None) for r in sampled_requests(n_prompts=3, length=10)]
    failures, figures = vc.proposal_failures([probe_result(reqs)])
    assert failures == ["proposal_distribution: prose: the engine returned no logprobs for any of 3 sampled request(s) "
                        "(asked logprobs: true, top_logprobs: 20); the proposal cannot be tested"]
    assert figures == {}
    assert vc.proposal_failures([]) == (
        ["proposal_distribution: no sampled request asked for logprobs, so the proposal was not tested"], {})
    some = sampled_requests(n_prompts=4, length=200)
    some[0]["logprobs"] = None
    failures, _ = vc.proposal_failures([probe_result(some)])
    assert failures == ["proposal_distribution: prose: 1 of 4 sampled request(s) came back without logprobs "
                        "(asked logprobs: true, top_logprobs: 20)"]


def test_too_few_positions_and_a_token_outside_the_kept_set_fail_naming_them():
    failures, _ = vc.proposal_failures([probe_result(sampled_requests(n_prompts=2, length=100), workload="code")])
    assert failures == ["proposal_distribution: code: too few sampled positions to judge (200; at least 500: ask for "
                        "longer answers or more prompts)"]
    reqs = sampled_requests(n_prompts=3, length=200)
    entry = reqs[1]["logprobs"][7]
    last = entry["top_logprobs"][-1]
    entry.update(token=last["token"], logprob=last["logprob"])     # the 20th token: top-p never keeps it here
    failures, _ = vc.proposal_failures([probe_result(reqs)])
    assert failures[0] == ("proposal_distribution: prose: 1 committed token(s) outside the request's top-k/top-p set "
                           "as the target reported it (first: prompt p1 position 7 token %r logprob %s)"
                           % (last["token"], last["logprob"]))


# --------------------------------------------------------------------------- capped_block

def decode_line(sec, accept):
    return ("[2026-11-30 10:00:%02d TP0 EP0] Decode batch, #running-req: 1, #full token: 10, full token usage: 0.00, "
            "accept len: %.2f, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 30.00, #queue-req: 0\n"
            % (sec, accept))


EPOCH0 = calendar.timegm((2026, 11, 30, 10, 0, 0))   # the log lines' clock (UTC)


def greedy_probe(answers, workload="prose"):
    return {"workload": workload, "concurrency": 1, "settings": {"temperature": 0.0},
            "output_digests": dict((pid, [d]) for pid, (d, _) in answers.items()),
            "answer_excerpts": dict((pid, {d: text}) for pid, (d, text) in answers.items()),
            "window": {"start": EPOCH0 + 10, "end": EPOCH0 + 20}}


def test_probe_steps_read_rank0_lines_in_the_probe_window_only():
    log = "server_args={'x': 1}\n" + decode_line(2, 4.0) + decode_line(12, 3.0) + decode_line(15, 2.5)
    probe = [greedy_probe({"p0": ("aa", "one two")})]
    assert vc.probe_steps(log, probe) == {"prose": {"lines": 2, "mean_accept_len": 2.75, "missing": None}}
    got = filters.dsv41_experiment_capped_probe(probe, {"spark1": log, "spark2": ""}, RANKS)
    assert got["steps"]["prose"]["mean_accept_len"] == 2.75 and got["results"] == probe
    assert vc.probe_steps("server_args={}\n", probe)["prose"]["missing"] == (
        "no Decode batch line with #running-req: 1 in the probe's window")
    assert filters.dsv41_experiment_capped_probe([], {"spark1": log}, RANKS) == {}


def test_capped_block_fails_on_another_answer_or_more_tokens_per_step_than_uncapped():
    base = {"results": [greedy_probe({"p0": ("aa", "the cap"), "p1": ("bb", "more words")})],
            "steps": {"prose": {"lines": 8, "mean_accept_len": 3.10, "missing": None}}}
    same = {"results": base["results"], "steps": {"prose": {"lines": 9, "mean_accept_len": 2.90, "missing": None}}}
    assert vc.capped_failures(same, base) == []
    assert vc.capped_failures(same, None) == [], "the baseline itself: only that its probe ran"
    assert vc.capped_failures({}, base) == ["capped_block: no greedy probe was answered under this condition"]
    dead = {"results": [greedy_probe({"p0": ("cc", "the dead row"), "p1": ("bb", "more words")})],
            "steps": {"prose": {"lines": 8, "mean_accept_len": 3.40, "missing": None}}}
    assert vc.capped_failures(dead, base) == [
        "capped_block: prose prompt p0: the arm answered 'the dead row' under the cap where the uncapped baseline "
        "answered 'the cap'",
        "capped_block: prose: 3.400 committed tokens per step under the cap, above the uncapped baseline's 3.100 on "
        "the same greedy prompts (8 and 8 Decode batch lines): the cap can only remove acceptances, so dead verify "
        "rows were committed"]
    unmeasured = {"results": base["results"], "steps": {"prose": {"lines": 0, "mean_accept_len": None,
                                                                  "missing": "no Decode batch line"}}}
    assert vc.capped_failures(unmeasured, base) == [
        "capped_block: prose: committed tokens per step not measured (cap: no Decode batch line; baseline: no figure)"]


def test_the_correctness_filter_runs_both_checks_from_the_probes():
    checks = [{"name": "proposal_distribution", "args": {"alpha": 0.001}}, {"name": "capped_block", "args": {}}]
    results = [{"workload": "prose", "concurrency": 1, "distinct_outputs": 1}]
    base_probe = {"results": [greedy_probe({"p0": ("aa", "x")})],
                  "steps": {"prose": {"lines": 3, "mean_accept_len": 3.0, "missing": None}}}
    conditions = {"baseline": {"results": results, "capped_probe": base_probe}}
    good = {"proposal": [probe_result(sampled_requests())], "capped": base_probe}
    assert filters.dsv41_experiment_correctness(checks, results, {}, conditions, "baseline", [], good) == []
    assert filters.dsv41_experiment_correctness(checks, results, {}, conditions, "cap", [], good) == []
    assert filters.dsv41_experiment_correctness(checks, results, {}, conditions, "cap", [], {}) == [
        "proposal_distribution: no sampled request asked for logprobs, so the proposal was not tested",
        "capped_block: no greedy probe was answered under this condition"]
    figures = filters.dsv41_experiment_proposal(good["proposal"])
    assert figures["prose"]["positions"] == 1200 and len(figures["prose"]["bins"]) == 10
    assert filters.dsv41_experiment_proposal([]) == {}


# --------------------------------------------------------------------------- decode_bench asks and keeps them

def test_decode_bench_asks_for_logprobs_and_pools_each_sampled_answer(engine, prompt_files):  # noqa: F811
    engine.logprobs = True
    workloads = {"prose": inputs.load_prompts(prompt_files["prose"])}
    out = db.run_benchmark(engine.url, workloads, {"concurrency": [1], "repetitions": 1, "warmups": 0,
                                                   "timeout": 5, "purpose": "quality", "temperature": 0.6,
                                                   "top_p": 0.95, "top_k": 20, "seed": 1234, "top_logprobs": 20},
                           api_key="sk-test-SECRET-4242")
    body = engine.bodies[-1]
    assert body["logprobs"] is True and body["top_logprobs"] == 20
    (res,) = out["results"]
    pit = res["proposal_pit"]
    # the fake answers each prompt with 20 messages of three copies of a three-word piece
    assert pit["requests"] == 2 and pit["without_logprobs"] == 0 and pit["positions"] == 2 * 180
    assert all(0.0 <= u < 1.0 for u in pit["pit"]) and res["settings"]["top_logprobs"] == 20
    engine.logprobs = False
    out = db.run_benchmark(engine.url, workloads, {"concurrency": [1], "repetitions": 1, "warmups": 0,
                                                   "timeout": 5, "purpose": "quality", "temperature": 0.6,
                                                   "seed": 1234, "top_logprobs": 5, "stream": False},
                           api_key="sk-test-SECRET-4242")
    assert out["results"][0]["proposal_pit"]["without_logprobs"] == 2


def test_decode_bench_refuses_more_top_logprobs_than_the_api_gives():
    with pytest.raises(client.BenchError) as exc:
        inputs.validate_settings({"top_logprobs": 21})
    assert str(exc.value) == "top_logprobs must be 0 (not asked) to 20, got 21"


# --------------------------------------------------------------------------- the definitions

def test_the_schema_takes_the_new_checks_and_refuses_a_bad_parameter_naming_it():
    doc = yaml.safe_load((ROOT / "experiments" / "stage_h_sampling.yml").read_text())
    names = [list(c)[0] if isinstance(c, dict) else c for c in doc["correctness"]]
    assert "proposal_distribution" in names
    doc["correctness"].append({"proposal_distribution": {"top_logprobs": 30}})
    with pytest.raises(es.DefinitionError) as exc:
        es.validate(doc, source="experiments/stage_h_sampling.yml")
    assert "correctness[%d].proposal_distribution.top_logprobs: must be an integer 1..20, got 30" % (
        len(doc["correctness"]) - 1) in str(exc.value)
    doc["correctness"][-1] = {"proposal_distribution": {"logprobs": "raw"}}
    with pytest.raises(es.DefinitionError):
        es.validate(doc, source="experiments/stage_h_sampling.yml")



def test_the_record_tables_the_proposal_test_and_the_capped_probe_per_condition():
    from ansible.module_utils.experiment import record as er
    conditions = {
        "baseline": {"proposal": {"prose": {"positions": 1843, "bins": [180] * 9 + [223], "chi2": 11.5, "df": 9,
                                            "p": 0.24}},
                     "capped_probe": {"steps": {"prose": {"lines": 8, "mean_accept_len": 3.7025, "missing": None}}}},
        "cap": {"proposal": {}, "capped_probe": {"steps": {"prose": {"lines": 0, "mean_accept_len": None,
                                                                      "missing": "no Decode batch line"}}}},
        "other": {}}
    assert er.verification_table(conditions, ["baseline", "cap", "other"]) == [
        "", "## Speculative verification: proposal test and capped-block probe", "",
        "| condition | workload | sampled positions | PIT bins | uniformity | committed tokens per step (greedy probe, C1) |",
        "|---|---|---|---|---|---|",
        "| baseline | prose | 1843 | 180 180 180 180 180 180 180 180 180 223 | chi2 11.5 on 9 df, p=0.24 | 3.703 (8 lines) |",
        "| cap | prose | - | - | - | no Decode batch line |"]
    assert er.verification_table({"baseline": {}}, ["baseline"]) == []
