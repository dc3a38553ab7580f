# -*- coding: utf-8 -*-
"""The named evidence checks of an experiment definition, judged on every rank's latest boot.

One subject: the checks a definition names under ``evidence.checks`` (``boot_healthy``,
``graph_capture_clean``, ``packed_all``, ``kv_pool``, ``autotune_agreement``, ``rank_consistency``),
each read from the facts the one engine-log reader gathers (``engine_log_scan`` -> ``BootFacts``),
never by a second parser. Each returns failure messages naming the host and rank; empty is a pass.
"""
from __future__ import absolute_import, division, print_function

import re

from ansible.module_utils.engine_log.autotune import autotune_verdict
from ansible.module_utils.engine_log.scan import scan_text
from ansible.module_utils.experiment.checks import split_boot
from ansible.module_utils.engine_log.memory_ledger import fleet_ledger

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


# The folded-sampling decision rank 0 logs at the end of its boot (SPEC section 3 quotes the three forms)
FOLDED_RE = re.compile(r"DSpark draft proposal \((?P<kind>greedy \+ sampling|greedy only)\) folded into the draft cuda graph")
EAGER_RE = re.compile(r"DSpark draft proposal kept eager \(reason=(?P<reason>[^)]*)\)")
DISABLED_RE = re.compile(r"DSpark folded sampling disabled: its static buffers need (?P<need>[0-9.]+) GB but only "
                         r"(?P<free>-?[0-9.]+) GB GPU memory is free")


def folded_sampling(text):
    """The folded-sampling decision of one boot's log: {"folded": True (greedy + sampling folded) / False
    (greedy only, eager, or AUTO short of memory) / None (no decision logged), "decision", "line",
    "need_gib", "free_gib" (the AUTO figures when it was short)}. The last decision of the text wins.
    Only the boot is read (up to the Ready line): a request echoed into the log later can quote anything."""
    out = {"folded": None, "decision": "not logged", "line": None, "need_gib": None, "free_gib": None}
    for msg in split_boot(text)[0]:
        m = FOLDED_RE.search(msg)
        if m:
            sampling = m.group("kind") != "greedy only"
            out = dict(out, folded=sampling, decision="folded (%s)" % m.group("kind"), line=msg[m.start():].strip(),
                       need_gib=None, free_gib=None)
            continue
        m = EAGER_RE.search(msg)
        if m:
            out = dict(out, folded=False, decision="eager (reason=%s)" % m.group("reason"), line=msg[m.start():].strip(),
                       need_gib=None, free_gib=None)
            continue
        m = DISABLED_RE.search(msg)
        if m:
            out = dict(out, folded=False, decision="AUTO disabled: short of memory", line=msg[m.start():].strip(),
                       need_gib=float(m.group("need")), free_gib=float(m.group("free")))
    return out


def boot_memory_facts(logs, ranks, head_rank=0):
    """What the experiment's preconditions read from every rank's latest boot before anything changes:
    {"serving_free_gib": {host: GiB left after capture, or None}, "folded_sampling": rank 0's decision}."""
    ledger = fleet_ledger(logs or {}, ranks or {})
    head = [h for h, r in (ranks or {}).items() if r == head_rank and h in (logs or {})]
    return {"serving_free_gib": dict((h, led.get("serving_free_gib")) for h, led in ledger.items()),
            "folded_sampling": folded_sampling(logs[head[0]]) if head else folded_sampling("")}


def folded_decision(logs, ranks, head_rank=0):
    """Rank 0 logged its folded-sampling decision in the latest boot (unset is AUTO, not off: the decision
    has to be read before draft temperature can mean anything)."""
    head = [h for h, r in (ranks or {}).items() if r == head_rank and h in (logs or {})]
    if not head:
        return ["folded_decision: rank %d's log was not read" % head_rank]
    if folded_sampling(logs[head[0]])["folded"] is None:
        return ["folded_decision: %s logged no folded-sampling decision in its latest boot (no 'DSpark draft "
                "proposal ...' or 'DSpark folded sampling disabled' line)" % _who(head[0], head_rank)]
    return []


# What wo_a_w8 prints (SPEC section 3): the mode is the einsum bridge on an image without the small-row kernel
# (today's fleet image), kernel replacement otherwise (the canary). In bridge mode the adapter still routes
# 2..8 rows to the fp8 small-row path (and 9..192 under speculative decoding to MID, with MID), but the draft
# does not use the shared dispatch: with DROP the adapter keeps the draft's wo_a on bf16 and says so.
WO_A_ARMED = "[wo_a_w8] fp8 twins for "
WO_A_BRIDGE = "[wo_a_w8] einsum bridge armed"
WO_A_DROPPED = "[wo_a_w8] released the bf16 copy of "
WO_A_DRAFT_KEPT = "[wo_a_w8] draft wo_a left on bf16"


def wo_a_modes(logs, ranks):
    """{host: {"rank", "armed", "mode": "bridge" | "kernel" | None, "drop", "draft_kept"}} from each rank's
    latest boot (only the boot: a request echoed into the log later can quote any line)."""
    out = {}
    for host in sorted(ranks or {}, key=lambda h: ranks[h]):
        if host not in (logs or {}):
            continue
        boot = "\n".join(split_boot(logs[host])[0])
        armed = WO_A_ARMED in boot
        out[host] = {"rank": ranks[host], "armed": armed,
                     "mode": ("bridge" if WO_A_BRIDGE in boot else "kernel") if armed else None,
                     "drop": WO_A_DROPPED in boot, "draft_kept": WO_A_DRAFT_KEPT in boot}
    return out


def wo_a_mode(logs, ranks):
    """wo_a_w8 judged in the mode each rank logged: one mode on every rank; with DROP in bridge mode the
    draft's wo_a kept on bf16 (its line); in kernel mode no such line (the draft uses the shared dispatch)."""
    modes = wo_a_modes(logs, ranks)
    if not modes:
        return ["wo_a_mode: no rank's log was read"]
    out = []
    for host, m in modes.items():
        who = _who(host, m["rank"])
        if not m["armed"]:
            out.append("wo_a_mode: %s: wo_a_w8 did not arm in the latest boot (no '%s...' line)" % (who, WO_A_ARMED))
        elif m["mode"] == "bridge" and m["drop"] and not m["draft_kept"]:
            out.append("wo_a_mode: %s: DROP in bridge mode without '%s (this engine's draft does not use the shared "
                       "dispatch)': the bridge's draft reads the bf16 weight, and nothing shows it was kept"
                       % (who, WO_A_DRAFT_KEPT))
        elif m["mode"] == "kernel" and m["draft_kept"]:
            out.append("wo_a_mode: %s: '%s' without the einsum bridge: the adapter's mode is not the one the image "
                       "has" % (who, WO_A_DRAFT_KEPT))
    seen = {}
    for host, m in modes.items():
        if m["mode"]:
            seen.setdefault(m["mode"], []).append(_who(host, m["rank"]))
    if len(seen) > 1:
        out.append("wo_a_mode: ranks run wo_a_w8 in different modes: %s" % "; ".join(
            "%s on %s" % (mode, ", ".join(who)) for mode, who in sorted(seen.items())))
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
        if check["name"] == "folded_decision":
            out += folded_decision(logs, ranks)        # read from the log's text, one decision on rank 0
        elif check["name"] == "wo_a_mode":
            out += wo_a_mode(logs, ranks)              # the adapter's own lines, per rank
        else:
            out += CHECKS[check["name"]](facts)
    return out
