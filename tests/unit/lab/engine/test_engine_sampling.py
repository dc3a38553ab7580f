"""The engine stand-in's sampling paths (stage H): seeds and sampler paths, the sampler-shift and mixed-greedy faults,
logprobs and the proposal distribution, the confidence cap.
"""
from __future__ import annotations

import json
import math
import re
import time

from engine_standin import CHAT, answer, head_with, request, sse_events


SAMPLED = {**CHAT, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "seed": 1234, "max_tokens": 400}


def sampled_words(port, body=SAMPLED):
    return answer(port, body).split()


def test_sampled_answers_follow_the_seed_and_the_sampler_path(lab):
    outs = {}
    for name, env in (("auto", {}), ("auto2", {}), ("verify", {"DSV41_BLOCK_VERIFY": "1"}),
                      ("tau", {"DSV41_DRAFT_TAU": "0.8"})):
        port, proc = head_with(lab, env)
        try:
            outs[name] = (sampled_words(port), answer(port))
        finally:
            proc.stop()
    assert outs["auto"] == outs["auto2"], "a fixed seed samples alike on the same path"
    assert outs["verify"][0] != outs["auto"][0] and outs["tau"][0] != outs["auto"][0], "another path, another stream"
    assert outs["verify"][1] == outs["tau"][1] == outs["auto"][1], "greedy answers do not depend on the path"


def test_sampler_shift_skews_the_words_only_with_a_sampling_switch(lab):
    from ansible.module_utils.bench import sampling as sc
    counts = {}
    for name, env in (("base", {}), ("shift", {"DSV41_BLOCK_VERIFY": "1", "LAB_ENGINE_FAULT": "sampler_shift"}),
                      ("off", {"LAB_ENGINE_FAULT": "sampler_shift"})):
        port, proc = head_with(lab, env)
        try:
            words = []
            for i in range(6):
                words += sampled_words(port, {**SAMPLED, "messages": [{"role": "user", "content": "story %d" % i}]})
        finally:
            proc.stop()
        counts[name] = dict((w, words.count(w)) for w in set(words))
    assert counts["off"] == counts["base"], "the fault acts only when the arm's switch took effect"
    assert sc.homogeneity(counts["base"], counts["shift"])["p"] < 0.001


def test_mixed_greedy_fault_changes_greedy_rows_beside_sampled_ones(lab):
    import concurrent.futures
    results = {}
    for fault in ("", "mixed_greedy"):
        port, proc = head_with(lab, {"DSV41_BLOCK_VERIFY": "1", "LAB_ENGINE_FAULT": fault,
                                     "LAB_ENGINE_SPEED": "20"})
        try:
            alone = answer(port)
            slow = {**SAMPLED, "max_tokens": 1000}
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                sampled = pool.submit(answer, port, slow)
                time.sleep(0.2)
                mixed = pool.submit(answer, port).result()
                sampled.result()
        finally:
            proc.stop()
        results[fault] = (alone, mixed)
    assert results[""][0] == results[""][1], "greedy answers keep their text in a mixed batch"
    assert results["mixed_greedy"][0] != results["mixed_greedy"][1], "the fault changes the greedy row"
    assert results["mixed_greedy"][0] == results[""][0]


LOGPROBS = {**SAMPLED, "max_tokens": 300, "logprobs": True, "top_logprobs": 20}


def logprob_answer(port, body):
    with request(port, "/v1/chat/completions", body) as r:
        choice = json.load(r)["choices"][0]
    return choice["message"]["content"], choice["logprobs"]["content"]


def proposal_pit(port, prompts=8, body=LOGPROBS):
    """verify_checks' pooled PIT figures over sampled answers with logprobs (what the proposal check judges)."""
    from ansible.module_utils.experiment import verify as vc
    requests = []
    for i in range(prompts):
        b = {**body, "messages": [{"role": "user", "content": "a story about spark %d" % i}]}
        text, content = logprob_answer(port, b)
        requests.append({"greedy": False, "prompt_id": "p%d" % i, "text": text, "logprobs": content})
    pit = vc.condition_pits(requests, {**body, "seed": body["seed"]})
    return vc.uniformity(pit["pit"]), pit


def test_logprobs_streamed_and_not_report_the_distribution_the_answer_was_sampled_from(lab):
    port, proc = head_with(lab, {})
    try:
        text, content = logprob_answer(port, LOGPROBS)
        events = sse_events(port, {**LOGPROBS, "stream": True, "stream_options": {"include_usage": True}})
        with request(port, "/v1/chat/completions", {**SAMPLED, "max_tokens": 300}) as r:
            choice = json.load(r)["choices"][0]
        fig, pit = proposal_pit(port)
    finally:
        proc.stop()
    assert "logprobs" not in choice, "nothing reported unless asked"
    assert "".join(e["token"] for e in content) == text
    for e in content:
        alts = e["top_logprobs"]
        assert len(alts) == 20 and [a["logprob"] for a in alts] == sorted((a["logprob"] for a in alts), reverse=True)
        assert e["token"] in [a["token"] for a in alts], "top_k 20: the committed token is among the top 20"
        assert e["logprob"] == next(a["logprob"] for a in alts if a["token"] == e["token"])
        assert 0.5 < sum(math.exp(a["logprob"]) for a in alts) <= 1.0 + 1e-9, "tempered, before top-k and top-p"
    streamed = [e for ev in events[:-1] for c in ev.get("choices") or [] for e in (c.get("logprobs") or {}).get("content", [])]
    assert streamed == content, "the stream carries each token's entry in the chunk that carries the token"
    assert pit["positions"] >= 1500 and pit["outside"] == 0 and pit["without_logprobs"] == 0
    assert fig["p"] >= 0.001, fig


def test_tau_untempered_fault_commits_tokens_off_the_reported_distribution(lab):
    figs = {}
    for name, env in (("tau", {"DSV41_DRAFT_TAU": "0.8", "SGLANG_DSPARK_FOLDED_SAMPLING": "2"}),
                      ("fault", {"DSV41_DRAFT_TAU": "0.8", "SGLANG_DSPARK_FOLDED_SAMPLING": "2",
                                 "LAB_ENGINE_FAULT": "tau_untempered"}),
                      ("off", {"LAB_ENGINE_FAULT": "tau_untempered"})):
        port, proc = head_with(lab, env)
        try:
            figs[name] = proposal_pit(port)[0]
        finally:
            proc.stop()
    print(figs)
    assert figs["tau"]["p"] >= 0.001 and figs["off"]["p"] >= 0.001, figs
    assert figs["fault"]["p"] < 1e-6, figs["fault"]
    # the tempered proposal is sharper: the target's most likely tokens are committed too often (low PIT values)
    assert figs["fault"]["bins"][0] > figs["fault"]["bins"][-1]


def spec_usage(port, body=CHAT):
    with request(port, "/v1/chat/completions", body) as r:
        out = json.load(r)
    return out["choices"][0]["message"]["content"], out["usage"]


def test_the_cap_only_removes_acceptances_and_the_dead_rows_fault_commits_them(lab):
    got = {}
    prompts = [{**CHAT, "max_tokens": 300, "messages": [{"role": "user", "content": "a story about spark %d" % i}]}
               for i in range(6)]
    for name, env in (("uncapped", {}), ("cap", {"DSV41_VERIFY_CAP": "conf:0.1"}),
                      ("fault", {"DSV41_VERIFY_CAP": "conf:0.1", "LAB_ENGINE_FAULT": "cap_dead_rows"}),
                      ("off", {"LAB_ENGINE_FAULT": "cap_dead_rows"})):
        port, proc = head_with(lab, {"LAB_ENGINE_SPEC_USAGE": "1", **env}, block=5)
        try:
            got[name] = [spec_usage(port, b) for b in prompts]
        finally:
            proc.stop()
        steps = [line for line in proc.text().splitlines() if "Decode batch" in line]
        got[name + "_accept"] = [float(re.search(r"accept len: ([\d.]+)", line).group(1)) for line in steps]

    def accepted(name):
        return [u["completion_tokens_details"]["accepted_prediction_tokens"] for _, u in got[name]]
    assert [t for t, _ in got["cap"]] == [t for t, _ in got["uncapped"]] == [t for t, _ in got["off"]]
    assert all(a <= b for a, b in zip(accepted("cap"), accepted("uncapped"))) and accepted("cap") != accepted("uncapped")
    assert all(a <= b for a, b in zip(got["cap_accept"], got["uncapped_accept"])), (got["cap_accept"], got["uncapped_accept"])
    assert [t for t, _ in got["fault"]] != [t for t, _ in got["uncapped"]], "dead rows commit the draft's guesses"
    assert sum(accepted("fault")) > sum(accepted("uncapped"))
    assert sum(got["fault_accept"]) > sum(got["uncapped_accept"])


def test_a_build_that_ignores_logprobs_answers_alike_without_them_and_the_proposal_check_names_it(lab):
    from ansible.module_utils.experiment import verify as vc
    answers = {}
    for name, env in (("with", {}), ("without", {"LAB_ENGINE_NO_LOGPROBS": "1"})):
        port, proc = head_with(lab, env)
        try:
            with request(port, "/v1/chat/completions", LOGPROBS) as r:
                choice = json.load(r)["choices"][0]
            events = sse_events(port, {**LOGPROBS, "stream": True})
        finally:
            proc.stop()
        streamed = [c for ev in events[:-1] for c in ev.get("choices") or [] if "logprobs" in c]
        answers[name] = (choice["message"]["content"], "logprobs" in choice, bool(streamed))
    assert answers["with"][1:] == (True, True) and answers["without"][1:] == (False, False)
    assert answers["without"][0] == answers["with"][0], "the answer does not depend on the logprobs"
    # what the proposal check makes of such answers (decode_bench records logprobs None when none came back)
    requests = [{"greedy": False, "prompt_id": "p0", "workload": "prose", "text": answers["without"][0],
                 "logprobs": None, "settings": {"top_logprobs": 20}}]
    pit = vc.condition_pits(requests, LOGPROBS)
    assert (pit["requests"], pit["without_logprobs"]) == (1, 1)
    failures, _ = vc.proposal_failures([{"workload": "prose", "proposal_pit": pit, "settings": {"top_logprobs": 20}}])
    assert failures == ["proposal_distribution: prose: the engine returned no logprobs for any of 1 sampled "
                        "request(s) (asked logprobs: true, top_logprobs: 20); the proposal cannot be tested"]
