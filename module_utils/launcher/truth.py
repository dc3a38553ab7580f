# -*- coding: utf-8 -*-
"""What each rank's container really received, against what the launch predicted (standard library only).

After a boot the running containers are the truth.  Before a restart the launcher's own serve path is
evaluated (``launcher_effective``: every container with the environment and mounts its ``docker run``
gives it); after the restart each rank's container is read with ``docker inspect`` and compared with
that prediction, key by key:

* **environment**: the container's ``Config.Env`` is its image's ``Config.Env`` with the launch's
  ``-e``/``--env-file`` items laid over it, so a key whose value is exactly the image's own is the image's,
  not the launch's, and is left out (a launch that sets a key to the image's own value is equal either
  way).  Keys the prediction names must be there with the predicted value; keys the launch gave that
  the prediction does not name are differences too.
* **mounts**: by target: source, and read-only or not.

Secrets are compared as the prediction shows them: values under a secret name (module_utils/
secret_rule.py) are ``***`` on both sides, and every secret value is masked wherever it appears, so a
difference never prints one (a changed secret value is therefore not seen here; the drift check
compares the ``.env``).  A rank whose container is missing or not running is a difference too.
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.base import secrets

__metaclass__ = type
ABSENT = "(absent)"


def env_dict(items):
    """``["NAME=value", "NAME2"]`` (docker's Config.Env) -> {"NAME": "value", "NAME2": ""}; only the first
    ``=`` separates (a value may hold more). The one reader of Config.Env (the run record's filter too)."""
    out = {}
    for item in items or []:
        name, _, value = str(item).partition("=")
        out[name] = value
    return out


def config_env(obj):
    """Config.Env of a ``docker inspect`` or ``docker image inspect`` object (None: {}) as a dict."""
    return env_dict(((obj or {}).get("Config") or {}).get("Env"))


def launched_env(container, image):
    """The environment the launch gave ``container`` (a ``docker inspect`` object): its Config.Env less
    the entries its image (a ``docker image inspect`` object, or None) carries with the same value."""
    base = config_env(image)
    return dict((k, v) for k, v in config_env(container).items() if not (k in base and base[k] == v))


def launched_mounts(container):
    """{target: (source, read_only)} of a ``docker inspect`` object's Mounts."""
    out = {}
    for m in (container or {}).get("Mounts") or []:
        target = (m.get("Destination") or "").rstrip("/") or "/"
        source = m.get("Source") if m.get("Type", "bind") == "bind" else m.get("Name") or m.get("Source")
        out[target] = (source, not m.get("RW", True))
    return out


def predicted_mounts(container):
    out = {}
    for m in (container or {}).get("mounts") or []:
        if not m.get("target"):
            continue
        out[(m["target"].rstrip("/") or "/")] = (m.get("source"), bool(m.get("read_only")))
    return out


def _masked_env(env):
    return secrets.redact(dict(env), secrets.secret_values(env))


def compare(predicted, container, image=None):
    """Differences between one predicted container (a ``launcher_effective`` container) and the running
    one (``docker inspect``, its image's ``docker image inspect``): ``[{"key", "predicted", "actual"}]``,
    keys ``env NAME`` and ``mount TARGET``, values masked."""
    diffs = []
    want = dict((predicted or {}).get("env") or {})
    have = _masked_env(launched_env(container, image))
    image_env = config_env(image)
    for key in sorted(set(want) | set(have)):
        w, h = want.get(key, ABSENT), have.get(key, ABSENT)
        if h == ABSENT and key in image_env and _masked_env({key: image_env[key]})[key] == w:
            continue                         # the launch set the image's own value
        if w != h:
            diffs.append({"key": "env %s" % key, "predicted": w, "actual": h})
    want_m, have_m = predicted_mounts(predicted), launched_mounts(container)
    for target in sorted(set(want_m) | set(have_m)):
        w, h = want_m.get(target), have_m.get(target)
        if w is not None and h is not None and (w[0] is None or w[0] == h[0]) and w[1] == h[1]:
            continue
        diffs.append({"key": "mount %s" % target, "predicted": _mount_text(w), "actual": _mount_text(h)})
    return diffs


def _mount_text(m):
    if m is None:
        return ABSENT
    return "%s%s" % (m[0] if m[0] is not None else "(volume)", " (ro)" if m[1] else "")


def check_ranks(prediction, running):
    """Every difference of a fleet's restart: ``prediction`` is launcher_effective's result, ``running``
    ``[{"rank", "host", "container": inspect or None, "image": image inspect or None}]``. Returns
    sentences ``rank R (HOST, NAME): KEY predicted P, actual A``, one per difference."""
    by_rank = {}
    for c in (prediction or {}).get("containers") or []:
        if c.get("rank") is not None:
            by_rank.setdefault(int(c["rank"]), c)
    out = []
    for r in sorted(running, key=lambda x: int(x["rank"])):
        rank = int(r["rank"])
        want = by_rank.get(rank)
        have = r.get("container")
        label = "rank %d (%s, %s)" % (rank, r.get("host"), (have or {}).get("Name", "").lstrip("/")
                                      or (want or {}).get("name") or "?")
        if want is None:
            out.append("%s: the launch predicted no container for this rank" % label)
            continue
        if not have:
            out.append("%s: predicted container %s is not there" % (label, want.get("name")))
            continue
        state = (have.get("State") or {}).get("Status")
        if state != "running":
            out.append("%s: container is %s, not running" % (label, state))
        for d in compare(want, have, r.get("image")):
            out.append("%s: %s predicted %r, actual %r" % (label, d["key"], d["predicted"], d["actual"]))
    return out
