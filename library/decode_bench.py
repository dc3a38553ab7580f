#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: decode benchmark against the head's OpenAI-compatible endpoint (run on a worker)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: decode_bench
short_description: Measure decode speed, TTFT and determinism of the fleet's chat endpoint
description:
  - Runs ON A WORKER host (load generators never run on the head) against the head's
    OpenAI-compatible C(/v1/chat/completions) endpoint, following SPEC "Measuring".
  - Decode speed is C(usage.completion_tokens) / wall time. Stream messages are never counted as
    tokens; with I(stream) the request carries C(stream_options.include_usage) and a response
    without a usage chunk fails the task.
  - For each workload and each concurrency level C, I(warmups) rounds are run and discarded, then
    I(repetitions) measured rounds. A round is C concurrent streams (threads) started together;
    stream i sends the workload's prompts in turn starting at prompt i mod len(prompts). The same
    prompts and limits are used in every round.
  - Per round, aggregate tok/s = sum(completion_tokens) / round wall time, and per-stream tok/s =
    each stream's tokens / its own wall time (median over the streams). Each condition reports the
    median, min, max and sample stdev over the measured rounds, TTFT (first text, first reasoning,
    first answer), inter-token latency, reasoning and answer tokens apart, request counts and the
    number of distinct outputs per prompt (determinism), distinct answers apart from distinct reasoning.
  - A request that ends in an error event (an C(error) object with its C(code) after the stream
    started) or with C(finish_reason) C(abort) makes its round a failed repetition, never a measurement; it is counted
    and reported with the error's own code, and up to I(failed_repetition_retries) extra rounds per
    condition replace failed ones. The task fails (with the results) when a condition is left with
    fewer than I(repetitions) measured rounds. Errors before the stream (HTTP 4xx/5xx) fail at once.
  - All logic is in C(module_utils/bench/decode.py); this module is a thin wrapper.
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  url:
    description: Base URL of the head's endpoint, e.g. C(http://spark1:8888) (C(/v1) optional).
    type: str
    required: true
  api_key:
    description: API key sent as C(Authorization Bearer); never printed (scrubbed from messages and raw output).
    type: str
  model:
    description: Model name sent in each request (the served name C(/v1/models) lists).
    type: str
    default: deepseek-v4.1-flash
  prompt_files:
    description:
      - "Workload name -> path (on the worker) of a JSON list of prompts. An entry is a string (one
        user message), an object with C(messages) (a list of role/content objects), or an object with
        C(prompt) and an optional C(system); each may carry an C(id)."
    type: dict
    required: true
  concurrency:
    description: Concurrency levels to measure (number of concurrent streams).
    type: list
    elements: int
    default: [1, 4]
  repetitions:
    description: Measured rounds per condition; at least 5 (smaller values are refused).
    type: int
    default: 5
  warmups:
    description: Warm-up rounds per condition, run first and discarded.
    type: int
    default: 1
  prompts_per_stream:
    description:
      - Requests each stream sends per round (cycling through the prompts from its start prompt).
        Default all prompts of the workload.
    type: int
  max_tokens:
    description: Completion limit of every request, sent as C(max_completion_tokens) (which overrides the
      deprecated C(max_tokens)) and as C(max_tokens) for older builds.
    type: int
    default: 256
  temperature:
    description: Sampling temperature; 0 is greedy (the default, unless the stage is about sampling); above 0
      needs I(seed).
    type: float
    default: 0.0
  top_p:
    description: C(top_p) of every request (0 < top_p <= 1); not sent when unset.
    type: float
  top_k:
    description: C(top_k) of every request (>= 1); not sent when unset.
    type: int
  seed:
    description:
      - C(seed) of every request (the same one), so sampled repeats are comparable. Required when
        I(temperature) > 0 (sampled requests without a fixed seed are refused).
    type: int
  greedy_streams:
    description:
      - Mixed greedy/sampled batches (stage H). The first N streams of every round send greedy requests
        (temperature 0, no top-p, top-k or seed) while the others sample with I(temperature), I(top_p),
        I(top_k) and I(seed); each result then has C(greedy_output_digests), the greedy answers alone.
        Needs I(temperature) > 0 and N below the lowest I(concurrency). 0 (default) sends one kind.
    type: int
    default: 0
  top_logprobs:
    description:
      - Ask every request for the target's log-probabilities (C(logprobs true), C(top_logprobs) this many, at most
        20); 0 (default) asks nothing. Each sampled condition then has C(proposal_pit), where every committed token
        falls in the distribution the engine reported, under the request's temperature, top-p and top-k
        (C(module_utils/experiment/verify.py); the stage checks' C(proposal_distribution) test pools it).
    type: int
    default: 0
  logprobs_mode:
    description:
      - What the engine's log-probabilities are. C(tempered) (SGLang's default) after the request's temperature,
        before top-k and top-p; C(original) before the temperature (C(SGLANG_RETURN_ORIGINAL_LOGPROB) set), to
        which C(proposal_pit) then applies the request's temperature itself.
    type: str
    choices: [tempered, original]
    default: tempered
  purpose:
    description:
      - C(timing) (default) measures a condition, at least 5 repetitions. C(quality) sends requests whose answers
        are judged and from which no speed is drawn (the long-context needles of the experiment role, each
        prefilling up to 100k tokens), so one repetition is allowed.
    type: str
    choices: [timing, quality]
    default: timing
  failed_repetition_retries:
    description:
      - Extra rounds a condition may run to replace failed repetitions (a request ended in an error
        event or an abort). Failed rounds are never measurements.
    type: int
    default: 2
  thinking:
    description: Sent as C(chat_template_kwargs.thinking); the engine then streams the reasoning as
      C(reasoning_content), reported apart from the answer.
    type: bool
    default: false
  stream:
    description:
      - Stream responses (TTFT is measured only when streaming). Requires a usage chunk.
    type: bool
    default: true
  timeout:
    description: Per-request socket timeout in seconds (connect and every read).
    type: float
    default: 300
  raw_output:
    description:
      - Path on the worker of a JSON file receiving the full raw record of every request (warm-ups
        included, marked as such), i.e. the request body, every stream event or the response, timings.
        Written atomically, also when a request fails.
    type: path
  progress_file:
    description:
      - Path on the worker of a small JSON progress record, rewritten atomically after each request (at
        most every half second) and after each round; M(decode_bench_wait) reads it to print a line as
        each repetition of each condition finishes while this module runs as an async job. Not written
        in check mode.
    type: path
  run_id:
    description: Id written into the progress record, so a follower tells this run's record from an earlier one.
    type: str
  label:
    description: What is measured (the experiment's condition, e.g. C(baseline) or an arm), named in every progress line.
    type: str
  measured_on:
    description: Free text echoed back (the role labels lab output with it, e.g. C(lab output)).
    type: str
  host_label:
    description: Name used in messages (default the worker's hostname).
    type: str
notes:
  - Check mode sends nothing and returns C(skipped=true) with the plan.
  - Errors (HTTP 401/5xx, timeouts, missing usage) fail with the host label, the URL, the status and
    the error body's C(code) (C(error_code)); the API key is never printed.
  - C(changed) is true only when I(raw_output) was written.
"""

EXAMPLES = r"""
- name: C1/C4 decode timings, from a worker
  decode_bench:
    url: "http://{{ head_host }}:8888"
    api_key: "{{ dsv41_api_key }}"
    prompt_files:
      prose: "{{ bench_dir }}/prose.json"
      code: "{{ bench_dir }}/code.json"
    concurrency: [1, 4]
    repetitions: 5
    raw_output: "{{ bench_dir }}/raw-{{ stage }}.json"
    measured_on: "{{ 'lab output' if lab | default(false) else 'fleet' }}"
  register: bench
  delegate_to: spark2

- ansible.builtin.debug:
    msg: "prose C1 {{ bench.summary.prose.c1.aggregate_tok_s_median | round(2) }} tok/s"

- name: Sampled C1/C2 decode timings with thinking on (fixed sampling settings and seed)
  decode_bench:
    url: "http://{{ head_host }}:8888"
    api_key: "{{ dsv41_api_key }}"
    prompt_files:
      math: "{{ bench_dir }}/math.json"
    concurrency: [1, 2]
    temperature: 0.6
    top_p: 0.95
    top_k: 20
    seed: 1234
    thinking: true
    raw_output: "{{ bench_dir }}/raw-sampled.json"
  delegate_to: spark2
"""

RETURN = r"""
results:
  description: One entry per workload and concurrency level.
  returned: success
  type: list
  elements: dict
  contains:
    workload: {description: Workload name, type: str}
    concurrency: {description: Concurrent streams, type: int}
    aggregate_tok_s:
      description: Aggregate tok/s over measured rounds (median, min, max, stdev, rounds).
      type: dict
    per_stream_tok_s:
      description: Per-round median per-stream tok/s over measured rounds (median, min, max, stdev, rounds).
      type: dict
    ttft_ms_median: {description: Median TTFT in ms over measured requests (None without streaming), type: float}
    ttft_ms_min: {description: Minimum TTFT in ms, type: float}
    ttft_ms_max: {description: Maximum TTFT in ms, type: float}
    ttft_reasoning_ms_median: {description: Median time to the first reasoning text in ms (None without reasoning), type: float}
    ttft_reasoning_ms_min: {description: Minimum time to the first reasoning text in ms, type: float}
    ttft_reasoning_ms_max: {description: Maximum time to the first reasoning text in ms, type: float}
    ttft_answer_ms_median: {description: Median time to the first answer text (C(delta.content)) in ms, type: float}
    ttft_answer_ms_min: {description: Minimum time to the first answer text in ms, type: float}
    ttft_answer_ms_max: {description: Maximum time to the first answer text in ms, type: float}
    itl_ms_median:
      description:
        - Median gap in ms between text-bearing stream messages, pooled over measured requests (the
          engine sends one message per speculative step, so this is the step time a client sees).
      type: float
    itl_ms_p90: {description: 90th percentile of those gaps in ms, type: float}
    itl_ms_min: {description: Smallest gap in ms, type: float}
    itl_ms_max: {description: Largest gap in ms, type: float}
    tokens_per_message_median:
      description: Median over requests of usage tokens per text-bearing message (committed tokens per step a client sees).
      type: float
    reasoning_tokens_total: {description: Sum of usage reasoning_tokens (None when the server reported none), type: int}
    answer_tokens_total: {description: Completion tokens minus reasoning tokens (None when that cannot be told), type: int}
    distinct_answers: {description: Max over prompts of distinct answer texts (reasoning left out), type: int}
    distinct_answers_per_prompt: {description: Prompt id -> distinct answer texts, type: dict}
    distinct_reasoning: {description: Max over prompts of distinct reasoning texts, type: int}
    distinct_reasoning_per_prompt: {description: Prompt id -> distinct reasoning texts, type: dict}
    speculative:
      description:
        - Sums of the numeric counts of C(usage.completion_tokens_details) other than reasoning tokens
          (C(totals)) and C(accept_rate) from accepted/rejected prediction tokens; None when absent.
      type: dict
    failed_repetitions: {description: Measured rounds that failed (error event or abort), never measurements, type: int}
    failed_warmups: {description: Warm-up rounds that failed, type: int}
    failed_requests: {description: Failed requests over every round of the condition, type: int}
    error_codes: {description: Error code (the error event's own code, or abort) -> failed requests, type: dict}
    failures:
      description: Each failed request (kind, round, stream, prompt_id, code, message, finish_reason).
      type: list
    complete: {description: The condition has its I(repetitions) measured rounds, type: bool}
    completion_tokens_total: {description: Sum of usage.completion_tokens of measured requests, type: int}
    requests: {description: Measured requests, type: int}
    rounds: {description: Measured rounds, type: int}
    warmup_rounds: {description: Discarded warm-up rounds, type: int}
    warmup_requests: {description: Discarded warm-up requests, type: int}
    warmup_per_stream_tok_s: {description: Each warm-up round's per-stream rate in the order run (never judged), type: list}
    warmup_aggregate_tok_s: {description: Each warm-up round's aggregate rate in the order run (never judged), type: list}
    distinct_outputs:
      description: Max over prompts of the number of distinct output texts across measured requests (1 = deterministic).
      type: int
    distinct_outputs_per_prompt: {description: Prompt id -> distinct output texts, type: dict}
    deterministic: {description: distinct_outputs == 1, type: bool}
    output_digests:
      description: Prompt id -> short sha256 of each distinct (reasoning, answer), to compare answers across conditions.
      type: dict
    degenerate_outputs: {description: Answers of four or more tokens that are all the same token (non-finite logits), type: int}
    finish_reasons: {description: finish_reason -> count, type: dict}
    prompt_ids: {description: Prompt ids of the workload, type: list}
    settings: {description: Settings used, type: dict}
    proposal_pit:
      description:
        - With I(top_logprobs) and sampled requests, over the distinct (prompt, answer) pairs C(requests),
          C(without_logprobs) (requests the engine answered without logprobs), C(positions), C(pit) (one
          randomised probability integral transform value per committed token, seeded by the answer),
          C(outside) (tokens outside the request's top-k/top-p set as reported) and C(outside_examples).
      type: dict
summary:
  description: "Workload -> C(c<N>) -> medians (aggregate/per-stream tok/s, TTFT ms, answer TTFT ms, ITL ms),
    distinct_outputs, distinct_answers, rounds, failed_repetitions and error_codes. Each condition of
    C(results) also has C(answer_word_counts) when it sampled, and C(greedy_output_digests) when its
    batches mixed greedy and sampled requests (I(greedy_streams))."
  returned: success
  type: dict
settings:
  description: Settings used (model, max_tokens, temperature, top_p, top_k, seed, thinking, stream, repetitions,
    warmups, failed_repetition_retries, concurrency, timeout, prompts_per_stream, greedy_streams, purpose,
    top_logprobs, logprobs_mode).
  returned: always
  type: dict
url:
  description: The endpoint requested.
  returned: always
  type: str
measured_on:
  description: I(measured_on), echoed.
  returned: always
  type: str
requests_sent:
  description: Requests sent, warm-ups and failed repetitions included.
  returned: success
  type: int
failed_repetitions:
  description: Failed measured rounds over every condition.
  returned: success
  type: int
incomplete:
  description: Conditions left with fewer measured rounds than I(repetitions) (the task then fails).
  returned: success
  type: list
  elements: str
error_code:
  description: The error body's own C(code) of a request refused before the stream.
  returned: failure
  type: raw
raw_output:
  description: Path of the raw JSON record, if requested.
  returned: always
  type: str
plan:
  description: In check mode, the conditions and request counts that would be sent.
  returned: check mode
  type: list
"""


from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.bench import decode as db
from ansible.module_utils.bench import client, inputs, summary
from ansible.module_utils.bench.progress import BenchProgress
from ansible.module_utils.base.secrets import redact
from ansible.module_utils.base.host_label import host_label


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            model=dict(type="str", default=inputs.DEFAULTS["model"]),
            prompt_files=dict(type="dict", required=True),
            concurrency=dict(type="list", elements="int", default=list(inputs.DEFAULTS["concurrency"])),
            repetitions=dict(type="int", default=inputs.DEFAULTS["repetitions"]),
            warmups=dict(type="int", default=inputs.DEFAULTS["warmups"]),
            prompts_per_stream=dict(type="int"),
            max_tokens=dict(type="int", default=inputs.DEFAULTS["max_tokens"]),
            temperature=dict(type="float", default=inputs.DEFAULTS["temperature"]),
            top_p=dict(type="float"),
            top_k=dict(type="int"),
            seed=dict(type="int"),
            greedy_streams=dict(type="int", default=inputs.DEFAULTS["greedy_streams"]),
            top_logprobs=dict(type="int", default=inputs.DEFAULTS["top_logprobs"]),
            logprobs_mode=dict(type="str", choices=["tempered", "original"], default=inputs.DEFAULTS["logprobs_mode"]),
            purpose=dict(type="str", choices=list(inputs.PURPOSES), default=inputs.DEFAULTS["purpose"]),
            failed_repetition_retries=dict(type="int", default=inputs.DEFAULTS["failed_repetition_retries"]),
            thinking=dict(type="bool", default=inputs.DEFAULTS["thinking"]),
            stream=dict(type="bool", default=inputs.DEFAULTS["stream"]),
            timeout=dict(type="float", default=inputs.DEFAULTS["timeout"]),
            raw_output=dict(type="path"),
            progress_file=dict(type="path"),
            run_id=dict(type="str"),
            label=dict(type="str"),
            measured_on=dict(type="str"),
            host_label=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    label = host_label(p["host_label"])
    keys = ("model", "concurrency", "repetitions", "warmups", "prompts_per_stream", "max_tokens",
            "temperature", "top_p", "top_k", "seed", "greedy_streams", "failed_repetition_retries", "thinking", "stream",
            "timeout", "purpose", "top_logprobs", "logprobs_mode")
    common = {"url": p["url"], "measured_on": p["measured_on"], "raw_output": p["raw_output"],
              "host_label": label}
    try:
        settings = inputs.validate_settings(dict((k, p[k]) for k in keys))
        client.endpoint(p["url"])
        if not p["prompt_files"]:
            raise client.BenchError("prompt_files is empty")
    except client.BenchError as exc:
        module.fail_json(msg="%s: %s" % (label, client.redact(exc, p["api_key"])), changed=False, **common)
    common["settings"] = summary.public_settings(settings)

    if module.check_mode:
        workloads, unreadable = {}, {}
        for name, path in p["prompt_files"].items():
            try:
                workloads[name] = inputs.load_prompts(path)
            except client.BenchError as exc:       # the role copies the files in a real run only
                workloads[name] = None
                unreadable[name] = str(exc)
        module.exit_json(changed=False, skipped=True, msg="check mode: no request sent",
                         plan=db.plan(workloads, settings), unreadable_prompt_files=unreadable, **common)

    try:
        workloads = dict((name, inputs.load_prompts(path)) for name, path in p["prompt_files"].items())
    except client.BenchError as exc:
        module.fail_json(msg="%s: %s" % (label, exc), changed=False, **common)
    progress = BenchProgress(p["progress_file"], db.plan(workloads, settings), run_id=p["run_id"],
                             label=p["label"], host=label)
    try:
        progress.start()
    except (IOError, OSError) as exc:
        module.fail_json(msg="%s: cannot write the progress file %s: %s" % (label, p["progress_file"], exc),
                         changed=False, **common)
    try:
        result = db.run_benchmark(p["url"], workloads, settings, api_key=p["api_key"], host_label=label,
                                  raw_output=p["raw_output"], measured_on=p["measured_on"], progress=progress)
    except client.BenchError as exc:
        msg = str(exc)
        if not msg.startswith(label):
            msg = "%s: %s" % (label, msg)
        module.fail_json(msg=client.redact(msg, p["api_key"]), changed=bool(p["raw_output"]),
                         status=exc.status, error_code=exc.code, **common)
    except (IOError, OSError) as exc:
        module.fail_json(msg="%s: cannot write raw output %s: %s" % (label, p["raw_output"], exc),
                         changed=False, **common)
    result["changed"] = bool(p["raw_output"])
    result["host_label"] = label
    if result["incomplete"]:
        # fewer than the asked repetitions is not a measurement (SPEC "Measuring"); the figures and the
        # failures go with the failure so the record keeps them
        result.pop("msg", None)
        module.fail_json(msg=client.redact("%s: failed repetitions left too few measured rounds: %s"
                                       % (label, "; ".join(result["incomplete"])), p["api_key"]),
                         **redact(result, [p["api_key"]] if p["api_key"] else []))
    # Same redaction as the raw file, on the data before Ansible encodes it.
    module.exit_json(**redact(result, [p["api_key"]] if p["api_key"] else []))


def main():
    run_module()


if __name__ == "__main__":
    main()
