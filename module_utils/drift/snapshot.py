# -*- coding: utf-8 -*-
"""One host's declared-state snapshot for the drift check, gathered in one module run (standard library only).

Used by the ``fleet_snapshot`` module; the comparison with the inventory happens on the control node
(``module_utils/drift/compare.py``). Nothing here parses anything itself: the journal verdict on the
clock lock is ``clock_lock.gather``, the engine's latest boot ``engine_log_source.read_boot``, shards
``pack_plan.plan``, containers ``docker_ps``, the desktop ``contention``, MemAvailable ``meminfo``, the ``.env`` and its
declared form ``launcher_env``, the import hook ``import_hook``, secrets ``secret_rule``.

Every probe is independent: one that fails is recorded in ``errors`` ({area, message}) and the
others still run, so one broken probe never hides the rest of the host.

Secrets never leave the host. ``.env`` values under a secret name are returned as ``(secret)``
when they equal the declared value and ``(secret changed)`` otherwise; declared secret values are
also masked (``***``) inside every other returned value.
"""
from __future__ import absolute_import, division, print_function

import os

from ansible.module_utils.adapters import hook as import_hook, arming
from ansible.module_utils.base import probe_read, secrets as secret_rule
from ansible.module_utils.engine_log import source as engine_log_source
from ansible.module_utils.engram import plan as pack_plan
from ansible.module_utils.host import clock_lock, contention, docker_ps, meminfo
from ansible.module_utils.launcher import truth
from ansible.module_utils.envfile import parse, render, store

SECRET_SAME = "(secret)"
SECRET_CHANGED = "(secret changed)"
SECRET_UNDECLARED = "(secret, not declared)"
UNIT_DIR = "/etc/systemd/system"


def sha256_file(path):
    """sha256 of a file, or None when it does not exist; a symlink, FIFO or device in its place is refused
    (probe_read: the probe runs as root over files the login user controls), other OS errors propagate."""
    return probe_read.sha256(path)


def _probe(errors, area, func, *args, **kwargs):
    """Run one probe; on any error record it under ``area`` and return None."""
    try:
        return func(*args, **kwargs)
    except Exception as exc:  # one probe failing must not hide the others (reported, never swallowed)
        errors.append({"area": area, "message": "%s: %s" % (type(exc).__name__, exc)})
        return None


# -- clock lock ---------------------------------------------------------------------------------
def exec_start(unit_text):
    """The ``ExecStart=`` values of a unit file text, in order."""
    out = []
    for line in (unit_text or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == "ExecStart":
            out.append(value.strip())
    return out


def clock_snapshot(run, p, unit_dir=None):
    unit_dir = unit_dir or UNIT_DIR
    unit_path = os.path.join(unit_dir, p["clock_unit"])
    text = None
    if os.path.lexists(unit_path):
        text = probe_read.read_text(unit_path, errors="replace")
    res = clock_lock.gather(run, "locked", p["clock_unit"], p["clock_min_mhz"], p["clock_max_mhz"],
                            reset_unit=p["clock_reset_unit"], nvidia_smi=p["nvidia_smi"], sample_clock=False)
    state = res.get("unit_state") or {}
    enabled = state.get("UnitFileState")
    if not enabled and text is not None:
        # `systemctl show` can leave the property out while the manager is busy (seen with two checks probing
        # one host at once); `is-enabled` answers the same question its own way before "unknown" is reported
        rc, out, _err = run(["systemctl", "is-enabled", p["clock_unit"]])
        enabled = (out or "").strip().splitlines()[0] if (out or "").strip() else None
    return {
        "unit_file": unit_path if text is not None else None,
        "exec_start": exec_start(text),
        "enabled": enabled,
        "active": state.get("ActiveState"),
        "reset_unit_file": os.path.exists(os.path.join(unit_dir, p["clock_reset_unit"])) if p["clock_reset_unit"] else False,
        "verdict": res.get("verdict"),
        "in_state": res.get("in_state"),
        "message": res.get("message"),
    }


# -- launcher .env ------------------------------------------------------------------------------
def mask_env(env, secrets, declared_secrets=None):
    """{KEY: shown} of a parsed ``.env``: secret-named keys as SECRET_SAME/SECRET_CHANGED (compared with
    ``declared_secrets`` when given, else SECRET_SAME), other values with ``secrets`` masked inside."""
    out = {}
    for key, value in (env or {}).items():
        if secret_rule.is_secret_name(key):
            if declared_secrets is None:
                out[key] = SECRET_SAME
            elif key not in declared_secrets:
                out[key] = SECRET_UNDECLARED
            else:
                out[key] = SECRET_SAME if declared_secrets[key] == value else SECRET_CHANGED
        else:
            out[key] = secret_rule.redact_text(value, secrets)
    return out


def env_snapshot(path, settings, secrets):
    """Declared and actual ``.env`` of the head, both masked; ``actual`` None when the file is missing."""
    declared = render.declared_env(dict(settings or {}, **dict(secrets or {})))
    declared_secrets = dict((k, v) for k, v in declared.items() if secret_rule.is_secret_name(k))
    values = list(declared_secrets.values())
    data, _st = store.read_env_file(path)
    actual = None if data is None else parse.parse_env(data, source=path)
    return {
        "path": path,
        "declared": mask_env(declared, values),
        "actual": None if actual is None else mask_env(actual, values, declared_secrets),
    }


# -- adapters and the image ---------------------------------------------------------------------
def adapter_files(p):
    return [name + ".py" for name in sorted(p["adapters_enabled"] or {})] + [p["adapters_hook"]]


def adapters_snapshot(p):
    adapter_dir = os.path.join(p["launcher_dir"], "adapter")
    files = dict((f, sha256_file(os.path.join(adapter_dir, f))) for f in adapter_files(p))
    hook = os.path.join(adapter_dir, p["adapters_hook"])
    problems = []
    if files.get(p["adapters_hook"]) is None:
        problems.append("%s: missing" % hook)
    else:
        expected = dict((str(k), str(v)) for k, v in (p["adapters_enabled"] or {}).items())
        try:
            text = probe_read.read_text(hook)
            parsed = import_hook.read_hook(text, source=hook)
            problems = arming.hook_problems(
                parsed, expected, source=hook, reads_switch=arming.adapter_reads(adapter_dir, expected, parsed))
        except import_hook.HookError as exc:
            problems = [str(exc)]
    return {"dir": adapter_dir, "files": files, "registration_problems": problems}


def image_hashes(run, docker, image, image_dir, files):
    """{file: sha256 or None} of the files inside ``image`` (one ``docker run sha256sum``)."""
    rc, out, err = run([docker, "run", "--rm", "--entrypoint", "sha256sum", image]
                       + [image_dir.rstrip("/") + "/" + f for f in files])
    seen = {}
    for line in (out or "").splitlines():
        parts = line.split()
        if len(parts) == 2:
            seen[os.path.basename(parts[1])] = parts[0]
    if rc is None or (rc != 0 and not seen):
        raise RuntimeError("docker run %s sha256sum exited %s: %s"
                           % (image, rc, secret_rule.clip_tail((err or out or "").strip())))
    return dict((f, seen.get(f)) for f in files)


def inspect_json(run, args, what):
    """``docker inspect``-style output -> its first object, or None when docker says it does not exist."""
    rc, out, err = run(args)
    if rc == 1 and "No such" in (err or out or ""):
        return None
    if rc != 0:
        raise RuntimeError("%s exited %s: %s" % (what, rc, secret_rule.clip_tail((err or out or "").strip())))
    import json
    data = json.loads(out or "[]")
    return data[0] if data else None


def container_snapshot(run, docker, name, engram_mount="/engram", keep=None):
    c = inspect_json(run, [docker, "inspect", name], "docker inspect %s" % name)
    if keep is not None:
        keep["container"] = c        # the whole object, for the launch comparison
    if c is None:
        return {"name": name, "state": "absent", "image": None, "image_id": None, "engram_source": None}
    source = None
    for mount in c.get("Mounts") or []:
        if mount.get("Destination") == engram_mount:
            source = mount.get("Source")
    return {"name": name, "state": (c.get("State") or {}).get("Status"), "image": (c.get("Config") or {}).get("Image"),
            "image_id": c.get("Image"), "engram_source": source}


def image_snapshot(run, docker, ref, keep=None):
    img = inspect_json(run, [docker, "image", "inspect", ref], "docker image inspect %s" % ref)
    if keep is not None:
        keep["image"] = img
    if img is None:
        return {"ref": ref, "id": None, "digests": []}
    return {"ref": ref, "id": img.get("Id"), "digests": sorted(img.get("RepoDigests") or [])}


def launch_snapshot(requested, raw, rank):
    """What this rank's running container received, for the control node to compare with the launch the
    inventory's settings give (``drift_compare``; predicted on the head while the snapshots run): its
    ``docker inspect`` environment (secrets masked), mounts and state, and its image's environment (the
    launch's is what differs from it). None when not requested."""
    if not requested:
        return None
    c, img = raw.get("container"), raw.get("image")
    if not c:
        return {"rank": rank, "container": None, "image": None}

    def env_list(obj):
        env = truth.env_dict(((obj or {}).get("Config") or {}).get("Env") or [])
        return ["%s=%s" % kv for kv in truth._masked_env(env).items()]
    return {"rank": rank,
            "container": {"Name": c.get("Name"), "State": {"Status": (c.get("State") or {}).get("Status")},
                          "Config": {"Env": env_list(c)}, "Mounts": c.get("Mounts") or []},
            "image": {"Config": {"Env": env_list(img)}} if img else None}


# -- the engine's latest boot, shards, memory, containers, desktop -------------------------------
def boot_snapshot(run_command, p):
    facts = engine_log_source.read_boot(run_command, container=p["container"], docker=p["docker_bin"])
    sargs = facts.server_args or {}
    pool = facts.pool or {}
    a = facts.autotune
    return {
        "source": facts.source,
        "marker_found": facts.marker_found,
        "packed": dict((str(layer), (facts.engram_layer(layer) or {}).get("packed")) for layer in p["layers"]),
        "attached": sorted(facts.engram),
        "ready": facts.ready,
        "pool_full": pool.get("full") if isinstance(pool.get("full"), int) else None,
        "max_total_tokens": sargs.get("max_total_tokens"),
        "page_size": sargs.get("page_size"),
        "autotune_disagree": a["disagree"],
        "autotune_drift": list(a["drift"]),
        "fatal": len(facts.fatal),
    }


def shards_snapshot(p, dest):
    """Each shard's state, its content hashed in full unless ``shards_verified`` holds its identity now (the
    drift history: a shard is read once per change)."""
    res = pack_plan.plan(p["checkpoint"], dest, p["rank"], p["tp_size"], layers=p["layers"], content_check="full",
                         verified=p.get("shards_verified") or {})
    return {"dest": dest, "shards": [{"layer": s["layer"], "path": s["path"], "state": s["state"],
                                      "stale_reason": s.get("stale_reason"), "content": s.get("content")}
                                     for s in res["shards"]]}


def memory_snapshot(path="/proc/meminfo"):
    with open(path) as handle:
        return {"mem_available_bytes": meminfo.parse_meminfo(handle.read()).get("MemAvailable")}


def containers_snapshot(run, docker, serving_prefix):
    rc, out, err = run([docker, "ps", "-a", "--no-trunc", "--format", docker_ps.DOCKER_FORMAT])
    if rc != 0:
        raise RuntimeError("%s ps exited %s: %s" % (docker, rc, secret_rule.clip_tail((err or out or "").strip())))
    rows = docker_ps.container_records(docker_ps.parse_ps(out), {}, None, serving_prefix)
    return [{"name": r["name"], "state": r["state"], "serving": r["serving"], "image": r["image"]} for r in rows]


def desktop_snapshot(run):
    dm = contention.gather_display_manager(run)
    return {"default_target": contention.gather_default_target(run),
            "display_manager": dm["unit"] if dm["active"] else None}


def _image_chain(errors, run, p):
    """Container -> its image -> the adapters inside that image (each step needs the previous one)."""
    docker = p["docker_bin"]
    raw = {}
    out = {"container": _probe(errors, "engine", container_snapshot, run, docker, p["container"], keep=raw)}
    ref = (out["container"] or {}).get("image_id") or p["image"]
    out["image"] = _probe(errors, "image", image_snapshot, run, docker, ref, keep=raw)
    out["launch"] = launch_snapshot((p.get("declared") or {}).get("compare_launch"), raw, p["rank"])
    if p["adapters_enabled"] and (out["image"] or {}).get("id"):
        out["image_adapters"] = _probe(errors, "adapters", image_hashes, run, docker, out["image"]["id"],
                                       p["adapters_image_dir"], adapter_files(p))
    return out


def snapshot(p, run, run_command):
    """The whole snapshot of one host. ``run(args) -> (rc, out, err)`` (rc None: no such executable),
    ``run_command`` is ``AnsibleModule.run_command`` (the engine-log reader's interface).

    The probes that wait on commands (docker, journalctl, systemctl) run in threads: the check is one
    round trip per host and is timed against a ping (bench/bench_drift.py)."""
    import threading
    errors = []
    docker = p["docker_bin"]
    out = {"host": p["host_label"], "errors": errors}
    boot_errors = []
    jobs = {
        "chain": lambda: _image_chain(errors, run, p),
        "boot": lambda: _probe(boot_errors, "engine", boot_snapshot, run_command, p),
        "clock": lambda: _probe(errors, "clock_lock", clock_snapshot, run, p),
        "containers": lambda: _probe(errors, "containers", containers_snapshot, run, docker, p["serving_prefix"]),
        "desktop": lambda: _probe(errors, "desktop", desktop_snapshot, run),
    }
    results = {}

    def work(name):
        results[name] = jobs[name]()
    threads = [threading.Thread(target=work, args=(name,)) for name in jobs]
    for t in threads:
        t.start()
    if p["env_path"]:
        out["env"] = _probe(errors, "env", env_snapshot, p["env_path"], p["env_settings"], p["env_secrets"])
    out["adapters"] = _probe(errors, "adapters", adapters_snapshot, p)
    out["memory"] = _probe(errors, "memory", memory_snapshot, p["meminfo"])
    for t in threads:
        t.join()
    out.update(results["chain"])
    out["clock"], out["containers"], out["desktop"] = results["clock"], results["containers"], results["desktop"]
    if (out["container"] or {}).get("state") not in (None, "absent"):
        out["boot"] = results["boot"]  # no container, no log: the engine finding says so
        errors.extend(boot_errors)
    dest = (out["container"] or {}).get("engram_source") or p["engram_dir"]
    out["shards"] = _probe(errors, "shards", shards_snapshot, p, dest)
    errors.sort(key=lambda e: (e["area"], e["message"]))
    secrets = [v for v in (p["env_secrets"] or {}).values() if v]
    return mask_strings(out, secrets) if secrets else out


def mask_strings(node, secrets):
    """A copy of ``node`` with every secret value masked inside every string (keys included)."""
    if isinstance(node, dict):
        return dict((mask_strings(k, secrets), mask_strings(v, secrets)) for k, v in node.items())
    if isinstance(node, (list, tuple)):
        return [mask_strings(x, secrets) for x in node]
    if isinstance(node, str):
        return secret_rule.redact_text(node, secrets)
    return node
