# -*- coding: utf-8 -*-
"""Quality checks every arm passes before its speed counts (standard library only).

One subject: what the report asks of an arm's answers besides speed, judged on decode_bench's results:

* ``greedy_matches_baseline``: the arm's greedy answers equal the baseline's, prompt by prompt, on the fixed
  prompt sets both measured (a failure names the prompt and shows both answers);
* ``long_context_needles``: long-context retrieval: a pass code hidden at about 30k and 100k tokens of filler
  (half-way in) must come back in the answer (the advertised context envelope, which short smokes do not
  validate).

The needle prompts are generated here, deterministically from their size, so the check knows each answer
without carrying it: :func:`needle_prompts` writes the set, :func:`needle_failures` judges the answers.
"""
from __future__ import absolute_import, division, print_function

import hashlib
import re

from ansible.module_utils.experiment.graded_tasks import WORKLOAD as GRADED_WORKLOAD

__metaclass__ = type

NEEDLE_WORKLOAD = "needles"
DEFAULT_NEEDLE_TOKENS = (30000, 100000)
NEEDLE_DEPTH = 0.5
# Filler sentences: plain prose about the fleet's routine, none of them a pass code. Their token count is
# estimated at 4 tokens per 3 words (English text in a BPE vocabulary), as the engine would count it.
FILLER = (
    "The operators rotate the maintenance window every week and write down what they changed.",
    "Each rank keeps its own shards on a local disk and reads them through the page cache.",
    "A benchmark condition sends the same prompts several times so that the spread can be judged.",
    "The dashboard shows the temperature of each GPU next to its clock and its power draw.",
    "Nobody restarts the head during business hours unless the fleet has already stopped serving.",
    "The launcher starts the workers first and waits for the head to print that it is ready.",
    "Every change is proposed in the repository and converged by the playbooks afterwards.",
)
VAULTS = ("Kestrel", "Heron", "Marten", "Osprey", "Lynx", "Plover", "Stoat", "Wren")
NEEDLE_ID_RE = re.compile(r"^needle-(\d+)k$")


class QualityError(ValueError):
    pass


def _words_for(tokens):
    return max(1, int(tokens) * 3 // 4)


def needle_facts(tokens):
    """{"id", "tokens", "vault", "code", "depth"} of the needle prompt of about ``tokens`` tokens."""
    tokens = int(tokens)
    if not 1000 <= tokens <= 1000000:
        raise QualityError("long_context_needles: %r tokens is not a context size to test (1,000..1,000,000)" % tokens)
    h = int(hashlib.sha256(("needle-%d" % tokens).encode("ascii")).hexdigest(), 16)
    return {"id": "needle-%dk" % (tokens // 1000), "tokens": tokens, "vault": VAULTS[h % len(VAULTS)],
            "code": "%05d" % (h // len(VAULTS) % 100000), "depth": NEEDLE_DEPTH}


def needle_prompts(sizes=DEFAULT_NEEDLE_TOKENS):
    """The needle prompt set (decode_bench's prompt file format): for each size, filler of about that many
    tokens with ``The pass code for vault NAME is CODE.`` at half its depth, then the question."""
    out = []
    for size in sizes:
        facts = needle_facts(size)
        words_wanted = _words_for(size)
        sentences, words = [], 0
        i = 0
        while words < words_wanted:
            sentence = FILLER[i % len(FILLER)]
            sentences.append(sentence)
            words += len(sentence.split())
            i += 1
        at = int(len(sentences) * facts["depth"])
        sentences.insert(at, "The pass code for vault %s is %s." % (facts["vault"], facts["code"]))
        question = ("What is the pass code for vault %s? Answer with one sentence that states it." % facts["vault"])
        out.append({"id": facts["id"], "messages": [{"role": "user", "content": " ".join(sentences) + "\n\n" + question}]})
    return out


def needle_failures(results, sizes=DEFAULT_NEEDLE_TOKENS):
    """Failure messages of the needle answers (decode_bench results of the ``needles`` workload)."""
    wanted = dict((needle_facts(s)["id"], needle_facts(s)) for s in sizes)
    answers = {}
    for r in results or []:
        if r.get("workload") != NEEDLE_WORKLOAD:
            continue
        for pid, by_digest in (r.get("answer_excerpts") or {}).items():
            answers.setdefault(pid, []).extend(by_digest.values())
    if not answers:
        return ["long_context_needles: no needle prompt was answered (%s)" % ", ".join(sorted(wanted))]
    out = []
    for pid, facts in sorted(wanted.items(), key=lambda kv: kv[1]["tokens"]):
        got = answers.get(pid)
        if not got:
            out.append("long_context_needles: %s (about %s tokens) was not answered" % (pid, "{:,}".format(facts["tokens"])))
            continue
        missed = [a for a in got if facts["code"] not in a]
        if missed:
            out.append("long_context_needles: %s (about %s tokens, the pass code at %d%% depth): answered %r; the "
                       "text holds 'The pass code for vault %s is %s.'" % (
                           pid, "{:,}".format(facts["tokens"]), int(facts["depth"] * 100), missed[0],
                           facts["vault"], facts["code"]))
    return out


def _greedy(result):
    return (result.get("settings") or {}).get("temperature") in (None, 0, 0.0)


def _answers(results):
    """{(workload, prompt id): {digest: excerpt}} of the greedy results."""
    out = {}
    for r in results or []:
        # the needles and the graded tasks are judged by their own checks, against known answers
        if not _greedy(r) or r.get("workload") in (NEEDLE_WORKLOAD, GRADED_WORKLOAD):
            continue
        for pid, digests in (r.get("output_digests") or {}).items():
            excerpts = (r.get("answer_excerpts") or {}).get(pid) or {}
            slot = out.setdefault((r["workload"], pid), {})
            for d in digests:
                slot.setdefault(d, excerpts.get(d, "(answer not kept)"))
    return out


def greedy_match_failures(results, baseline_results):
    """Failure messages where the arm's greedy answer to a prompt differs from the baseline's (both measured in
    this run on the same prompt sets). A workload the baseline did not measure is named, never skipped."""
    arm, base = _answers(results), _answers(baseline_results)
    if not arm:
        return ["greedy_matches_baseline: the arm gave no greedy answer to compare"]
    out = []
    missing = sorted(set(w for w, _ in arm) - set(w for w, _ in base))
    for workload in missing:
        out.append("greedy_matches_baseline: the baseline has no greedy %s answers to compare with" % workload)
    for key in sorted(arm):
        if key[0] in missing:
            continue
        want = base.get(key)
        if want is None:
            out.append("greedy_matches_baseline: %s prompt %s: the baseline did not answer it" % key)
        elif set(arm[key]) != set(want):
            got = [e for d, e in sorted(arm[key].items()) if d not in want] or list(arm[key].values())
            out.append("greedy_matches_baseline: %s prompt %s: the arm answered %r where the baseline answered %r"
                       % (key[0], key[1], got[0], sorted(want.values())[0]))
    return out
