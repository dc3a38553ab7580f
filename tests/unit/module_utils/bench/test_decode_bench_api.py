"""decode_bench against the real API's shapes (SPEC section 3): reasoning apart from the answer, error events
and aborts as failed repetitions with their codes, sampled settings; the Decode batch step figures."""
import json

import pytest

from ansible.module_utils.bench import decode as db
from ansible.module_utils.bench import client as bench_client, inputs
from ansible.module_utils.bench import client as dbc
from ansible.module_utils.bench import summary as dbs
from ansible.module_utils.engine_log import decode_steps
from ansible.module_utils.experiment import stats as experiment_stats

import decode_bench
from modrun import run_module
# a generous per-request timeout: these tests assert figures, and a loaded test machine must not turn
# them into timeouts
from test_decode_bench import KEY, bench, engine, prompt_files  # noqa: F401  (fixtures)


# --------------------------------------------------------------------------- client and summary

def test_reasoning_and_answer_reported_apart(engine, prompt_files):  # noqa: F811
    engine.reasoning_messages = 5
    engine.usage_extra = {"reasoning_tokens": 15}
    res = bench(engine, prompt_files, names=("code",), thinking=True, timeout=30)
    (cond,) = res["results"]
    assert engine.bodies[-1]["chat_template_kwargs"] == {"thinking": True}
    assert cond["requests"] == 5 and cond["reasoning_tokens_total"] == 5 * 15
    assert cond["answer_tokens_total"] == 5 * (60 - 15) and cond["completion_tokens_total"] == 5 * 60
    assert cond["ttft_reasoning_ms_median"] is not None and cond["ttft_answer_ms_median"] is not None
    assert cond["ttft_reasoning_ms_median"] <= cond["ttft_answer_ms_median"]
    assert cond["ttft_ms_median"] == cond["ttft_reasoning_ms_median"]
    # 20 text-bearing messages of 3 tokens each: 19 gaps per request, 60 / 20 tokens per message
    assert cond["itl_ms_median"] is not None and cond["itl_ms_min"] <= cond["itl_ms_median"] <= cond["itl_ms_max"]
    assert cond["tokens_per_message_median"] == 3.0
    assert cond["distinct_answers"] == cond["distinct_reasoning"] == 1 and cond["failed_repetitions"] == 0
    assert res["summary"]["code"]["c1"]["itl_ms_median"] == cond["itl_ms_median"]


def test_usage_details_read_in_both_places():
    assert dbc.usage_details({"completion_tokens": 9, "reasoning_tokens": 4}) == (4, {})
    assert dbc.usage_details({"completion_tokens_details": {"reasoning_tokens": 5, "accepted_prediction_tokens": 30,
                                                            "rejected_prediction_tokens": 10, "note": "x"}}) == (
        5, {"accepted_prediction_tokens": 30, "rejected_prediction_tokens": 10})
    assert dbc.usage_details({"completion_tokens": 9}) == (None, {})
    assert dbc.usage_details(None) == (None, {})


def test_speculative_counts_summed_with_accept_rate(engine, prompt_files):  # noqa: F811
    engine.usage_extra = {"completion_tokens_details": {"reasoning_tokens": 0, "accepted_prediction_tokens": 30,
                                                        "rejected_prediction_tokens": 10}}
    (cond,) = bench(engine, prompt_files, names=("code",), timeout=30)["results"]
    assert cond["speculative"] == {"totals": {"accepted_prediction_tokens": 150, "rejected_prediction_tokens": 50},
                                   "accept_rate": 0.75}
    assert cond["reasoning_tokens_total"] == 0 and cond["answer_tokens_total"] == 300


def test_error_event_and_abort_are_failed_repetitions_with_codes(engine, prompt_files):  # noqa: F811
    # one prompt, C1: request n is round n (request 0 is the warm-up)
    engine.fail = {2: "error", 4: "abort"}
    res = bench(engine, prompt_files, names=("code",), timeout=30)
    (cond,) = res["results"]
    assert res["requests_sent"] == len(engine.bodies) == 8 and res["incomplete"] == []
    assert cond["rounds"] == 5 and cond["complete"] is True and cond["requests"] == 5
    assert cond["failed_repetitions"] == 2 and cond["failed_warmups"] == 0
    assert cond["error_codes"] == {"503": 1, "abort": 1}
    assert [(f["round"], f["code"], f["message"]) for f in cond["failures"]] == [
        (1, 503, "lost a rank"), (3, "abort", "finish_reason abort after 10 content message(s)")]
    assert cond["finish_reasons"] == {"length": 5}, "a failed repetition is never a measurement"
    assert cond["completion_tokens_total"] == 5 * 60


def test_failed_warmup_is_not_a_failed_repetition(engine, prompt_files):  # noqa: F811
    engine.fail = {0: "error"}
    (cond,) = bench(engine, prompt_files, names=("code",), timeout=30)["results"]
    assert cond["failed_warmups"] == 1 and cond["failed_repetitions"] == 0 and cond["rounds"] == 5
    assert cond["warmup_rounds"] == 0 and cond["error_codes"] == {"503": 1}


def test_non_stream_error_body_and_abort(engine, prompt_files):  # noqa: F811
    engine.fail = {1: "error", 2: "abort"}
    (cond,) = bench(engine, prompt_files, names=("code",), stream=False, failed_repetition_retries=3,
                    timeout=30)["results"]
    assert cond["error_codes"] == {"503": 1, "abort": 1} and cond["rounds"] == 5


def test_too_many_failures_leave_the_condition_incomplete(engine, prompt_files, tmp_path):  # noqa: F811
    engine.fail = {1: "error", 2: "error"}
    res = bench(engine, prompt_files, names=("code",), failed_repetition_retries=1, timeout=30)
    (cond,) = res["results"]
    assert cond["rounds"] == 0 and cond["complete"] is False and cond["aggregate_tok_s"]["median"] is None
    assert res["incomplete"] == ["code C1: 0 of 5 measured repetitions (2 failed, error codes 503 x2)"]
    assert len(engine.bodies) == 3

    engine.bodies = []
    raw = tmp_path / "raw.json"
    out = run_module(decode_bench.main, {"url": engine.url, "api_key": KEY, "prompt_files": {"code": prompt_files["code"]},
                                         "concurrency": [1], "failed_repetition_retries": 1, "host_label": "spark2",
                                         "raw_output": str(raw), "timeout": 30})
    assert out["failed"] is True and out["msg"] == (
        "spark2: failed repetitions left too few measured rounds: code C1: 0 of 5 measured repetitions "
        "(2 failed, error codes 503 x2)")
    assert out["results"][0]["failures"][0]["code"] == 503 and KEY not in json.dumps(out)
    record = json.loads(raw.read_text())
    assert [rd["failed"] for rd in record["conditions"][0]["rounds"]] == [False, True, True]
    failed_req = record["conditions"][0]["rounds"][1]["streams"][0]["requests"][0]
    assert failed_req["error"]["code"] == 503 and failed_req["response"][-1] == {
        "error": {"message": "lost a rank", "type": "ServiceUnavailableError", "code": 503}}


def test_module_reports_the_new_figures(engine, prompt_files):  # noqa: F811
    engine.reasoning_messages = 2
    engine.usage_extra = {"reasoning_tokens": 6}
    engine.fail = {3: "abort"}
    out = run_module(decode_bench.main, {"url": engine.url, "api_key": KEY, "prompt_files": {"code": prompt_files["code"]},
                                         "concurrency": [1, 2], "thinking": True, "host_label": "spark2", "timeout": 30})
    assert not out.get("failed"), out
    c1 = out["summary"]["code"]["c1"]
    assert c1["failed_repetitions"] == 1 and c1["error_codes"] == {"abort": 1} and c1["rounds"] == 5
    assert out["summary"]["code"]["c2"]["failed_repetitions"] == 0 and out["failed_repetitions"] == 1
    assert out["results"][1]["concurrency"] == 2 and out["results"][1]["reasoning_tokens_total"] == 10 * 6


def test_pre_stream_error_code_reported(engine, prompt_files):  # noqa: F811
    engine.status = 400
    engine.error_body = {"object": "error", "message": "context too long", "type": "BadRequestError", "code": 400}
    with pytest.raises(bench_client.BenchError) as exc:
        bench(engine, prompt_files, names=("code",), timeout=30)
    assert exc.value.status == 400 and exc.value.code == 400 and "context too long" in str(exc.value)
    out = run_module(decode_bench.main, {"url": engine.url, "api_key": KEY, "prompt_files": {"code": prompt_files["code"]},
                                         "host_label": "spark2", "timeout": 30})
    assert out["failed"] and out["status"] == 400 and out["error_code"] == 400


def test_summary_tells_distinct_answers_from_distinct_reasoning():
    prompts = [{"id": "p0", "messages": []}]

    def rec(reasoning, text):
        return {"prompt_id": "p0", "completion_tokens": 8, "reasoning_tokens": 4, "text": text, "reasoning": reasoning,
                "ttft_s": 0.1, "gaps_s": [0.02, 0.04, 0.03], "messages": 4, "finish_reason": "stop"}

    rd = {"concurrency": 1, "aggregate_tok_s": 10.0, "per_stream_tok_s": 10.0, "wall_s": 1.0,
          "streams": [{"stream": 0, "requests": [rec("think a", "42"), rec("think b", "42"), rec("think c", "41")]}]}
    out = dbs.summarize([rd], prompts)
    assert out["distinct_outputs"] == 3 and out["distinct_answers"] == 2 and out["distinct_reasoning"] == 3
    assert out["itl_ms_median"] == pytest.approx(30.0) and out["itl_ms_p90"] == pytest.approx(40.0)
    assert out["tokens_per_message_median"] == 2.0 and out["answer_tokens_total"] == 12
    assert out["ttft_reasoning_ms_median"] is None and out["speculative"] is None


# --------------------------------------------------------------------------- sampled settings

def test_sampled_requests_need_a_seed_and_carry_fixed_settings(engine, prompt_files):  # noqa: F811
    with pytest.raises(bench_client.BenchError, match="need a fixed seed"):
        inputs.validate_settings({"temperature": 0.7})
    for bad, word in (({"top_p": 0}, "top_p"), ({"top_p": 1.2}, "top_p"), ({"top_k": 0}, "top_k"),
                      ({"seed": -1}, "seed"), ({"temperature": -0.1}, "temperature"),
                      ({"failed_repetition_retries": -1}, "failed_repetition_retries")):
        with pytest.raises(bench_client.BenchError, match=word):
            inputs.validate_settings(bad)
    bench(engine, prompt_files, names=("code",), temperature=0.7, top_p=0.9, top_k=20, seed=1234,
          concurrency=[2], max_tokens=99, timeout=30)
    for body in engine.bodies:
        assert (body["temperature"], body["top_p"], body["top_k"], body["seed"]) == (0.7, 0.9, 20, 1234)
        assert body["max_completion_tokens"] == body["max_tokens"] == 99
    greedy = db.build_body([], inputs.validate_settings({}))
    assert "seed" not in greedy and "top_p" not in greedy and greedy["temperature"] == 0.0


def test_module_refuses_sampling_without_a_seed(engine, prompt_files):  # noqa: F811
    out = run_module(decode_bench.main, {"url": engine.url, "prompt_files": prompt_files, "temperature": 0.6,
                                         "host_label": "spark2"})
    assert out["failed"] and "need a fixed seed" in out["msg"] and engine.bodies == []
    out = run_module(decode_bench.main, {"url": engine.url, "prompt_files": prompt_files, "temperature": 0.6,
                                         "seed": 3, "top_p": 0.95, "host_label": "spark2"}, check_mode=True)
    assert out["skipped"] and out["settings"]["seed"] == 3 and out["settings"]["top_p"] == 0.95


# --------------------------------------------------------------------------- Decode batch lines

NEW = ("[2026-09-24 02:55:0{s} TP0 EP0] Decode batch, #running-req: {r}, #full token: 0, full token usage: 0.00, "
       "#swa token: 0, swa token usage: 0.00, accept len: {a}, accept rate: 0.41, cuda graph: True, "
       "gen throughput (token/s): {t}, #queue-req: 0")
OLD = ("[2026-09-23 22:14:05 TP0 EP0] Decode batch. #running-req: 1, #token: 2311, token usage: 0.00, cuda graph: True, "
       "gen throughput (token/s): 21.34, #queue-req: 0")
BOOT = "[2026-09-24 02:50:00] server_args={'model_path': '/models/dsv41', 'tp_size': 3}"


def test_step_stats_from_decode_batch_lines():
    text = "\r\n".join([NEW.format(s=1, r=1, a="3.00", t="30.00"), "\x1b[32m" + NEW.format(s=2, r=2, a="2.50", t="50.00")
                        + "\x1b[0m", NEW.format(s=3, r=1, a="2.00", t="25.00")]) + "\r\n"
    stats = decode_steps.step_stats(text)
    assert stats["lines"] == 3 and stats["missing"] is None
    assert stats["committed_tokens_per_step"] == {"median": 2.5, "min": 2.0, "max": 3.0, "n": 3}
    # one step of the batch: #running-req * accept len / gen throughput -> 100, 100, 80 ms
    assert stats["step_ms"]["median"] == pytest.approx(100.0) and stats["step_ms"]["min"] == pytest.approx(80.0)
    c1 = decode_steps.step_stats(text, running=1)
    assert c1["lines"] == 2 and c1["committed_tokens_per_step"]["median"] == 2.5


def test_step_stats_latest_boot_partial_line_and_old_build():
    earlier = NEW.format(s=1, r=1, a="4.00", t="10.00")
    latest = NEW.format(s=5, r=1, a="2.00", t="20.00")
    half = NEW.format(s=6, r=1, a="9.00", t="1.00")[:-15]                  # written up to "... #queue"
    stats = decode_steps.step_stats("\n".join([earlier, BOOT, latest, half]))
    assert stats["lines"] == 1 and stats["committed_tokens_per_step"]["median"] == 2.0
    assert stats["step_ms"]["median"] == pytest.approx(100.0)
    old = decode_steps.step_stats(b"\n".join([BOOT.encode(), OLD.encode(), b""]))
    assert old["lines"] == 1 and old["committed_tokens_per_step"] is None and old["step_ms"] is None
    assert "none carries accept len" in old["missing"]
    assert decode_steps.step_stats(BOOT + "\n")["missing"] == "no Decode batch line in the latest boot"
    assert "with #running-req: 4" in decode_steps.step_stats(latest + "\n", running=4)["missing"]
    zero = decode_steps.step_stats(NEW.format(s=1, r=1, a="2.00", t="0.00") + "\n")
    assert zero["committed_tokens_per_step"]["median"] == 2.0 and "step time unknown" in zero["missing"]


def test_workload_steps_split_rank0_lines_by_each_workload_window():
    import calendar
    t0 = calendar.timegm((2026, 9, 24, 2, 55, 0, 0, 0, 0))     # the lines' prefix times are 02:55:0s (UTC)
    text = "\n".join([BOOT, NEW.format(s=1, r=1, a="3.00", t="30.00"), NEW.format(s=2, r=1, a="3.00", t="30.00"),
                      NEW.format(s=6, r=1, a="2.00", t="40.00"), NEW.format(s=7, r=4, a="2.00", t="40.00"),
                      NEW.format(s=8, r=1, a="2.00", t="40.00")]) + "\n"
    results = [{"workload": "code", "concurrency": 1, "window": {"start": t0 + 0.5, "end": t0 + 2.5}},
               {"workload": "prose", "concurrency": 1, "window": {"start": t0 + 6.2, "end": t0 + 8.9}},
               {"workload": "prose", "concurrency": 4, "window": {"start": t0 + 7.0, "end": t0 + 7.9}},
               {"workload": "math", "concurrency": 1, "window": None}]
    out = decode_steps.workload_steps({"spark1": text, "spark2": "x"}, {"spark1": 0, "spark2": 1}, results)
    assert sorted(out) == ["code", "prose"], "no window, no figure; only C1 lines"
    assert out["code"]["lines"] == 2 and out["code"]["committed_tokens_per_step"]["median"] == 3.0
    # 3 tokens per step, a step of 100 ms: 30 committed tokens per second of step time
    assert out["code"]["committed_per_s"] == pytest.approx(30.0)
    assert out["prose"]["lines"] == 2 and out["prose"]["committed_per_s"] == pytest.approx(40.0)
    assert decode_steps.workload_steps({"spark2": text}, {"spark2": 1}, results) == {}
    late = decode_steps.workload_steps({"spark1": text}, {"spark1": 0},
                                       [{"workload": "code", "concurrency": 1, "window": {"start": t0 + 60, "end": t0 + 70}}])
    assert late["code"]["committed_per_s"] is None and late["code"]["missing"] == (
        "no Decode batch line with #running-req: 1 in the measured window in the latest boot")


def test_each_round_is_judged_by_committed_tokens_per_step_over_step_time():
    """The report's rank for the block size, per measured round (a judged metric): the lines rank 0 logged in
    each round's window at the result's concurrency; a round without a usable line leaves the metric out."""
    import calendar
    t0 = calendar.timegm((2026, 9, 24, 2, 55, 0, 0, 0, 0))
    text = "\n".join([BOOT, NEW.format(s=1, r=1, a="3.00", t="30.00"), NEW.format(s=2, r=1, a="3.00", t="20.00"),
                      NEW.format(s=4, r=1, a="2.00", t="40.00"), NEW.format(s=5, r=4, a="9.00", t="9.00")]) + "\n"
    result = {"workload": "prose", "concurrency": 1,
              "round_windows": [[t0 + 0.5, t0 + 2.5], [t0 + 3.5, t0 + 5.5]]}
    got = decode_steps.round_metrics(text, result)
    assert got["committed_per_step"] == {"rounds": [3.0, 2.0]}
    # round 1: steps of 100 and 150 ms (median 125) -> 3 / 0.125 = 24 tokens/s; round 2: 2 / 0.05 = 40 (C4 line left out)
    assert got["step_ms"]["rounds"] == pytest.approx([125.0, 50.0]) and got["committed_per_s"] == {"rounds": [24.0, 40.0]}
    late = decode_steps.round_metrics(text, dict(result, round_windows=[[t0 + 0.5, t0 + 2.5], [t0 + 60, t0 + 61]]))
    assert "committed_per_s" not in late and set(late["unmeasured"]) == {"committed_per_s", "committed_per_step", "step_ms"}
    assert late["unmeasured"]["committed_per_s"] == (
        "round 2 of 2 (02:56:00 to 02:56:01 UTC): no Decode batch line with #running-req: 1 in the measured window "
        "in the latest boot")
    # the verdict names the metric as unmeasured, and why
    with pytest.raises(experiment_stats.StatsError) as err:
        experiment_stats.metric_values(dict(result, **late), "committed_per_s")
    assert str(err.value) == "condition prose C1 has no per-repetition committed_per_s: " + late["unmeasured"]["committed_per_s"]
    assert decode_steps.round_metrics(text, dict(result, round_windows=None)) == {}
    both = decode_steps.with_round_metrics([result], {"spark1": text}, {"spark1": 0})
    assert both[0]["committed_per_s"] == {"rounds": [24.0, 40.0]} and "committed_per_s" not in result
    assert decode_steps.with_round_metrics([result], {"spark2": text}, {"spark2": 1}) == [result]


def test_results_carry_the_window_of_their_measured_rounds(engine, prompt_files):  # noqa: F811
    import time
    before = time.time()
    (r,) = bench(engine, prompt_files, names=("code",), warmups=1, timeout=30)["results"]
    assert before <= r["window"]["start"] < r["window"]["end"] <= time.time()
    # each measured round's own window (the warm-up's is not one of them), in order, inside the whole
    assert len(r["round_windows"]) == r["rounds"]
    assert r["round_windows"][0][0] == r["window"]["start"] and r["round_windows"][-1][1] == r["window"]["end"]
    assert all(a[1] <= b[0] for a, b in zip(r["round_windows"], r["round_windows"][1:]))
