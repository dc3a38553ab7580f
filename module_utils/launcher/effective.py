# -*- coding: utf-8 -*-
"""The effective launch: what each container receives, read from a sandbox record.

``module_utils/launcher/sandbox.py`` runs the launcher and records every external command; this file
turns the recorded ``docker run`` calls into containers (name, host, rank, image, environment, mounts,
network, order of starts), tells the engine's ranks from auxiliary containers and checks that every
rank expected was started (``module_utils/launcher/ranks.py``), shows scratch paths as the head's paths,
and masks secrets with the one secret rule (``module_utils/base/secrets.py``). Standard library only.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import re

from ansible.module_utils.launcher.ranks import assign, missing_message, missing_ranks, nnodes, python_hint, unserved
from ansible.module_utils.launcher.sandbox import LaunchError, evaluate
from ansible.module_utils.base.secrets import MIN_SECRET_CHARS, is_secret_name, mask_mapping, redact_text, secret_values

__metaclass__ = type

# docker run options that take no value (every other option takes one, as docker's own parser does).
FLAG_OPTS = frozenset(["-d", "--detach", "--rm", "-i", "--interactive", "-t", "--tty", "--init", "--privileged",
                       "--read-only", "--no-healthcheck", "--oom-kill-disable", "-P", "--publish-all", "-q",
                       "--quiet", "--disable-content-trust", "--sig-proxy", "--help"])
SHORT_FLAGS = set("dit")
ENGRAM = "/engram"
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ITEM_RE = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)=(\"[^\"]*\"|'[^']*'|[^\s\"';|&]+)")


def unmap(text, path_map):
    """A recorded string with scratch paths shown as the head's paths."""
    if not isinstance(text, str):
        return text
    for scratch, real in path_map:
        text = text.replace(scratch, real)
    return text


def _split_run(argv):
    """(options [(name, value)], image, command) of ``docker [global opts] run ARGS``."""
    i = 0
    while i < len(argv) and argv[i] not in ("run", "create"):
        i += 1
    args = argv[i + 1:]
    opts, j = [], 0
    while j < len(args):
        a = args[j]
        if a == "--":
            j += 1
            break
        if not a.startswith("-") or a == "-":
            break
        if a.startswith("--"):
            if "=" in a:
                name, value = a.split("=", 1)
                opts.append((name, value))
            elif a in FLAG_OPTS:
                opts.append((a, None))
            else:
                opts.append((a, args[j + 1] if j + 1 < len(args) else None))
                j += 1
        elif a in FLAG_OPTS or (len(a) > 2 and set(a[1:]) <= SHORT_FLAGS):
            opts.append((a, None))
        elif len(a) > 2:                       # -eNAME=value, -v/src:/dst
            opts.append((a[:2], a[2:]))
        else:
            opts.append((a, args[j + 1] if j + 1 < len(args) else None))
            j += 1
        j += 1
    image = args[j] if j < len(args) else None
    return opts, image, args[j + 1:]


def _env_file_items(text):
    out = []
    for line in (text or "").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def container_env(opts, environ, files):
    """``(env, sources)``: the variables docker sets in the container, in option order, as docker reads
    them (``-e NAME=value``; ``-e NAME`` takes the value from docker's own environment, and is left out
    when unset there; ``--env-file`` lines likewise), with the option each came from."""
    env, sources = {}, {}

    def take(item, source):
        if "=" in item:
            name, value = item.split("=", 1)
        elif item in environ:
            name, value = item, environ[item]
        else:
            return
        env.pop(name, None)
        env[name] = value
        sources[name] = source

    for name, value in opts:
        if name in ("-e", "--env") and value is not None:
            take(value, "-e")
        elif name == "--env-file" and value is not None:
            for item in _env_file_items((files or {}).get(value)):
                take(item, "--env-file %s" % value)
    return env, sources


def _mount(name, value):
    if name in ("-v", "--volume"):
        parts = value.split(":")
        if len(parts) == 1:
            return {"source": None, "target": parts[0], "type": "volume", "read_only": False}
        source, target = parts[0], parts[1]
        mode = parts[2] if len(parts) > 2 else ""
        kind = "bind" if source.startswith("/") or source.startswith(".") else "volume"
        return {"source": source, "target": target, "type": kind, "read_only": "ro" in mode.split(",")}
    fields = {}
    for part in value.split(","):
        k, _, v = part.partition("=")
        fields[k.strip()] = v.strip() if _ else "true"
    return {"source": fields.get("source") or fields.get("src"),
            "target": fields.get("target") or fields.get("destination") or fields.get("dst"),
            "type": fields.get("type", "volume"),
            "read_only": fields.get("readonly", fields.get("ro")) in ("true", "1")}


def parse_run(call, path_map=()):
    """One recorded ``docker run`` as a container description (paths unmapped, secrets not yet masked)."""
    argv = [unmap(a, path_map) for a in call["argv"]]
    opts, image, command = _split_run(argv)
    env, sources = container_env(opts, call.get("env") or {}, call.get("files") or {})
    env = dict((k, unmap(v, path_map)) for k, v in env.items())
    mounts = [_mount(n, v) for n, v in opts if n in ("-v", "--volume", "--mount") and v]
    name = next((v for n, v in opts if n == "--name"), None)
    network = next((v for n, v in opts if n in ("--network", "--net")), None)
    engram = [m["source"] for m in mounts if m["target"] and m["target"].rstrip("/") == ENGRAM]
    flags = set(n for n, v in opts if v is None)
    detached = bool(flags & {"-d", "--detach"}) or any(n.startswith("-") and not n.startswith("--") and "d" in n[1:]
                                                        for n in flags)
    return {"name": name, "host": call["host"], "image": image, "command": command, "env": env,
            "one_off": "--rm" in flags and not detached,
            "env_order": list(env), "env_sources": sources, "mounts": mounts, "network": network,
            "engram_source": engram[-1] if engram else None, "argv": argv}


def _argv_secrets(calls):
    """Values given to secret names in ``NAME=value`` words of the recorded commands (a worker's command
    string carries ``-e API_KEY=...`` even when its container is never started)."""
    found = set()
    for call in calls:
        for arg in call.get("argv") or []:
            for name, value in ITEM_RE.findall(arg if isinstance(arg, str) else ""):
                value = value.strip("'\"")
                if is_secret_name(name) and len(value) >= MIN_SECRET_CHARS and "$" not in value:
                    found.add(value)
    return sorted(found)


def build_launch(record):
    """The effective launch of a sandbox record: engine containers (``containers``, with role and rank) and
    ``auxiliary`` ones, in order of start."""
    pmap = record["path_map"]
    head = record["head"]
    started = {}
    order = []
    for call in record["calls"]:
        if call.get("kind") != "docker-run":
            continue
        ctn = parse_run(call, pmap)
        if ctn["one_off"]:
            continue            # docker run --rm in the foreground: a helper command, not a serving container
        key = (ctn["host"], ctn["name"])
        if key in started:
            order.remove(key)
        started[key] = ctn
        order.append(key)
    every = [started[k] for k in order]
    for i, ctn in enumerate(every):
        ctn["order"] = i + 1
    containers, auxiliary = assign(every, head)
    secrets = secret_values([c["env"] for c in every], extra=_argv_secrets(record["calls"]))
    other = [c for c in record["calls"] if c.get("kind") != "docker-run"]
    return {
        "launcher": record["launcher"], "command": record["command"], "exit_code": record["exit_code"],
        "containers": containers, "auxiliary": auxiliary, "secrets": secrets,
        "unstubbed": [_brief(c, pmap) for c in other if c.get("kind") == "unstubbed"],
        "not_run": [_brief(c, pmap) for c in other if c.get("kind") == "not-run"],
        "assumed": [dict(_brief(c, pmap), reasons=[unmap(r, pmap) for r in c.get("reasons") or []])
                    for c in other if c.get("answer") == "assumed"],
        "calls": [_brief(c, pmap) for c in record["calls"]],
        "stdout": unmap(record["stdout"], pmap), "stderr": unmap(record["stderr"], pmap),
        "skipped": record["skipped"], "warnings": [],
    }


def _brief(call, pmap):
    argv = [unmap(a, pmap) for a in call.get("argv") or []]
    out = {"host": call.get("host"), "command": call.get("name"), "argv": argv, "kind": call.get("kind")}
    if call.get("name") == "ssh":
        out["target"] = call.get("target")
    return out


def masked(launch):
    """A copy of a launch that is safe to show: secret env values ``***``, secret values hidden in text."""
    hide = launch["secrets"]

    def text(v):
        return redact_text(v, hide) if isinstance(v, str) else v

    out = dict((k, v) for k, v in launch.items() if k != "secrets")
    for key in ("containers", "auxiliary"):
        out[key] = []
        for c in launch[key]:
            d = dict(c)
            d["env"] = dict((k, text(v)) for k, v in mask_mapping(c["env"]).items())
            d["argv"] = [_mask_item(a, hide) for a in c["argv"]]
            d["command"] = [text(a) for a in c["command"]]
            out[key].append(d)
    for key in ("unstubbed", "not_run", "calls"):
        out[key] = [dict(c, argv=[_mask_item(a, hide) for a in c["argv"]]) for c in launch[key]]
    out["assumed"] = [dict(c, argv=[_mask_item(a, hide) for a in c["argv"]], reasons=[text(r) for r in c["reasons"]])
                      for c in launch["assumed"]]
    out["stdout"], out["stderr"] = text(launch["stdout"]), text(launch["stderr"])
    out["warnings"] = [text(w) for w in launch["warnings"]]
    return out


def _mask_item(item, hide):
    name = item.split("=", 1)[0] if "=" in item else None
    if name and NAME_RE.match(name) and mask_mapping({name: "x"})[name] != "x":
        return "%s=***" % name
    return redact_text(item, hide)


def summary(launch):
    """``{rank: {...}}`` keyed by rank as a string: host, container, role, /engram source."""
    out = {}
    for c in launch["containers"]:
        out[str(c["rank"])] = {"host": c["host"], "container": c["name"], "role": c["role"],
                               "engram_source": c["engram_source"], "image": c["image"], "order": c["order"]}
    return out


def effective_launch(launcher, env_text=None, expected_ranks=None, check_ranks=True, **kw):
    """Evaluate ``launcher serve`` (:func:`launch_sandbox.evaluate`) and read the launch; raises
    :class:`LaunchError` when it cannot be evaluated, exits non-zero, starts no container, or starts fewer
    engine ranks than expected: ``expected_ranks`` (the caller's TP size), else the node count the engine
    containers are given (``--nnodes``). Without either, hosts the launcher aimed commands at that got no
    engine container are warnings (``launch["warnings"]``), as are docker answers the sandbox assumed.
    ``check_ranks=False``: no rank count is checked (a trial with a changed setting)."""
    record = evaluate(launcher, env_text=env_text, **kw)
    launch = build_launch(record)
    hide = launch["secrets"]
    hint = python_hint(record["stderr"] + record["stdout"])
    if record["exit_code"] != 0 or not launch["containers"]:
        tail = redact_text("\n".join((launch["stderr"] or launch["stdout"]).strip().splitlines()[-5:]), hide)
        what = "exited %s" % record["exit_code"] if record["exit_code"] != 0 else "started no container"
        raise LaunchError("%s %s %s in the sandbox%s%s" % (launcher, record["command"], what,
                                                            (": " + tail) if tail else "", hint), record)

    def text(value):
        return redact_text(unmap(value, record["path_map"]), hide)

    expected, why = expected_ranks, "expected_ranks %s" % expected_ranks
    if not expected and check_ranks:
        expected, declared = nnodes(launch["containers"])
        why = declared and "the engine's own --nnodes %s on %s/%s" % (expected, declared["host"], declared["name"])
    if expected and check_ranks:
        missing = missing_ranks(launch["containers"], record["calls"], record["head"], int(expected), text)
        if missing:
            started = len(set(c["rank"] for c in launch["containers"] if c["rank"] < int(expected)))
            raise LaunchError("%s %s %s%s" % (launcher, record["command"], missing_message(
                missing, started, int(expected), why), hint), record)
    else:
        launch["warnings"].extend(unserved(launch["containers"], record["calls"], record["head"], text))
    if launch["assumed"]:
        reasons = []
        for call in launch["assumed"]:
            reasons.extend(r for r in call["reasons"] if r not in reasons)
        launch["warnings"].append("%d docker quer%s answered from what the module assumes, not from the daemon: %s"
                                  % (len(launch["assumed"]), "y was" if len(launch["assumed"]) == 1 else "ies were",
                                     "; ".join(text(r) for r in reasons)))
    return launch


# ---------------------------------------------------------------------------------------------
# Which settings the launcher reads: change one, evaluate again, compare
# ---------------------------------------------------------------------------------------------

def _nudged(value):
    """A different value of the same kind (a number stays a number, a path stays a path)."""
    if value is None or value == "":
        return "1"
    if re.match(r"^[0-9]+$", value):
        return str(int(value) + 1)
    return value + "1" if re.match(r"^[0-9.]+$", value) else value + "x"


def _signature(launch):
    calls = [(c["host"], c["command"], tuple(c["argv"])) for c in launch["calls"] if c["command"] != "sleep"]
    ctns = dict((str(c["rank"]), (tuple(c["argv"]), tuple(sorted(c["env"].items())))) for c in launch["containers"])
    return calls, ctns


def _marked(value, index):
    """A value carrying a mark that cannot occur by chance, of the same kind (numbers stay numbers)."""
    if value is not None and re.match(r"^[0-9]+(\.[0-9]+)?$", value):
        return "%s0000%d9" % (value, 100 + index)
    return "%sQdsv41m%dQ" % (value or "", index)


def _traced(launch, markers):
    """Effects of the keys whose mark shows up in what the marked launch ran or started."""
    out = {}
    text = json.dumps([c["argv"] for c in launch["calls"]])
    for key, mark in markers.items():
        if mark not in text and not any(mark in v for c in launch["containers"] for v in c["env"].values()):
            continue
        ranks = [str(c["rank"]) for c in launch["containers"]
                 if any(mark in a for a in c["argv"]) or any(mark in v for v in c["env"].values())]
        engram = [str(c["rank"]) for c in launch["containers"] if mark in (c["engram_source"] or "")]
        out[key] = {"effect": True, "ranks": sorted(ranks, key=int), "engram_ranks": sorted(engram, key=int),
                    "error": None}
    return out


def key_effects(launcher, env_text, keys, base_values, base=None, workers=4, **kw):
    """``{key: {"effect": bool, "ranks": [...], "engram_ranks": [...], "error": str|None}}``.

    First one evaluation with every key set to a marked value (a later assignment in the ``.env`` wins
    in ``source``): a key whose mark shows up in what the launcher runs or starts is read, and the ranks
    whose container (or ``/engram`` source) holds the mark are the ones it moves. Each remaining key is
    then changed alone and the launch evaluated again: ``effect`` is true when anything the launcher
    starts or runs changes (or the launch then fails: the launcher reads the value). A key the launcher
    never reads (a per-host name it does not build, for instance) has no effect. ``base``: the launch of
    ``env_text`` when already evaluated. Evaluations run ``workers`` at a time.
    """
    from concurrent.futures import ThreadPoolExecutor
    from ansible.module_utils.envfile.render import quote_value
    keys = list(keys)
    kw.setdefault("query_cache", {})        # the daemon asked each question once for all the trials
    base = base or effective_launch(launcher, env_text=env_text, **kw)
    kw = dict(kw, expected_ranks=None, check_ranks=False)    # a trial's ranks are compared, not required
    base_calls, base_ctns = _signature(base)
    base_engram = dict((str(c["rank"]), c["engram_source"]) for c in base["containers"])
    text = env_text if env_text is None or env_text.endswith("\n") or env_text == "" else env_text + "\n"
    out = {}
    if keys:
        markers = dict((k, _marked(base_values.get(k), i)) for i, k in enumerate(keys))
        trial = (text or "") + "".join("%s=%s\n" % (k, quote_value(m)) for k, m in markers.items())
        try:
            out.update(_traced(effective_launch(launcher, env_text=trial, **kw), markers))
        except LaunchError:
            pass                # some value is checked by the launcher: each key alone below

    def one(key):
        trial = (text or "") + "%s=%s\n" % (key, quote_value(_nudged(base_values.get(key))))
        try:
            launch = effective_launch(launcher, env_text=trial, **kw)
        except LaunchError as exc:
            return key, {"effect": True, "ranks": [], "engram_ranks": [], "error": str(exc)}
        calls, ctns = _signature(launch)
        engram = dict((str(c["rank"]), c["engram_source"]) for c in launch["containers"])
        ranks = sorted(set(r for r in set(ctns) | set(base_ctns) if ctns.get(r) != base_ctns.get(r)), key=int)
        return key, {"effect": calls != base_calls or bool(ranks), "ranks": ranks,
                     "engram_ranks": sorted([r for r in set(engram) | set(base_engram)
                                             if engram.get(r) != base_engram.get(r)], key=int),
                     "error": None}

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        out.update(pool.map(one, [k for k in keys if k not in out]))
    return out


# --------------------------------------------------------------------------- key effects kept between evaluations

FINGERPRINT_MAX_FILE = 1 << 20          # a launcher's scripts and configs; an engine log beside them is not one
FINGERPRINT_SKIP_DIRS = ("logs", ".git", "__pycache__")


def launcher_fingerprint(launcher, worker_homes=None, head=None):
    """sha256 of what an evaluation of ``launcher`` reads besides the ``.env``: every file of the launcher's
    checkout up to three levels deep (its helpers and configs; ``.env*`` files, logs and files over 1 MiB
    left out), the workers' homes as read for the evaluation, and the head's name."""
    import hashlib
    top = os.path.dirname(os.path.abspath(launcher))
    h = hashlib.sha256()
    for root, dirs, files in os.walk(top):
        depth = root[len(top):].count(os.sep)
        dirs[:] = sorted(d for d in dirs if d not in FINGERPRINT_SKIP_DIRS and depth < 3)
        for name in sorted(files):
            if name.startswith(".env"):
                continue
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
                if not os.path.isfile(path) or os.path.islink(path) or st.st_size > FINGERPRINT_MAX_FILE:
                    h.update(("%s\0%s\0" % (os.path.relpath(path, top), st.st_size)).encode())
                    continue
                with open(path, "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            h.update(("%s\0%d\0" % (os.path.relpath(path, top), len(data))).encode() + data)
    h.update(json.dumps([worker_homes or {}, head], sort_keys=True, default=str).encode())
    return h.hexdigest()


def reusable_effects(known, fingerprint, declared, keys):
    """The effects of ``keys`` an earlier evaluation found that still hold: same launcher fingerprint, and
    each key declared with the same value as then (``known``: a ``key_effects_record``). {key: effect}."""
    if not known or known.get("fingerprint") != fingerprint:
        return {}
    out = {}
    for key in keys:
        entry = (known.get("keys") or {}).get(key)
        if isinstance(entry, dict) and "effect" in entry and entry.get("value") == declared.get(key):
            out[key] = entry["effect"]
    return out


def effects_record(fingerprint, declared, effects, known=None):
    """What a later evaluation may reuse: {fingerprint, keys: {key: {value, effect}}} (an earlier record's
    entries kept where the fingerprint is the same)."""
    keys = {}
    if known and known.get("fingerprint") == fingerprint:
        keys.update(known.get("keys") or {})
    keys.update((k, {"value": declared.get(k), "effect": e}) for k, e in effects.items())
    return {"fingerprint": fingerprint, "keys": keys}


def prediction(launcher, launch, shown=None):
    """What launcher_effective returns for a launch (every container's environment and mounts masked): the
    prediction the engine role compares the running containers with after a boot. ``shown``: ``masked(launch)``
    when the caller has it already."""
    shown = shown or masked(launch)
    return {
        "launcher": launcher, "containers": shown["containers"], "ranks": summary(launch),
        "order": ["%s/%s" % (c["host"], c["name"]) for c in launch["containers"]],
        "auxiliary": shown["auxiliary"], "assumed": shown["assumed"],
        "unstubbed": shown["unstubbed"], "not_run": shown["not_run"], "calls": shown["calls"],
        "skipped": launch["skipped"],
    }


def env_digest(text):
    import hashlib
    return hashlib.sha256((text or "").encode("utf-8")).hexdigest()


def launch_record(fingerprint, env_text, launcher, launch):
    """A serve's prediction with what it was made from (the launcher files' fingerprint, the .env's sha256),
    for a later prediction of the same files and .env (launcher_effective's known_launch)."""
    return {"fingerprint": fingerprint, "env_sha256": env_digest(env_text), "prediction": prediction(launcher, launch),
            "ranks_started": sorted(set(int(c["rank"]) for c in launch["containers"] if c.get("rank") is not None))}


def reusable_launch(known, fingerprint, env_text, expected_ranks=None):
    """``known``'s prediction when it was made from the same launcher files and the same .env text (and starts
    every expected rank); None otherwise."""
    if not known or known.get("fingerprint") != fingerprint or known.get("env_sha256") != env_digest(env_text):
        return None
    if expected_ranks and not set(range(int(expected_ranks))) <= set(known.get("ranks_started") or []):
        return None
    return known.get("prediction")
