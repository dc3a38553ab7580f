"""The head's serving state: each chat request's plan (its words, sampling and faults), its speculative steps
with their latency, and the scheduler lines the batch logs."""
from __future__ import annotations

import hashlib
import json
import math
import os
import random
import threading
import time

from . import knobs
from .adapters import ARM_ADAPTERS, adapter_on, tau_value
from .answers import (THINKING_TOKENS, WORDS_CODE, WORDS_PROSE, count_prompt_tokens, graded_answer, needle_answer,
                      prompt_text)
from .boot import folded_sampling_active, sampler_path_salt
from .caches import layer_budgets
from .clocks import clock_step_factor
from .constants import ENGRAM_LAYERS
from .knobs import env_float, fault
from .pacing import speed_sleep
from .rendezvous import RankStates
from .sampling import (draw_index, live_rows, position_logits, sampling_dist, speculative_draw, tempered,
                       verify_cap)


class Engine:
    """The head's serving state. ``state`` and ``ranks`` are set when the boot completes."""

    def __init__(self, run):
        self.run = run
        self.args = args = run.args
        self.state: dict | None = None
        self.ranks: RankStates | None = None
        self.ready = threading.Event()
        self.sem = threading.BoundedSemaphore(args.max_running_requests)
        self.lock = threading.Lock()
        self.active = 0
        self.sampled_active = 0
        self.queued = 0
        self.lookups = 0
        self.requests = 0
        self.profiling: float | None = None

    def all_packed(self) -> bool:
        return self.ranks.all_packed() if self.ranks else False

    def step_ms(self) -> float:
        k = self.args.dspark_block_size
        packed = self.all_packed()
        base = 98.0 if packed else 120.0
        # each verify row past today's three costs this much (LAB_ENGINE_STEP_MS_PER_ROW, default 4 ms): set high,
        # a longer block loses to k=3 on committed tokens per second of step time, as the report warns it may
        base += knobs.number("LAB_ENGINE_STEP_MS_PER_ROW") * (k - 3)
        if adapter_on("wo_a_w8"):
            base -= 4.0
        if adapter_on("engram_prefetch") and packed:
            base -= 2.0
        if os.environ.get("DSV41_ENGRAM_PREFETCH_CHECK", "0").strip() == "1":
            base += 15.0
        if adapter_on("draft_head_fp8"):
            base -= 1.0
        if adapter_on("verify_cap"):
            base -= 2.0   # dead verify rows routed to the anchor's experts: less expert work per step (a lab figure)
        if self.args.ep_size == 1 and self.args.tp_size > 1:
            base -= 3.0   # EP1: every rank holds a slice of every expert, no expert imbalance (a lab figure)
        cache = sum(layer_budgets().values())
        if cache > 0:
            base -= 4.0 * min(cache, 0.5)   # fewer exposed Engram misses, up to 2 ms at 0.5 GiB
            if int(env_float("DSV41_CACHE_WAYS", 4)) >= 16:
                base -= 0.5                  # ways matter only with a non-zero cache
        base *= clock_step_factor()   # 1.0 at the 2200 MHz lock, 0.988 unlocked at boost, less when throttled
        with self.lock:
            active = max(1, self.active)
        return base * (1 + 0.12 * (active - 1))

    def plan(self, body: dict) -> dict:
        messages = body.get("messages") or []
        text = prompt_text(messages)
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).digest()
        h = int.from_bytes(digest[:8], "little")
        temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
        seed = body.get("seed")
        if temperature <= 0:
            rng = random.Random(h)
        elif isinstance(seed, int) and not isinstance(seed, bool):
            # fixed seed: repeatable; a sampler path other than the default (forced folding, draft temperature,
            # block verification) draws another stream from the same distribution, as the real engine does
            rng = random.Random(h ^ (seed * 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF) ^ sampler_path_salt())
        else:
            rng = random.Random(int.from_bytes(os.urandom(8), "little"))
        kwargs = body.get("chat_template_kwargs") or {}
        thinking = bool(kwargs.get("thinking") or kwargs.get("enable_thinking"))
        natural = 64 + h % 961 + (THINKING_TOKENS if thinking else 0)
        if temperature > 0:
            natural = max(64, natural + rng.randint(-32, 32))
        # max_completion_tokens overrides the deprecated max_tokens
        limit = body.get("max_completion_tokens")
        if limit is None:
            limit = body.get("max_tokens")
        if limit is None:
            limit = 1024
        n_out = max(0, min(int(limit), natural))
        low = text.lower()
        code = "def " in low or "code" in low
        vocab = WORDS_CODE if code else WORDS_PROSE
        folded = folded_sampling_active(self.state["mem"]) if self.state else False
        # draft temperature acts only on a folded proposal; block verification only on sampled rows
        tau = adapter_on("draft_tau") and folded and temperature > 0
        verify = adapter_on("block_verify") and temperature > 0
        want_logprobs = bool(body.get("logprobs")) and not knobs.on("LAB_ENGINE_NO_LOGPROBS")
        top_n = int(body.get("top_logprobs") or 0) if want_logprobs else 0
        dists = None        # the reported (tempered) distribution at each position, when logprobs are asked
        if temperature > 0:
            top_k, top_p = body.get("top_k"), body.get("top_p")
            greedy_seq = random.Random(h)
            words, dists = [], []
            for i in range(n_out):
                z, d = position_logits(h, i, vocab, greedy_seq.choice(vocab))
                probs = tempered(z, temperature)
                target = sampling_dist(probs, top_k, top_p)
                if tau:
                    # the folded proposal: the draft at temperature T * tau; acceptance and residual must use it
                    proposal = sampling_dist(tempered(d, temperature * tau_value()), top_k, top_p)
                    used = sampling_dist(tempered(d, temperature), top_k, top_p) if fault("tau_untempered") else proposal
                    j = speculative_draw(rng, target, proposal, used)
                else:
                    j = draw_index(rng, target)
                if fault("sampler_shift") and (tau or verify) and rng.random() < 0.5:
                    # the arm's sampler draws from a shifted distribution: the first third of the vocabulary
                    # far more often than it should
                    j = rng.randrange(max(1, len(vocab) // 3))
                words.append(vocab[j])
                dists.append(probs)
            if not want_logprobs:
                dists = None
        else:
            words = [rng.choice(vocab) for _ in range(n_out)]
            if want_logprobs:
                greedy_seq = random.Random(h)
                dists = [tempered(position_logits(h, i, vocab, greedy_seq.choice(vocab))[0], 0.0) for i in range(n_out)]
        with self.lock:
            self.requests += 1
            number, others = self.requests, self.active
            sampled_running = self.sampled_active
        if temperature <= 0 and fault("mixed_greedy") and adapter_on("block_verify") and sampled_running > 0:
            # block verification applied to every row of a batch holding a sampled one: the greedy rows'
            # committed tokens change
            mix = random.Random(h ^ 0x5BD1E995)
            words = [mix.choice(vocab) if i % 5 == 2 else w for i, w in enumerate(words)]
        if temperature <= 0 and fault("fold_race") and adapter_on("folded_fence"):
            # a folded result read after the next step overwrote the verify buffer: under concurrency, and
            # on every other request alone, some committed tokens come from another row
            if others > 0 or number % 2 == 0:
                race = random.Random(int.from_bytes(os.urandom(8), "little"))
                words = [race.choice(vocab) if i % 7 == 3 else w for i, w in enumerate(words)]
        needle = needle_answer(messages, count_prompt_tokens(messages))
        if needle is not None:
            words = needle[:max(1, int(limit))]
            n_out = natural = len(words)
        graded = graded_answer(messages)
        if graded is not None:
            words = graded[:max(1, int(limit))]
            n_out = natural = len(words)
        if temperature <= 0 and fault("answer_drift") and any(adapter_on(a) for a in ARM_ADAPTERS) and h % 4 == 1:
            # an arm that changes what greedy decoding commits: one prompt in four gets other words
            drift = random.Random(h ^ 0x2545F491)
            words = [drift.choice(vocab) if i % 9 == 4 else w for i, w in enumerate(words)]
        if fault("nonfinite") and adapter_on("wo_a_w8"):
            self.run.log("Detected errors during sampling! NaN in the logits.")
            words = ["!"] * n_out
        accept = (0.70 if code else 0.55)
        if temperature > 0:
            accept -= 0.12            # sampled rows accept fewer drafted tokens than greedy ones
        if tau:
            accept += 0.03
        if verify:
            accept += 0.06
        every_error = int(knobs.number("LAB_ENGINE_STREAM_ERROR_EVERY"))
        every_abort = int(knobs.number("LAB_ENGINE_ABORT_EVERY"))
        cut = None
        if every_error > 0 and number % every_error == 0:
            cut = "error"
        elif every_abort > 0 and number % every_abort == 0:
            cut = "abort"
        if needle is not None or graded is not None:
            dists = None if dists is None else [None] * len(words)     # a fixed answer: every token certain
        return {"words": words, "prompt_tokens": count_prompt_tokens(messages), "accept": min(accept, 0.95),
                "vocab": vocab, "dists": dists, "logprobs": want_logprobs, "top_logprobs": top_n, "cap": verify_cap(),
                "cap_rng": random.Random(h ^ 0x3C6EF372),
                "finish": "length" if n_out < natural else "stop", "rng": rng,
                "reasoning": min(THINKING_TOKENS, n_out) if thinking else 0,
                "cut": cut, "cut_at": max(1, n_out // 2), "accepted": 0, "proposed": 0,
                "sampled": temperature > 0}

    def steps(self, plan: dict):
        """Yield lists of committed words, sleeping one speculative step per list. Under the confidence cap the
        accepted drafts of a step are the same draws, limited to its live rows (the cap only removes acceptances);
        fault cap_dead_rows commits the dead rows too, the draft's unverified guesses in place of the target's."""
        k = self.args.dspark_block_size
        words = plan["words"]
        rng = plan["rng"]
        cap = plan.get("cap")
        # the scheduler logs a Decode batch line every decode_log_interval steps of the running batch, with the
        # batch's size at that moment (not only as a request leaves): every LAB_ENGINE_DECODE_LOG_STEPS steps of
        # this request (default 20; 0: only the line as a request leaves), its accept len and the step time over them
        every = int(knobs.number("LAB_ENGINE_DECODE_LOG_STEPS"))
        since, since_tokens, since_steps = time.monotonic(), 0, 0
        i = 0
        while i < len(words):
            accepted = sum(1 for _ in range(k) if rng.random() < plan["accept"])
            n = 1 + accepted
            if cap is not None:
                live = live_rows(cap, plan["cap_rng"], k)
                n = 1 + min(accepted, live)
                if fault("cap_dead_rows") and live < k:
                    legit, n = n, 1 + min(k, accepted + (k - live))
                    for j in range(i + legit, min(i + n, len(words))):
                        words[j] = plan["cap_rng"].choice(plan["vocab"])
            speed_sleep(self.step_ms() * rng.uniform(0.97, 1.03) / 1000.0)
            block = words[i:i + n]
            plan["accepted"] += max(0, len(block) - 1)     # the first token of a step is the target's own
            plan["proposed"] += k
            yield block
            i += n
            since_tokens, since_steps = since_tokens + len(block), since_steps + 1
            if every > 0 and since_steps >= every and i < len(words):
                now = time.monotonic()
                with self.lock:
                    running, queued = self.active, self.queued
                accept_len = since_tokens / since_steps
                step_s = (now - since) / since_steps
                rate = running * accept_len / step_s if step_s > 0 else 0.0
                self.decode_line(running, plan["prompt_tokens"] + i, accept_len, rate, queued)
                since, since_tokens, since_steps = now, 0, 0

    def decode_line(self, running: int, used: int, accept_len: float, rate: float, queued: int) -> None:
        """One ``Decode batch`` line as the engine's scheduler logs it (rank 0 only)."""
        mem = self.state["mem"]
        if self.run.build == "old":
            self.run.log(f"Decode batch. #running-req: {running}, #token: {used}, "
                         f"token usage: {used / max(1, mem['allocated']):.2f}, cuda graph: True, "
                         f"gen throughput (token/s): {rate:.2f}, #queue-req: {queued}")
        else:
            swa_used = min(used, mem["swa"])
            self.run.log(f"Decode batch, #running-req: {running}, #full token: {used}, "
                         f"full token usage: {used / max(1, mem['allocated']):.2f}, #swa token: {swa_used}, "
                         f"swa token usage: {swa_used / max(1, mem['swa']):.2f}, accept len: {accept_len:.2f}, "
                         f"accept rate: {max(0.0, accept_len - 1) / self.args.dspark_block_size:.2f}, "
                         f"cuda graph: True, gen throughput (token/s): {rate:.2f}, #queue-req: {queued}")

    def enter(self, plan: dict):
        with self.lock:
            self.queued += 1
        self.sem.acquire()
        with self.lock:
            self.queued -= 1
            running, queued = self.active, self.queued
            self.active += 1
            self.sampled_active += 1 if plan.get("sampled") else 0
        pool = max(1, self.state["mem"]["allocated"])
        if self.run.build == "old":
            self.run.log(f"Prefill batch. #new-seq: 1, #new-token: {plan['prompt_tokens']}, #cached-token: 0, "
                         f"token usage: {plan['prompt_tokens'] / pool:.2f}, #running-req: {running}, "
                         f"#queue-req: {queued}")
        else:
            self.run.log(f"Prefill batch, #new-seq: 1, #new-token: {plan['prompt_tokens']}, #cached-token: 0, "
                         f"full token usage: {plan['prompt_tokens'] / pool:.2f}, swa token usage: 0.00, "
                         f"#running-req: {running}, #queue-req: {queued}")

    def leave(self, plan: dict, n_tokens: int, steps: int, wall: float) -> None:
        with self.lock:
            self.active -= 1
            self.sampled_active -= 1 if plan.get("sampled") else 0
            running, queued = self.active, self.queued
            self.lookups += plan["prompt_tokens"] + n_tokens
            lookups = self.lookups
        self.sem.release()
        rate = (n_tokens / wall if wall > 0 else 0.0) * (running + 1)   # the batch's tokens per second
        accept_len = n_tokens / max(1, steps)
        self.decode_line(running + 1, plan["prompt_tokens"] + n_tokens, accept_len, rate, queued)
        budgets = layer_budgets()
        ways = int(env_float("DSV41_CACHE_WAYS", 4)) or 4
        for layer in ENGRAM_LAYERS:
            # each layer's own cache (a layer at budget 0 serves every lookup from the shard)
            cache = budgets[layer]
            hit = row_cache_hit_rate(cache * len(ENGRAM_LAYERS), ways, lookups)
            reads = round(lookups * (1.0 - hit))
            if self.run.build == "old":
                self.run.log(f"Engram layer={layer} lookups={lookups} hit_rate={hit * 100:.1f}% reads={reads} "
                             f"cache={cache:.1f}GiB({ways}-way) threads=96")
            else:
                self.run.log(f"Engram layer={layer} lookups={lookups} hit_rate={hit * 100:.1f}% reads={reads} "
                             f"cache={cache:.1f}GiB({ways}-way) scales=0.0GiB threads=96 packed={self.state['packed']}")


# The row cache's hit rate (lab fiction, for the shape of cold and warm): empty at every boot, it fills with
# the rows the served text looks up and approaches a steady rate set by its size (16 ways a little higher).
ROW_CACHE_FILL_LOOKUPS = 3000.0


def row_cache_hit_rate(cache_gib_total: float, ways: int, lookups: int) -> float:
    """Share of Engram lookups the row cache served since the boot (0 without a cache)."""
    if cache_gib_total <= 0:
        return 0.0
    steady = 0.30 * min(cache_gib_total, 0.5) / 0.5 + (0.02 if ways >= 16 else 0.0)
    return steady * (1.0 - math.exp(-lookups / ROW_CACHE_FILL_LOOKUPS))
