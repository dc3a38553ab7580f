# -*- coding: utf-8 -*-
"""Filters over the effective launch (the ``launcher_effective`` module's result).

Which launcher settings move a rank's ``/engram`` is not assumed from names: ``launcher_effective``
changes each candidate setting in turn and evaluates the launch again (``key_effects``). A setting that
moves several ranks at once (one ``WORKER_ENGRAM_DIR`` for every worker) can only point them all at one
directory, so a destination offered through it must have room on each of those ranks.
"""
from __future__ import absolute_import, division, print_function

import json
from pathlib import Path

import ansible.module_utils

MODULE_UTILS = str(Path(__file__).resolve().parent.parent / "module_utils")  # the repo's, as Ansible ships them
if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(MODULE_UTILS)

from ansible.module_utils.launcher import truth as launch_truth  # noqa: E402

__metaclass__ = type


def dsv41_engram_settings(key_effects, rank):
    """``[{"key": KEY, "ranks": [...]}]``: the settings whose change moves ``/engram`` of ``rank``."""
    out = []
    for key, effect in sorted((key_effects or {}).items()):
        ranks = [str(r) for r in (effect or {}).get("engram_ranks") or []]
        if str(rank) in ranks:
            out.append({"key": key, "ranks": ranks})
    return out


def dsv41_engram_advice(key_effects, ranks):
    """One sentence per rank in ``ranks``: the launcher setting that can give it another destination, and
    which other ranks that setting moves with it (so the new directory needs room on each)."""
    out = []
    for rank in ranks if isinstance(ranks, (list, tuple)) else [ranks]:
        found = dsv41_engram_settings(key_effects, rank)
        if not found:
            out.append("rank %s: no setting the launcher reads moves its /engram; only a change to the launcher "
                       "itself can give it another destination" % rank)
            continue
        parts = []
        for item in found:
            if item["ranks"] == [str(rank)]:
                parts.append("%s (this rank only)" % item["key"])
            else:
                parts.append("%s, which the launcher uses for ranks %s alike: the new directory must have room on "
                             "each of them" % (item["key"], ", ".join(item["ranks"])))
        out.append("rank %s: set %s" % (rank, "; or ".join(parts)))
    return out


def dsv41_launch_lines(result):
    """Lines for a report of a ``launcher_effective`` result: per container in order of start, where it
    runs, its image and ``/engram`` source, then the environment it receives (already masked)."""
    out = []
    for c in (result or {}).get("containers") or []:
        out.append("%s. %s rank %s %s (%s): /engram <- %s" % (c.get("order"), c.get("host"), c.get("rank"),
                                                             c.get("name"), c.get("image"),
                                                             c.get("engram_source") or "nothing"))
        out.append("   " + " ".join("%s=%s" % (k, v) for k, v in (c.get("env") or {}).items()))
    return out


def dsv41_launch_truth(prediction, containers, images, hostvars):
    """Every difference between the launch predicted before a restart (``launcher_effective``'s result) and
    the running containers: ``containers`` and ``images`` are the registered loop results of
    ``docker inspect <container>`` and ``docker image inspect <its image>`` per rank host (module_utils/
    launch_truth.check_ranks; secrets masked)."""
    images_by_host = {}
    for r in (images or {}).get("results", []):
        item = r.get("item")
        images_by_host[item.get("item") if isinstance(item, dict) else item] = r
    running = []
    for res in (containers or {}).get("results", []):
        host = res["item"]
        running.append({"rank": hostvars[host]["dsv41_rank"], "host": host,
                        "container": _first_json(res), "image": _first_json(images_by_host.get(host))})
    return launch_truth.check_ranks(prediction, running)


def _first_json(res):
    if not res or res.get("rc") != 0 or res.get("skipped"):
        return None
    try:
        data = json.loads(res.get("stdout") or "[]")
    except ValueError:
        return None
    return data[0] if isinstance(data, list) and data else None


def dsv41_predicted_images(prediction, hosts, hostvars, default=None):
    """{inventory host: the image its rank's container runs at the next serve} from the launch predicted before a
    restart (``launcher_effective``), matched by rank; a host the prediction has no container for gets
    ``default`` (the .env's IMAGE), and every host does when there is no prediction (check mode)."""
    by_rank = {}
    for c in (prediction or {}).get("containers") or []:
        if isinstance(c, dict) and c.get("rank") is not None and c.get("image"):
            by_rank.setdefault(int(c["rank"]), c["image"])
    return dict((h, by_rank.get(int(hostvars[h]["dsv41_rank"]), default)) for h in hosts)


def dsv41_running_image_ids(containers):
    """{inventory host: its running container's image id} from the registered loop of ``docker inspect`` per rank
    host (a host whose inspect failed is left out)."""
    out = {}
    for res in (containers or {}).get("results", []):
        first = _first_json(res)
        if first and first.get("Image"):
            out[res["item"]] = first["Image"]
    return out


MAX_HOME_ENTRIES = 20000


def dsv41_worker_homes(results, hostvars):
    """``{user: [relative paths, directories ending in /]}`` from the registered loop of ``ansible.builtin.find``
    over each worker's home, or from ``{host: its find result}`` (``paths: ~``; the home is the parent of its
    shallowest entry), one list per login
    user: the names every worker of that user has (a name only some have is left out, so a worker's test is
    never answered yes for a worker that lacks it). At most MAX_HOME_ENTRIES names per user."""
    import os
    if isinstance(results, dict) and "results" not in results:     # {host: find result}, one task per host
        results = {"results": [dict(r or {}, item=h) for h, r in sorted(results.items())]}
    by_user = {}
    for res in (results or {}).get("results", []):
        if res.get("skipped") or res.get("failed") or not isinstance(res.get("files"), list):
            continue
        host = res.get("item")
        user = (hostvars.get(host) or {}).get("ansible_user") or ""
        paths = [f for f in res["files"] if isinstance(f, dict) and f.get("path")]
        if not user or not paths:
            continue
        top = min(paths, key=lambda f: f["path"].count("/"))["path"]
        home = os.path.dirname(top.rstrip("/"))
        names = set()
        for f in paths:
            rel = os.path.relpath(f["path"], home)
            if rel.startswith(".."):
                continue
            names.add(rel + "/" if f.get("isdir") else rel)
        by_user[user] = names if user not in by_user else by_user[user] & names
    return dict((u, sorted(n)[:MAX_HOME_ENTRIES]) for u, n in sorted(by_user.items()))


class FilterModule:
    """Effective-launch filters."""

    def filters(self):
        return {"dsv41_engram_settings": dsv41_engram_settings, "dsv41_engram_advice": dsv41_engram_advice,
                "dsv41_launch_lines": dsv41_launch_lines, "dsv41_launch_truth": dsv41_launch_truth,
                "dsv41_worker_homes": dsv41_worker_homes, "dsv41_predicted_images": dsv41_predicted_images,
                "dsv41_running_image_ids": dsv41_running_image_ids}
