# -*- coding: utf-8 -*-
"""The dsv41 launcher (``start.sh`` + its ``.env``) judged by what each container receives, and the
adapters' import hook, as data.

Shared by the ``launcher_settings`` module (and anything else that needs the launcher's rules).
Standard library only: Ansible ships this file to the target host next to the module.

* The effective launch (what each container gets at the next serve) is computed by running the
  launcher's own code in a sandbox: ``module_utils/launcher/sandbox.py`` and ``launch_record.py``.
* :func:`forwarding`: a declared setting is forwarded on a launch path when the container on that path
  receives the declared value; keys the launcher reads itself (it turns them into engine arguments,
  mounts, hosts) are found by changing them and evaluating again (``launch_record.key_effects``), not
  taken from a fixed list.
* :func:`check_launch`: the rules (``module_utils/launcher/rules.py``) applied to what
  each container receives, so a launcher-side default the rules forbid is refused naming the key, the
  value the container would get and where it comes from.
* ``parse_env``, the ``.env`` writer: ``module_utils/envfile/parse.py`` and ``envfile/render.py``; what is secret
  is decided by ``module_utils/base/secrets.py``.
* The adapters' ``sitecustomize.py`` import hook is read by ``module_utils/adapters/hook.py`` (its gates by
  ``import_hook_conditions.py``, its finder by ``import_hook_finder.py``); whether a switch arms an adapter
  is ``module_utils/adapters/arming.py``.
"""
from __future__ import absolute_import, division, print_function

import os
import re

from ansible.module_utils.envfile.render import key_problem
from ansible.module_utils.launcher.rules import check_settings
from ansible.module_utils.launcher.values import normalize_settings, shown

__metaclass__ = type

SPS_KEY = "DSPARK_SPS_TABLE"
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


class LauncherError(ValueError):
    """start.sh / sitecustomize.py text that cannot be read as the launcher's format."""


# ---------------------------------------------------------------------------------------------
# Forwarding, read from the effective launch
# ---------------------------------------------------------------------------------------------

def _where(ctn):
    return "%s (%s, rank %s)" % (ctn["host"], ctn["name"], ctn["rank"])


def declared_keys(settings):
    """Set keys of the declared settings that can be variables at all (others: rule env_writable)."""
    return dict((k, v) for k, v in normalize_settings(settings).items() if key_problem(k) is None)


def received(launch, path):
    """Keys every container of a path ("head" or "worker") receives, in the first one's order."""
    ctns = [c for c in launch["containers"] if c["role"] == path]
    if not ctns:
        return []
    return [k for k in ctns[0]["env_order"] if all(k in c["env"] for c in ctns)]


def unreceived_keys(settings, launch):
    """Declared keys some container does not receive with the declared value: the ones whose effect
    (read by the launcher itself, or nothing) must be found by evaluating again."""
    out = []
    for key, value in sorted(declared_keys(settings).items()):
        if any(c["env"].get(key) != value for c in launch["containers"]):
            out.append(key)
    return out


# Variables the engine process itself reads from its environment (adapter and engine switches, PyTorch's
# allocator): declared and received by no container, they are a forwarding gap. Any other key that no
# container receives and that changes nothing in the launch (a site key of the launcher's wait loop, a
# per-host name this launcher does not read) is reported as having no effect, not refused: the sandbox
# sees what reaches the containers, not everything the launcher does.
ENGINE_ENV_PREFIXES = ("DSV41_", "SGLANG_", "DSPARK_", "PYTORCH_")


def forwarding(settings, launch, effects):
    """``{"unforwarded": {"head": [...], "worker": [...]}, "gaps": [...], "no_effect": [...],
    "overridden": [...], "launcher_reads": [...]}``.

    A declared key (value set; "0" counts) is forwarded on a path when the container there receives
    exactly the declared value. A key no container receives that the launcher reads itself (``effects``
    from ``launch_record.key_effects``: changing it changes the launch) is consumed by the launcher, not
    a gap. A key that changes nothing at all has no effect: it is a gap on every path, said in the gap.
    A container receiving another value than the declared one is ``overridden`` (the launcher sets it).
    A key outside :data:`ENGINE_ENV_PREFIXES` that no container receives and that changes nothing is only
    listed in ``no_effect``.
    """
    out = {"unforwarded": {"head": [], "worker": []}, "gaps": [], "no_effect": [], "overridden": [],
           "launcher_reads": sorted(k for k, e in (effects or {}).items() if e.get("effect"))}
    for key, value in sorted(declared_keys(settings).items()):
        getting = [c for c in launch["containers"] if key in c["env"]]
        effect = (effects or {}).get(key)
        if not getting and effect is not None and effect.get("effect"):
            continue                                    # consumed by the launcher itself
        missing = {"head": [], "worker": []}
        for c in launch["containers"]:
            got = c["env"].get(key)
            if got is None:
                missing[c["role"]].append(_where(c))
            elif got != value:
                # the declared value never arrives (the launcher sets another, or its shell reparses the
                # value on the way): a gap as much as a missing key
                message = ("%s: the container receives %s, not the declared %s (the launcher sets it)"
                           % (_where(c), shown(key, got), shown(key, value)))
                out["overridden"].append(message)
                out["gaps"].append(message)
        idle = not getting and effect is not None
        if idle:
            out["no_effect"].append("%s is set but has no effect: the launcher does not read it and no container "
                                    "receives it" % shown(key, value))
            if not key.startswith(ENGINE_ENV_PREFIXES):
                continue                                # reported, not a gap: not a variable the engine reads
        for path in ("head", "worker"):
            if missing[path]:
                out["unforwarded"][path].append(key)
        for path in ("head", "worker"):
            if missing[path]:
                out["gaps"].append("%s is set but the %s launch path does not forward it: %s %s not receive it%s"
                                   % (key, path, ", ".join(missing[path]), "does" if len(missing[path]) == 1 else "do",
                                      " (nor does the launcher read it: it has no effect)" if idle else ""))
    return out


# ---------------------------------------------------------------------------------------------
# Guardrails on what each container receives
# ---------------------------------------------------------------------------------------------

# Engine arguments (SGLang's own flags) that carry a launcher setting the rules judge.
ENGINE_FLAGS = {"--tp-size": "TP_SIZE", "--ep-size": "EP_SIZE", "--dspark-block-size": "DSPARK_BLOCK_SIZE",
                "--max-running-requests": "MAX_RUNNING_REQUESTS", "--mem-fraction-static": "MEM_FRACTION_STATIC",
                "--max-total-tokens": "MAX_TOTAL_TOKENS", "--chunked-prefill-size": "CHUNKED_PREFILL_SIZE"}


def engine_settings(command):
    """``{KEY: value}`` of the engine arguments in a container's command (``--flag value`` or ``--flag=value``)."""
    out = {}
    for i, word in enumerate(command or []):
        flag, eq, value = word.partition("=")
        if flag in ENGINE_FLAGS:
            if not eq:
                value = command[i + 1] if i + 1 < len(command) else None
            if value is not None:
                out[ENGINE_FLAGS[flag]] = value
    return out


def origin(key, got, env_values, flag=None):
    """Where the value a container receives comes from, for messages (``flag``: the engine argument)."""
    via = " as the engine argument %s" % flag if flag else ""
    if key in env_values and env_values[key] == got:
        return ".env%s" % via
    if key in env_values:
        return "start.sh%s, which replaces the .env value %s" % (via, shown(key, env_values[key]))
    return "the launcher default in start.sh%s (%s is not in the .env)" % (via, key)


def host_path(ctn, path):
    """The host path a container path maps to through the container's bind mounts (longest target
    first), or None when no mount holds it (the file would have to be in the image)."""
    best = None
    for m in ctn["mounts"]:
        target = (m.get("target") or "").rstrip("/") or "/"
        if m.get("source") and (path == target or path.startswith(target.rstrip("/") + "/")):
            if best is None or len(target) > len(best[0]):
                best = (target, m["source"])
    if best is None:
        return None
    rest = path[len(best[0]):] if best[0] != "/" else path
    return best[1].rstrip("/") + rest


def sps_table_state(ctn, path_exists):
    """``(exists, note)`` of the container's DSPARK_SPS_TABLE: False (missing: the engine stays on
    verify-all), the host path (it exists), or None (cannot tell)."""
    value = ctn["env"].get(SPS_KEY)
    if not value:
        return False, None
    src = host_path(ctn, value) if value.startswith("/") else None
    if src is None:
        return False, ("%s: %s=%s is not under any mount: not found; staying on the verify-all schedule"
                       % (_where(ctn), SPS_KEY, value))
    found = path_exists(ctn["host"], src, ctn["role"] == "head")
    if found is None:
        return None, "%s: cannot tell whether %s (%s=%s) exists on %s" % (_where(ctn), src, SPS_KEY, value, ctn["host"])
    if found:
        return src, None
    return False, ("%s: %s=%s not found (%s on %s); staying on the verify-all schedule"
                   % (_where(ctn), SPS_KEY, value, src, ctn["host"]))


def local_path_exists(host, path, is_head):
    """Default probe: the head's own files are checked; a worker's cannot be from here (None)."""
    return os.path.exists(path) if is_head else None


def check_launch(settings, launch, env_values, tp_size=3, validated=frozenset(), packed=False, timing=False,
                 path_exists=local_path_exists, varied=frozenset()):
    """``(findings, notes)``: the rules of ``tp_size``'s rule set on the declared settings and on what each
    container receives (:class:`UnsupportedTPSize` for a TP size without a rule set).

    Each container is judged on the declared settings overlaid with its own environment. A finding
    about a value the container receives that the declared check did not already report names the
    containers, the value and its origin (:func:`origin`) and asks for it to be set in the ``.env``.
    Findings are dicts (rule, level, key, message, hosts). ``notes``: DSPARK_SPS_TABLE verdicts.
    """
    kw = dict(tp_size=tp_size, validated=validated, packed=packed, timing=timing, varied=varied)
    declared = check_settings(settings, sps_table_exists=False, **kw)   # judged per container below
    base = normalize_settings(settings)
    grouped = {}
    notes = []
    unknown = []
    flags = dict((v, k) for k, v in ENGINE_FLAGS.items())
    for c in launch["containers"]:
        args = engine_settings(c.get("command"))
        view = dict(base)
        view.update(args)
        view.update(c["env"])
        exists, note = sps_table_state(c, path_exists)
        if exists is None:          # a worker's file, not visible from here: a warning, not a verdict
            unknown.append({"rule": "sps_table", "level": "warning", "key": SPS_KEY, "hosts": [_where(c)],
                            "message": note + "; the engine uses the table if it is there"})
            exists = False
        elif note:
            notes.append(note)
        for f in check_settings(view, sps_table_exists=exists, **kw):
            as_arg = f.key not in c["env"] and f.key in args
            got = args.get(f.key) if as_arg else c["env"].get(f.key)
            if f.rule == "env_writable" or got is None or (f.key in base and base[f.key] == got
                                                            and any(d.rule == f.rule for d in declared)):
                continue
            key = (f.rule, f.key, got, f.message)
            grouped.setdefault(key, {"finding": f, "where": [], "origin": origin(
                f.key, got, env_values, flags[f.key] if as_arg else None)})
            grouped[key]["where"].append(_where(c))
    out = []
    image = base.get("IMAGE")
    if image:   # the image goes through the launcher's own words (a worker's ssh string): it must arrive intact
        wrong = ["%s runs %r" % (_where(c), c.get("image")) for c in launch["containers"] if c.get("image") != image]
        if wrong:
            out.append({"rule": "image_received", "level": "error", "key": "IMAGE", "hosts": wrong,
                        "message": "IMAGE=%r is declared but %s: the launcher does not pass the value through "
                                   "intact; use a plain image reference" % (image, ", ".join(wrong))})
    launch_rules = set((k[0], k[1]) for k in grouped)
    for f in declared:
        if (f.rule, f.key) not in launch_rules:
            out.append({"rule": f.rule, "level": f.level, "key": f.key, "message": f.message, "hosts": []})
    for (rule, key, got, message), g in grouped.items():
        fix = "" if g["origin"].startswith(".env") else "; set it explicitly in the .env"
        out.append({"rule": rule, "level": g["finding"].level, "key": key, "hosts": g["where"],
                    "message": "%s %s %s from %s: %s%s" % (", ".join(g["where"]),
                                                           "receives" if len(g["where"]) == 1 else "receive",
                                                           shown(key, got), g["origin"], message, fix)})
    return out + unknown, notes
