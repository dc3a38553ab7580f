"""The sampler (lab fiction of the target's and the draft's distributions): sampled words, speculative
acceptance, logprobs and the confidence cap's live verify rows."""
from __future__ import annotations

import math
import os
import random

from .adapters import adapter_on


# The target model's distribution (lab fiction): at position i of the answer to a prompt (hash h), logits over the
# workload's vocabulary drawn from a generator seeded by (h, i), the greedy answer's word lifted above the rest so
# temperature 0 keeps today's greedy answers. A sampled row commits a word of the request's sampling distribution
# (temperature, then top-k, then top-p on the renormalised rest, as the engine's sampler does) and logprobs report
# the tempered distribution before top-k and top-p (SGLang's default). The draft's logits are the target's plus
# noise: a folded proposal with draft temperature tau is drawn from the draft at temperature T * tau, and
# speculative sampling commits the target's distribution only when its acceptance and residual use that same
# tempered proposal (fault tau_untempered: they use the untempered one).
GREEDY_LIFT = 0.5
DRAFT_NOISE = 0.3
POSITION_MIX = 0x9E3779B1


def position_logits(h: int, i: int, vocab, greedy_word: str) -> tuple:
    """(target logits, draft logits) over ``vocab`` at position ``i`` of the answer to the prompt hashed ``h``."""
    r = random.Random((h * POSITION_MIX + i) & 0xFFFFFFFFFFFFFFFF)
    z = [r.gauss(0.0, 1.0) for _ in vocab]
    z[vocab.index(greedy_word)] = max(z) + GREEDY_LIFT
    return z, [v + r.gauss(0.0, DRAFT_NOISE) for v in z]


def tempered(logits, temperature: float) -> list:
    """softmax(logits / temperature) (temperature 0 or less: the untempered softmax, as a greedy row reports)."""
    t = temperature if temperature > 0 else 1.0
    m = max(v / t for v in logits)
    w = [math.exp(v / t - m) for v in logits]
    total = sum(w)
    return [x / total for x in w]


def sampling_dist(probs, top_k, top_p) -> list:
    """The sampler's distribution from tempered ``probs``: top-k, renormalise, top-p (smallest prefix reaching it)."""
    order = sorted(range(len(probs)), key=lambda j: -probs[j])
    if isinstance(top_k, int) and top_k >= 1:
        order = order[:top_k]
    total = sum(probs[j] for j in order)
    keep, cum = [], 0.0
    limit = float(top_p) if isinstance(top_p, (int, float)) and not isinstance(top_p, bool) else 1.0
    for j in order:
        keep.append(j)
        cum += probs[j] / total
        if cum >= limit:
            break
    out = [0.0] * len(probs)
    kept = sum(probs[j] for j in keep)
    for j in keep:
        out[j] = probs[j] / kept
    return out


def draw_index(rng: random.Random, dist) -> int:
    u = rng.random()
    cum = 0.0
    last = 0
    for j, p in enumerate(dist):
        if p > 0:
            cum += p
            last = j
            if u < cum:
                return j
    return last


def speculative_draw(rng: random.Random, target, proposal, accept_with) -> int:
    """One committed token of speculative sampling: drawn from ``proposal``, kept with min(1, target/accept_with),
    else drawn from the residual max(0, target - accept_with) renormalised. Exactly ``target`` when
    ``accept_with`` is the proposal it was drawn from."""
    j = draw_index(rng, proposal)
    q = accept_with[j]
    if q > 0 and rng.random() < min(1.0, target[j] / q):
        return j
    residual = [max(0.0, a - b) for a, b in zip(target, accept_with)]
    total = sum(residual)
    return draw_index(rng, [x / total for x in residual]) if total > 0 else draw_index(rng, target)


def logprob_entry(token: str, probs, vocab, top_n: int, prefix: str) -> dict:
    """One ``logprobs.content`` entry: the committed token and the ``top_n`` most likely tokens of the reported
    (tempered) distribution ``probs`` over ``vocab`` (None: a fixed answer, the token certain)."""
    if probs is None or token not in vocab:
        return {"token": prefix + token, "logprob": 0.0, "bytes": list((prefix + token).encode()),
                "top_logprobs": [{"token": prefix + token, "logprob": 0.0, "bytes": list((prefix + token).encode())}]}

    def lp(j):
        return math.log(probs[j]) if probs[j] > 0 else -9999.0
    top = sorted(range(len(vocab)), key=lambda j: -probs[j])[:max(0, top_n)]
    return {"token": prefix + token, "logprob": lp(vocab.index(token)), "bytes": list((prefix + token).encode()),
            "top_logprobs": [{"token": prefix + vocab[j], "logprob": lp(j), "bytes": list((prefix + vocab[j]).encode())}
                             for j in top]}


def verify_cap() -> tuple | None:
    """The confidence cap's rule when it took effect: ("fixed", rows) or ("conf", threshold); None when off."""
    if not adapter_on("verify_cap"):
        return None
    raw = os.environ.get("DSV41_VERIFY_CAP", "").strip()
    if raw.startswith("conf:"):
        try:
            return ("conf", float(raw[5:].split(",")[0]))
        except ValueError:
            return ("conf", 0.1)
    try:
        return ("fixed", int(raw))
    except ValueError:
        return None


def live_rows(cap: tuple, rng: random.Random, k: int) -> int:
    """Verify rows the cap keeps live in one step (the rest are dead: routed to the anchor's experts and never
    committed). Under conf:T each next row's draft confidence stays above T with probability 1 - 2T."""
    if cap[0] == "fixed":
        return max(0, min(k, cap[1]))
    live = 0
    while live < k and rng.random() < max(0.0, 1.0 - 2.0 * cap[1]):
        live += 1
    return live
