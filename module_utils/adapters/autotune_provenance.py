# -*- coding: utf-8 -*-
"""Where a rank's FlashInfer autotune cache came from, and moving aside a cache another image or kernel tuned.

The retention adapter (stage B) keeps each rank's autotune cache across boots and reuses it while the launch
fingerprint in its ``.launch`` sidecar matches. That fingerprint covers the launch (argv and prefixed
variables), not the image or the kernel the tactics were tuned under: the report asks for "image/kernel versions
in cache provenance" and for incompatible entries to be invalidated. So the project records, beside the cache,
what the boot that last used it ran (``.dsv41-provenance.json``: the image id and the kernel), and before a
restart compares it with what the next boot will run. A cache tuned under another image or kernel is moved,
whole, to ``<cache root>.invalidated/<UTC time>/`` on that rank (kept, never deleted: it is the operator's to
remove), so the next boot tunes from scratch; every rank of a fleet runs the same image and kernel, so every
rank retunes together (a hit on one rank and a retune on another desynchronises the collectives).

A cache without a provenance record (tuned before this record existed) is kept: nothing says it is
incompatible; the next boot records where it came from. Standard library only (runs on the ranks).
"""
from __future__ import absolute_import, division, print_function

import json
import os
import time

from ansible.module_utils.base import probe_read
from ansible.module_utils.envfile import store

__metaclass__ = type

PROVENANCE_FILE = ".dsv41-provenance.json"
PROVENANCE_FORMAT = 1
PROVENANCE_MAX_BYTES = 1 << 20
INVALIDATED_SUFFIX = ".invalidated"


class ProvenanceError(Exception):
    pass


def provenance_path(cache_root):
    return os.path.join(cache_root, PROVENANCE_FILE)


def cache_entries(cache_root):
    """The cache's files relative to ``cache_root`` (``<flashinfer version>/<sm>/<hash>/rank_tp0_pp0_dp0.json``
    and the adapter's sidecars), sorted; the provenance record is not an entry. Symlinked directories are not
    followed."""
    if not os.path.isdir(cache_root):
        return []
    found = []
    for top, dirs, files in os.walk(cache_root):
        dirs.sort()
        for name in files:
            rel = os.path.relpath(os.path.join(top, name), cache_root)
            if rel != PROVENANCE_FILE:
                found.append(rel)
    return sorted(found)


def read(cache_root):
    """The recorded provenance ({format, image_id, kernel, image, recorded_at, entries}), or None when there
    is none. A record that cannot be read (not JSON, a symlink, too large) raises ProvenanceError naming it."""
    path = provenance_path(cache_root)
    try:
        raw = probe_read.read_bytes(path, PROVENANCE_MAX_BYTES)
    except probe_read.ProbeReadError as exc:
        raise ProvenanceError("%s cannot be read: %s" % (path, exc))
    if raw is None:
        return None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise ProvenanceError("%s is not a provenance record (%s): move it aside, the next boot writes a new one"
                              % (path, exc))
    if not isinstance(doc, dict) or not isinstance(doc.get("image_id"), str) or not isinstance(doc.get("kernel"), str):
        raise ProvenanceError("%s holds no image_id and kernel: move it aside, the next boot writes a new one" % path)
    return doc


def short_id(image_id):
    image_id = image_id or ""
    return image_id[:19] if image_id.startswith("sha256:") else image_id[:12]


def stale_reasons(recorded, image_id, kernel):
    """Why a cache tuned under ``recorded`` is not valid for a boot of ``image_id`` under ``kernel`` ([] when it
    is, or when nothing is recorded)."""
    if not recorded:
        return []
    reasons = []
    if image_id and recorded.get("image_id") != image_id:
        reasons.append("image changed: tuned under %s%s, the next boot runs %s" % (
            short_id(recorded.get("image_id")),
            " (%s)" % recorded["image"] if recorded.get("image") else "", short_id(image_id)))
    if kernel and recorded.get("kernel") != kernel:
        reasons.append("kernel changed: tuned under %s, this rank runs %s" % (recorded.get("kernel"), kernel))
    return reasons


def invalidated_dir(cache_root, stamp=None):
    """Where an invalidated cache goes: ``<cache root>.invalidated/<UTC time>`` beside the cache (same file
    system, so the move is a rename)."""
    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return os.path.join(os.path.normpath(cache_root) + INVALIDATED_SUFFIX, stamp)


def invalidate(cache_root, dest):
    """Move every entry of ``cache_root`` (its top-level directories and files, the provenance record with
    them) into ``dest``, which must not exist yet. Returns the names moved."""
    if os.path.lexists(dest):
        raise ProvenanceError("%s already exists: not moving the cache over it" % dest)
    names = sorted(os.listdir(cache_root))
    os.makedirs(dest, 0o755)
    for name in names:
        os.rename(os.path.join(cache_root, name), os.path.join(dest, name))
    store.fsync_dir(cache_root)
    return names


def document(image_id, kernel, image=None, entries=None, now=None):
    return {"format": PROVENANCE_FORMAT, "image_id": image_id, "image": image or "", "kernel": kernel,
            "entries": list(entries or []),
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now if now is not None else time.time()))}


def same_record(recorded, doc):
    """Equal but for the time it was written: a second record of the same boot changes nothing."""
    if not recorded:
        return False
    keys = ("format", "image_id", "image", "kernel", "entries")
    return all(recorded.get(k) == doc.get(k) for k in keys)


def write(cache_root, doc):
    """Write the record atomically (temporary file, fsync, rename; never through a symlink)."""
    data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8")
    store.write_atomic(provenance_path(cache_root), data, 0o644)


def check(cache_root, image_id, kernel):
    """{entries, recorded, reasons, stale, note} of the cache for a boot of ``image_id`` under ``kernel``."""
    entries = cache_entries(cache_root)
    recorded = read(cache_root) if entries or os.path.lexists(provenance_path(cache_root)) else None
    reasons = stale_reasons(recorded, image_id, kernel) if entries else []
    if not entries:
        note = "no cache: the next boot tunes"
    elif recorded is None:
        note = ("no provenance recorded for the %d cache file(s): kept (nothing says they are incompatible); "
                "the next boot records it" % len(entries))
    elif reasons:
        note = "; ".join(reasons)
    else:
        note = "tuned under the image and kernel the next boot runs: kept"
    return {"entries": entries, "recorded": recorded, "reasons": reasons, "stale": bool(reasons), "note": note}
