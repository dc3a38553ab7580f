# -*- coding: utf-8 -*-
"""Findings of the drift check: a host's snapshot (``drift_snapshot``) against what the inventory declares.

Runs on the control node (``bin/fleet-drift``); pure functions, no I/O. Each finding is a dict
``{host, area, item, expected, actual, class}`` where ``class`` is one of

* ``drift``: the fleet differs from the repo (clock-lock unit and applied lock, ``.env`` key by key,
  adapter files, their registration, their hashes inside the image, the image against the last
  recorded stage run), or may (an experiment run interrupted before its restore, on the head);
* ``degradation``: as declared but not healthy (a layer not ``packed=True`` in the latest boot,
  shards missing or stale, a clamped KV pool, autotune disagreement, MemAvailable under the floor,
  the engine not serving);
* ``unmanaged``: containers neither serving nor in the contention inventory, a changed default
  target or display manager, a ``.env`` key the inventory does not declare (a converge keeps it as it
  is; ``playbooks/adopt.yml`` proposes declaring it; a team accepts its site keys in ``drift_accepted``);
* ``probe``: a probe failed or the host was unreachable (what could not be checked; exit code 3).

Secrets arrive masked by the host (``(secret)`` / ``(secret changed)``), so a finding on a secret key
reads ``expected (secret)``, ``actual changed``.
"""
from __future__ import absolute_import, division, print_function

import fnmatch

CLASSES = ("drift", "degradation", "unmanaged", "probe")
DEFAULT_PAGE_SIZE = 256   # the engine's default page size when the boot marker does not print one
UNSET = "(unset)"


def finding(host, area, item, expected, actual, cls):
    if cls not in CLASSES:
        raise ValueError("unknown finding class %r" % (cls,))
    return {"host": host, "area": area, "item": str(item), "expected": expected, "actual": actual, "class": cls}


def _clock(host, clock, d):
    out = []
    want_exec = d.get("clock_exec_start")
    if clock["unit_file"] is None:
        out.append(finding(host, "clock_lock", "unit file", "installed", "missing", "drift"))
    elif want_exec and clock["exec_start"] != [want_exec]:
        out.append(finding(host, "clock_lock", "ExecStart", want_exec, "; ".join(clock["exec_start"]) or UNSET, "drift"))
    if clock["unit_file"] is not None and clock["enabled"] != "enabled":
        out.append(finding(host, "clock_lock", "enabled at boot", "enabled", clock["enabled"] or "unknown", "drift"))
    if clock["reset_unit_file"]:
        out.append(finding(host, "clock_lock", "reset unit", "absent", "installed", "drift"))
    if clock["verdict"] != "locked":
        out.append(finding(host, "clock_lock", "applied lock", "locked %s" % d.get("clock_range", ""),
                           clock["message"] or clock["verdict"] or "unknown", "drift"))
    return out


def shown_secret(value):
    """How a masked secret reads in a finding: never the value, only whether it changed."""
    return {"(secret)": "(secret)", "(secret changed)": "changed", "(secret, not declared)": "set"}.get(value, value)


def _env(host, env):
    if env["actual"] is None:
        return [finding(host, "env", env["path"], "present", "missing", "drift")]
    out = []
    declared, actual = env["declared"], env["actual"]
    for key in list(declared) + [k for k in actual if k not in declared]:
        want, got = declared.get(key), actual.get(key)
        if want == got:
            continue
        # a key the inventory does not declare is not the repo's to judge: the converge keeps it
        out.append(finding(host, "env", key, UNSET if want is None else shown_secret(want),
                           UNSET if got is None else shown_secret(got), "drift" if key in declared else "unmanaged"))
    return out


def _adapters(host, adapters, image_adapters, manifest):
    out = []
    for name, sha in sorted((adapters or {}).get("files", {}).items()):
        want = manifest.get(name)
        if sha != want:
            out.append(finding(host, "adapters", name, want or "(not in the manifest)", sha or "missing", "drift"))
    for problem in (adapters or {}).get("registration_problems", []):
        out.append(finding(host, "adapters", "import hook registration", "every enabled adapter registered",
                           problem, "drift"))
    for name, sha in sorted((image_adapters or {}).items()):
        want = manifest.get(name)
        if sha != want:
            out.append(finding(host, "image", "%s inside the image" % name, want or "(not in the manifest)",
                               sha or "missing", "drift"))
    return out


def kv_clamped(boot):
    """(clamped, rounded request) by the engine's rule: the pool is whole pages, so only less than
    the request rounded down to a page is a clamp (same rule as the kv_pool module)."""
    requested, allocated = boot.get("max_total_tokens"), boot.get("pool_full")
    if not isinstance(requested, int) or not isinstance(allocated, int):
        return None, None
    page = boot.get("page_size") if isinstance(boot.get("page_size"), int) and boot["page_size"] > 0 \
        else DEFAULT_PAGE_SIZE
    rounded = requested // page * page
    return allocated < rounded, rounded


def _engine(host, container, boot, layers, is_head):
    out = []
    if container["state"] != "running":
        return [finding(host, "engine", "serving", "%s running" % container["name"], container["state"], "degradation")]
    if boot is None:
        return out
    if not boot["marker_found"]:
        return [finding(host, "engine", "latest boot", "a boot in the log", "no boot marker", "degradation")]
    if is_head and not boot["ready"]:  # workers never print Ready; the head's line stands for the fleet
        out.append(finding(host, "engine", "serving", "Ready in the latest boot", "not ready", "degradation"))
    for layer in layers:
        packed = boot["packed"].get(str(layer))
        if packed is not True:
            out.append(finding(host, "engine", "layer %s packed" % layer, "packed=True",
                               "not attached" if packed is None and layer not in boot.get("attached", [])
                               else "packed=%s" % packed, "degradation"))
    clamped, rounded = kv_clamped(boot)
    if clamped:
        out.append(finding(host, "engine", "KV pool", ">= %s tokens" % rounded, "%s tokens (clamped)" % boot["pool_full"],
                           "degradation"))
    if boot["autotune_disagree"]:
        out.append(finding(host, "engine", "autotune", "ranks agree",
                           "%d disagreement(s) in the latest boot" % boot["autotune_disagree"], "degradation"))
    for symbol in boot["autotune_drift"]:
        out.append(finding(host, "engine", "autotune adapter", "hooks present", "%s is gone" % symbol, "degradation"))
    return out


def _shards(host, shards):
    out = []
    for s in shards["shards"]:
        if s["state"] != "complete":
            actual = s["state"] + ((": " + s["stale_reason"]) if s.get("stale_reason") else "")
            out.append(finding(host, "shards", "layer %s shard" % s["layer"], "complete at %s" % s["path"], actual,
                               "degradation"))
    return out


def _memory(host, memory, floor_gib):
    avail = memory.get("mem_available_bytes")
    if floor_gib is None or avail is None or avail >= float(floor_gib) * 2 ** 30:
        return []
    return [finding(host, "memory", "MemAvailable", ">= %s GiB" % floor_gib, "%.2f GiB" % (avail / 2.0 ** 30),
                    "degradation")]


def _containers(host, containers, known):
    known = set(known or ())
    return [finding(host, "containers", c["name"], "absent (not serving, not in the contention inventory)",
                    "%s (%s)" % (c["state"], c["image"]), "unmanaged")
            for c in containers if not c["serving"] and c["name"] not in known]


def _desktop(host, desktop, d):
    out = []
    want_target, want_dm = d.get("default_target"), d.get("display_manager") or None
    if want_target and desktop["default_target"] != want_target:
        out.append(finding(host, "desktop", "default target", want_target, desktop["default_target"] or "unknown",
                           "unmanaged"))
    if desktop["display_manager"] != want_dm:
        out.append(finding(host, "desktop", "display manager", want_dm or "none active",
                           desktop["display_manager"] or "none active", "unmanaged"))
    return out


def _launch(host, launch, prediction):
    """The running container (``drift_snapshot.launch_snapshot``) against the launch the inventory's settings
    give (``launcher_effective``'s result, predicted on the head; ``{"error": ...}`` when it could not be),
    key by key as after a restart (``launch_truth.compare``)."""
    from ansible.module_utils.launcher import truth
    if prediction is None:
        return []
    if prediction.get("error") or not prediction.get("containers"):
        return [finding(host, "launch", "prediction", "the launch predicted from the inventory",
                        prediction.get("error") or "no container predicted", "probe")]
    want = next((c for c in prediction["containers"] if str(c.get("rank")) == str(launch.get("rank"))), None)
    if want is None:
        return [finding(host, "launch", "rank %s" % launch.get("rank"), "a container started by the launcher",
                        "the launch predicted none for this rank", "drift")]
    if not launch.get("container"):
        return [finding(host, "launch", want.get("name") or "container", "running", "absent", "drift")]
    return [finding(host, "launch", d["key"], d["predicted"], d["actual"], "drift")
            for d in truth.compare(want, launch["container"], launch.get("image"))]


def compare_host(host, snap, declared, prediction=None):
    """Every finding of one host, in a stable order. ``declared`` is the ``declared`` option of
    ``fleet_snapshot`` (manifest, clock, floor, contention names, desktop)."""
    d = declared or {}
    out = [finding(host, e["area"], "probe", "readable", e["message"], "probe") for e in snap.get("errors", [])]
    if snap.get("clock"):
        out += _clock(host, snap["clock"], d)
    if snap.get("env"):
        out += _env(host, snap["env"])
    if snap.get("adapters") is not None or snap.get("image_adapters"):
        out += _adapters(host, snap.get("adapters"), snap.get("image_adapters"), d.get("adapters_manifest") or {})
    if snap.get("container"):
        out += _engine(host, snap["container"], snap.get("boot"), d.get("layers") or [1, 14],
                       d.get("is_head", True))
    if snap.get("launch"):
        out += _launch(host, snap["launch"], prediction)
    if snap.get("shards"):
        out += _shards(host, snap["shards"])
    if snap.get("memory"):
        out += _memory(host, snap["memory"], d.get("mem_available_floor_gib"))
    if snap.get("containers") is not None:
        out += _containers(host, snap["containers"], d.get("contention_names"))
    if snap.get("desktop"):
        out += _desktop(host, snap["desktop"], d)
    return out


def compare_image(host, image, record):
    """The running image against the fleet's last recorded stage run
    (``records/<fleet>/runs/<time>-<stage>/nodes/<host>.json``);
    ``record`` None (no recorded run) gives no finding."""
    if not record or not image or not record.get("image_id"):
        return []
    out = []
    if image.get("id") != record["image_id"]:
        out.append(finding(host, "image", "image id", "%s (%s)" % (record["image_id"], record.get("stage", "record")),
                           image.get("id") or "none", "drift"))
    want = sorted(record.get("image_digests") or [])
    if want and sorted(image.get("digests") or []) != want:
        out.append(finding(host, "image", "image digest", ", ".join(want), ", ".join(image.get("digests") or []) or "none",
                           "drift"))
    return out


def unfinished_run(host, status):
    """An experiment run never proven back at its snapshot (``experiment_runs.unfinished_runs``): the fleet may
    still be in one of its arms' state; the finding names where it stopped and the command that finishes it."""
    from ansible.module_utils.experiment import runs
    return finding(host, "experiment run", status["run"], "finished (the fleet proven equal to its snapshot)",
                   "unfinished, %s; finish it: %s" % (runs.where(status), status["rollback_command"]),
                   "drift")


def unreachable(host, message):
    return finding(host, "host", "reachable", "reachable over ssh", message, "probe")


def is_accepted(f, accepted):
    """The first entry of ``accepted`` ({host, area, item, reason}; shell patterns, host/area default
    '*') matching the finding, or None. Probe findings are never accepted."""
    if f["class"] == "probe":
        return None
    for entry in accepted or ():
        if all(fnmatch.fnmatchcase(str(f[k]), str(entry.get(k, "*"))) for k in ("host", "area", "item")):
            return entry
    return None


def split_accepted(findings, accepted):
    """(open findings, accepted findings each with its ``accepted`` reason)."""
    open_, acc = [], []
    for f in findings:
        entry = is_accepted(f, accepted)
        if entry is None:
            open_.append(f)
        else:
            acc.append(dict(f, accepted=entry.get("reason", "")))
    return open_, acc


def exit_code(open_findings):
    """0 nothing open, 2 drift/degradation/unmanaged found, 3 a host unreachable or a probe failed."""
    if any(f["class"] == "probe" for f in open_findings):
        return 3
    return 2 if open_findings else 0
