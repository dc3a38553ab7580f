# -*- coding: utf-8 -*-
"""A rank's FlashInfer autotune outcome: the verdict of its latest boot and the cache files it used
(standard library only).

The boot's autotune lines are gathered by the one engine-log reader into the ``autotune`` facts of
:class:`boot_facts.BootFacts`: the stock engine's disagreements, ``Running FlashInfer autotune with cache:
<path>`` (the full container path) and completions; the retention adapter's ``armed``, ``reused
<hash>/<file>``, ``tuned and saved <hash>/<file>`` (the tuning-hash directory and file name only) and drifted
hook symbols. Here they are judged (:func:`autotune_verdict`) and tied to the rank's cache files on disk
(:func:`cache_files`), each with its retention adapter's ``.launch`` sidecar (the launch fingerprint).
"""
from __future__ import absolute_import, division, print_function

import glob
import hashlib
import os
import re

from ansible.module_utils.engine_log.source import boots_label

__metaclass__ = type

VERDICTS = ("reused", "tuned", "mixed", "failed", "none")
# A cache file as the engine names it (container path, ".../autotune/<version>/<sm>/<hash>/<file>")
# and as the retention adapter prints it ("<hash>/<file>", directory name and file only).
CACHE_RE = re.compile(r"/autotune/([^/]+)/([^/]+)/([^/]+)/(rank_tp(\d+)_pp\d+_dp\d+\.json)$")
SHORT_RE = re.compile(r"(?:^|/)([^/]+)/(rank_tp(\d+)_pp\d+_dp\d+\.json)$")
SIDECAR_SUFFIX = ".launch"
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def autotune_verdict(a):
    """One rank's autotune verdict from the ``autotune`` facts of a boot: ``reused`` (the retention adapter
    kept every cache), ``tuned`` (stock retune, or the adapter tuned and saved), ``mixed`` (some reused,
    some retuned: a partial hit), ``failed`` (a drifted hook symbol) or ``none`` (no autotune line)."""
    if a["drift"]:
        return "failed"
    if a["armed"]:
        reused, tuned = len(a["reused"]), len(a["tuned_saved"])
        if reused and not tuned and not a["disagree"]:
            return "reused"
        if tuned and not reused:
            return "tuned"
        if reused or tuned:
            return "mixed"
        return "none"
    if a["run_count"] or a["completed"] or a["disagree"]:
        return "tuned"
    return "none"


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _rel_key(path):
    """(hash, file) of a cache path, full or ``<hash>/<file>``, or None.

    The engine prints full container paths, the retention adapter only ``<hash>/<file>``; both
    name the same file by its tuning-hash directory and file name.
    """
    m = SHORT_RE.search(path.replace("\\", "/"))
    return (m.group(1), m.group(2)) if m else None


def _rank_of(path):
    m = SHORT_RE.search(path.replace("\\", "/"))
    return int(m.group(3)) if m else None


def _version_sm(path):
    m = CACHE_RE.search(path.replace("\\", "/"))
    return (m.group(1), m.group(2)) if m else None


def cache_files(cache_root, rank, outcomes):
    """The rank's cache files (the ``autotune_status`` module's ``cache_files``).
    ``outcomes``: {(hash, file): outcome} of the latest boot."""
    pattern = os.path.join(glob.escape(cache_root), "*", "*", "*", "rank_tp%d_pp*_dp*.json" % rank)
    out = []
    for path in sorted(glob.glob(pattern)):
        if not os.path.isfile(path):
            continue
        st = os.stat(path)
        key = _rel_key(path)
        vs = _version_sm(path)
        sidecar = path + SIDECAR_SUFFIX
        entry = {"path": path, "size": st.st_size, "sha256": _sha256(path), "mtime": st.st_mtime,
                 "sidecar": None, "sidecar_sha256": None, "fingerprint": None,
                 "flashinfer_version": vs[0] if vs else None, "sm": vs[1] if vs else None,
                 "hash": key[0] if key else None, "in_latest_boot": key in outcomes,
                 "outcome": outcomes.get(key)}
        if os.path.isfile(sidecar):
            entry["sidecar"] = sidecar
            entry["sidecar_sha256"] = _sha256(sidecar)
            with open(sidecar, "rb") as fh:
                text = fh.read(4096).decode("utf-8", "replace").strip()
            entry["fingerprint"] = text if HEX64.match(text) else None
        out.append(entry)
    return out


def evaluate(facts, rank, cache_root):
    """Turn :class:`boot_facts.BootFacts` into the ``autotune_status`` module result (without ``changed``).

    Raises :class:`EngineLogError` when the latest boot has no autotune line at all, OSError when a
    cache file cannot be read.
    """
    facts.require_marker()
    a = facts.require_autotune()
    verdict = autotune_verdict(a)
    outcomes = {}
    ordered = []                     # (path, outcome) in log order of kind
    for path in a["runs"]:
        ordered.append((path, "run"))
    for path in a["tuned_saved"]:
        ordered.append((path, "tuned_saved"))
    for path in a["reused"]:
        ordered.append((path, "reused"))
    for path, outcome in ordered:    # reused beats tuned_saved beats a bare run
        key = _rel_key(path)
        if key:
            outcomes[key] = outcome
    problems = []
    drift = ["DSV41_AUTOTUNE_KEEP: %s is gone; engine drifted" % name for name in a["drift"]]
    problems.extend(drift)
    ranks = sorted(set(r for r in (_rank_of(p) for p, _ in ordered) if r is not None))
    if ranks and ranks != [rank]:
        problems.append("the log names cache files of rank(s) %s, expected rank_tp%d"
                        % (", ".join("rank_tp%d" % r for r in ranks), rank))
    if a["run_count"] > a["completed"]:
        problems.append("%d autotune run(s) but %d completed" % (a["run_count"], a["completed"]))
    files = cache_files(cache_root, rank, outcomes) if os.path.isdir(cache_root) else []
    version = sm = None
    used = [_version_sm(p) for p in a["runs"] if _version_sm(p)]
    in_boot = [f for f in files if f["in_latest_boot"] and f["flashinfer_version"]]
    if used:
        version, sm = used[-1]
    elif in_boot:
        version, sm = in_boot[-1]["flashinfer_version"], in_boot[-1]["sm"]
    elif files:
        newest = max(files, key=lambda f: f["mtime"])
        version, sm = newest["flashinfer_version"], newest["sm"]
    tuned_count = len(a["tuned_saved"]) if a["armed"] else a["run_count"]
    return {
        "source": facts.source,
        "boots_seen": facts.boots_seen,
        "verdict": verdict,
        "armed": bool(a["armed"]),
        "reused": list(a["reused"]),
        "tuned_saved": list(a["tuned_saved"]),
        "reused_count": len(a["reused"]),
        "tuned_count": tuned_count,
        "disagreements": a["disagree"],
        "runs": list(a["runs"]),
        "completed": a["completed"],
        "drift": drift,
        "drift_symbols": list(a["drift"]),
        "cache_files": files,
        "cache_root": cache_root,
        "cache_root_exists": os.path.isdir(cache_root),
        "flashinfer_version": version,
        "sm": sm,
        "problems": problems,
    }


def expect_message(who, result, expect):
    """The refusal of a verdict not in ``expect`` (``result``: :func:`evaluate`'s)."""
    detail = "reused %d, tuned %d, disagreements %d" % (result["reused_count"], result["tuned_count"],
                                                        result["disagreements"])
    if result["problems"]:
        detail += "; " + "; ".join(result["problems"])
    return ("%s: autotune verdict %s, expected %s (%s; %s, %s)"
            % (who, result["verdict"], " or ".join(expect), detail, result["source"],
               boots_label(result["boots_seen"])))
