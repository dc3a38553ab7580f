# -*- coding: utf-8 -*-
"""The named evidence checks of an experiment definition, judged on every rank's latest boot.

One subject: the checks a definition names under ``evidence.checks`` (``boot_healthy``,
``graph_capture_clean``, ``packed_all``, ``kv_pool``, ``autotune_agreement``, ``rank_consistency``),
each read from the facts the one engine-log reader gathers (``engine_log_scan`` -> ``BootFacts``),
never by a second parser. Each returns failure messages naming the host and rank; empty is a pass.
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.boot_facts import autotune_verdict
from ansible.module_utils.engine_log_scan import scan_text

__metaclass__ = type

ENGRAM_LAYERS = (1, 14)
# server_args every rank must agree on (what "the same block size and lengths" means in the log)
# (SPEC section 3 quotes the real marker: speculative_dspark_block_size, speculative_num_draft_tokens, ...)
CONSISTENT_ARGS = ("speculative_dspark_block_size", "speculative_num_draft_tokens", "tp_size", "ep_size", "max_running_requests", "chunked_prefill_size",
                   "context_length")


def _facts(logs, ranks):
    return [(h, ranks[h], scan_text(logs[h], name=h).to_dict()) for h in sorted(ranks, key=lambda h: ranks[h])
            if h in logs]


def _who(host, rank):
    return "%s rank %s" % (host, rank)


def boot_healthy(facts, head_rank=0):
    out = []
    for host, rank, d in facts:
        if not d["marker_found"]:
            out.append("boot_healthy: %s: no server_args marker in the latest boot" % _who(host, rank))
            continue
        for f in d["fatal"][:2]:
            out.append("boot_healthy: %s: fatal line: %s" % (_who(host, rank), (f.get("line") or str(f))[:200]))
        captured = bool(d["graphs"]) and all(g.get("end") for g in d["graphs"].values())
        if rank == head_rank and not (d["ready"] or (captured and d["max_total"])):
            out.append("boot_healthy: %s (head): never came up (no Ready line, no max_total_num_tokens line after "
                       "its graph captures)" % _who(host, rank))
        elif rank != head_rank and not (d["ready"] or captured):
            out.append("boot_healthy: %s: did not finish its graph captures" % _who(host, rank))
    return out


def graph_capture_clean(facts):
    out = []
    for host, rank, d in facts:
        for name in ("target", "draft"):
            g = d["graphs"].get(name) or {}
            missing = [ph for ph in ("begin", "end") if not g.get(ph)]
            if missing:
                out.append("graph_capture_clean: %s: %s verify graph capture has no %s line"
                           % (_who(host, rank), name, " or ".join(missing)))
    return out


def packed_all(facts):
    out = []
    for host, rank, d in facts:
        layers = dict((e.get("layer"), e) for e in d["engram"])
        for layer in ENGRAM_LAYERS:
            e = layers.get(layer)
            if e is None:
                out.append("packed_all: %s: no Engram line for layer %d" % (_who(host, rank), layer))
            elif e.get("packed") is not True:
                out.append("packed_all: %s: layer %d packed=%s" % (_who(host, rank), layer, e.get("packed")))
    return out


def kv_pool(facts):
    out = []
    for host, rank, d in facts:
        if not (d["pool"] or {}).get("full"):
            out.append("kv_pool: %s: no DSV4 pool sizes line (the KV pool was not allocated)" % _who(host, rank))
    return out


def autotune_agreement(facts):
    """Every rank did the same with its autotune cache (all reused, or all tuned): a mix, a partial hit on
    one rank, or a drifted retention hook fails. Stock boots (no retention adapter) retune on every rank,
    which agrees."""
    out, seen = [], {}
    for host, rank, d in facts:
        v = autotune_verdict(d["autotune"])
        if v in ("mixed", "failed"):
            out.append("autotune_agreement: %s: %s (reused %d, tuned and saved %d, disagreement warnings %d)" % (
                _who(host, rank), "a partial hit" if v == "mixed" else "the retention hook drifted",
                len(d["autotune"]["reused"]), len(d["autotune"]["tuned_saved"]), d["autotune"]["disagree"]))
        elif v != "none":
            seen.setdefault(v, []).append(_who(host, rank))
    if len(seen) > 1:
        out.append("autotune_agreement: ranks disagree: %s" % "; ".join(
            "%s on %s" % (v, ", ".join(who)) for v, who in sorted(seen.items())))
    return out


def rank_consistency(facts):
    out = []
    values = {}
    for host, rank, d in facts:
        args = d["server_args"]
        for key in CONSISTENT_ARGS:
            if key in args:
                values.setdefault(key, {}).setdefault(repr(args[key]), []).append(_who(host, rank))
    for key, by_value in sorted(values.items()):
        if len(by_value) > 1:
            out.append("rank_consistency: %s differs across ranks: %s" % (key, "; ".join(
                "%s on %s" % (v, ", ".join(w)) for v, w in sorted(by_value.items()))))
    return out


CHECKS = {"boot_healthy": boot_healthy, "graph_capture_clean": graph_capture_clean, "packed_all": packed_all,
          "kv_pool": kv_pool, "autotune_agreement": autotune_agreement, "rank_consistency": rank_consistency}


def named_failures(checks, logs, ranks):
    """Failure messages of the named checks (``[{"name": ..., "args": ...}]``) on every rank's latest boot."""
    facts = _facts(logs or {}, ranks or {})
    out = []
    if checks and not facts:
        return ["evidence: no rank's log was read; %s cannot be shown" % ", ".join(c["name"] for c in checks)]
    for check in checks or []:
        out += CHECKS[check["name"]](facts)
    return out
