"""The engine stand-in's Decode batch lines (tokens per step, the batch's size while requests run) and the benchmark
module against the stream-error and abort knobs.
"""
from __future__ import annotations

import json
import sys
import time

from engine_standin import CHAT, ROOT, answer, head_with


def test_decode_batch_lines_give_tokens_per_step(lab):
    from ansible.module_utils.engine_log.decode_steps import step_stats
    # only the line each request logs as it leaves (no periodic lines): one per request
    port, proc = head_with(lab, {"LAB_ENGINE_DECODE_LOG_STEPS": "0"})
    try:
        # one request at a time, each one's decode line seen before the next is sent: two requests in flight
        # at once share a batch line (#running-req: 2), which running=1 leaves out
        for i in range(3):
            answer(port)
            end = time.monotonic() + 20
            while proc.stream("stderr").count("Decode batch") < i + 1 and time.monotonic() < end:
                time.sleep(0.02)
        stats = step_stats(proc.stream("stderr"), running=1)
    finally:
        assert proc.stop() == 0
    assert stats["lines"] == 3 and stats["missing"] is None
    # K=3: 1 to 4 committed tokens per step; prose acceptance 0.55 -> about 2.65 on average
    assert 1.5 < stats["committed_tokens_per_step"]["median"] < 3.8
    assert stats["step_ms"]["median"] > 0


def test_back_to_back_requests_of_one_client_each_log_a_batch_of_one(lab):
    """A client that sends its next request the moment it has read the answer (the benchmark at C1) never finds the
    previous request still in the batch: every Decode batch line says #running-req: 1, as the scheduler's would."""
    from ansible.module_utils.engine_log.decode_steps import decode_batch_lines
    port, proc = head_with(lab, {"LAB_ENGINE_DECODE_LOG_STEPS": "0"})
    short = dict(CHAT, max_tokens=8, max_completion_tokens=8)
    try:
        for _ in range(20):
            answer(port, short)
        time.sleep(0.3)
        lines = decode_batch_lines(proc.stream("stderr"))
    finally:
        assert proc.stop() == 0
    assert len(lines) == 20 and {r["running_req"] for r in lines} == {1.0}, [r["running_req"] for r in lines]


def test_decode_batch_lines_come_every_n_steps_with_the_batch_s_size_while_requests_run(lab):
    """As the scheduler logs every decode_log_interval steps: a long answer logs lines while it runs, each with the
    batch's size at that moment (four requests in flight: #running-req: 4), not only one line as it leaves."""
    import concurrent.futures
    from ansible.module_utils.engine_log.decode_steps import step_stats
    port, proc = head_with(lab, {"LAB_ENGINE_DECODE_LOG_STEPS": "5"})
    long = dict(CHAT, max_tokens=256, max_completion_tokens=256)
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: answer(port, long), range(4)))
        time.sleep(0.3)
        text = proc.stream("stderr")
        four = step_stats(text, running=4)
    finally:
        assert proc.stop() == 0
    assert text.count("Decode batch") > 4 + 4, "periodic lines beside the one each request logs as it leaves"
    assert four["lines"] >= 4 and four["missing"] is None, four
    assert 1.0 <= four["committed_tokens_per_step"]["median"] <= 4.0 and four["step_ms"]["median"] > 0


def bench_against(port, tmp_path, **kw):
    from ansible.module_utils.bench import decode as db
    from ansible.module_utils.bench import inputs
    prompts = tmp_path / "prose.json"
    prompts.write_text(json.dumps([{"id": "sparks", "prompt": "Write a short story about three sparks."}]))
    settings = {"concurrency": [1], "repetitions": 5, "warmups": 0, "max_tokens": 64, "timeout": 30, **kw}
    return db.run_benchmark(f"http://127.0.0.1:{port}", {"prose": inputs.load_prompts(str(prompts))}, settings,
                            api_key="sk-test-secret", host_label="spark2", measured_on="lab output")


def test_benchmark_counts_a_stream_error_as_a_failed_repetition(lab, tmp_path):
    port, proc = head_with(lab, {"LAB_ENGINE_STREAM_ERROR_EVERY": "3"})
    try:
        res = bench_against(port, tmp_path)
    finally:
        assert proc.stop() == 0
    (cond,) = res["results"]
    # requests 3 and 6 fail; two extra rounds replace them: five measured rounds out of seven sent
    assert res["requests_sent"] == 7 and cond["rounds"] == 5 and cond["complete"] is True
    assert cond["failed_repetitions"] == 2 and cond["error_codes"] == {"503": 2}
    assert [f["round"] for f in cond["failures"]] == [2, 5] and res["incomplete"] == []
    assert len(cond["aggregate_tok_s"]["rounds"]) == 5 and cond["distinct_outputs"] == 1
    assert res["summary"]["prose"]["c1"]["error_codes"] == {"503": 2}


def test_benchmark_module_fails_when_aborts_leave_too_few_repetitions(lab, tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    from modrun import run_module
    import decode_bench
    port, proc = head_with(lab, {"LAB_ENGINE_ABORT_EVERY": "2"})
    prompts = tmp_path / "prose.json"
    prompts.write_text(json.dumps(["Write a short story about three sparks."]))
    try:
        res = run_module(decode_bench.main, {
            "url": f"http://127.0.0.1:{port}", "api_key": "sk-test-secret", "prompt_files": {"prose": str(prompts)},
            "concurrency": [1], "warmups": 0, "max_tokens": 64, "failed_repetition_retries": 1,
            "thinking": True, "host_label": "spark2", "timeout": 30})
    finally:
        assert proc.stop() == 0
    assert res["failed"] is True and "prose C1: 2 of 5 measured repetitions (2 failed, error codes abort x2)" in res["msg"]
    (cond,) = res["results"]
    assert cond["error_codes"] == {"abort": 2} and cond["failures"][0]["finish_reason"] == "abort"
    assert cond["reasoning_tokens_total"] == 2 * 64 and cond["answer_tokens_total"] == 0
