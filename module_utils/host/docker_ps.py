# -*- coding: utf-8 -*-
"""docker's view of a node's containers: ``docker ps``/``docker stats`` JSON lines (standard library only).

``docker ps -a --no-trunc --format '{{json .}}'``: one JSON object a line (``Names``, ``Image``,
``State``, ``Status``, ``CreatedAt`` like ``2026-09-21 08:14:00 +0000 UTC``, ``Labels`` as
``k=v,k2=v2``); ``docker stats --no-stream --format '{{json .}}'``: ``Name``, ``CPUPerc`` (``4.72%``),
``MemUsage`` (``141MiB / 119.7GiB``; ``--`` when unknown).
"""
from __future__ import absolute_import, division, print_function

import re

from ansible.module_utils.base.json_lines import json_lines
from ansible.module_utils.base.probe import tail_text

__metaclass__ = type
GIB = 2 ** 30
DOCKER_FORMAT = "{{json .}}"
_SIZE_UNITS = {
    "b": 1, "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40, "pib": 2 ** 50,
    "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12, "pb": 10 ** 15,
}

_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text):
    """``1.2GiB`` / ``141MiB`` / ``12.3kB`` / ``0B`` -> bytes (int); None for ``--``/garbage."""
    if text is None:
        return None
    m = _SIZE_RE.match(str(text))
    if not m:
        return None
    unit = (m.group(2) or "B").lower()
    if unit not in _SIZE_UNITS:
        return None
    return int(round(float(m.group(1)) * _SIZE_UNITS[unit]))


def parse_mem_usage(text):
    """docker stats ``MemUsage`` (``1.2GiB / 119.7GiB``) -> used bytes (left side) or None."""
    if not text:
        return None
    return parse_size(str(text).split("/", 1)[0])


def parse_percent(text):
    """``4.72%`` -> 4.72; None for ``--`` or empty."""
    if text is None:
        return None
    s = str(text).strip().rstrip("%").strip()
    try:
        return float(s)
    except ValueError:
        return None


def parse_labels(text):
    """docker ps ``Labels`` (``k=v,k2=v2``) -> dict.

    A piece without ``=`` continues the previous value (a value holding a comma), so
    ``a=1,2,b=3`` gives ``{"a": "1,2", "b": "3"}``. A dict (docker inspect style) is returned as is.
    """
    if isinstance(text, dict):
        return dict(text)
    out = {}
    last = None
    for piece in (text or "").split(","):
        if "=" in piece:
            key, _, value = piece.partition("=")
            key = key.strip()
            if key:
                out[key] = value
                last = key
                continue
        if last is not None:
            out[last] += "," + piece
        elif piece.strip():
            out[piece.strip()] = ""
            last = piece.strip()
    return out


def parse_json_lines(text):
    """``--format '{{json .}}'`` output -> (list of dicts, list of unparsable lines)."""
    rows, bad = [], []
    for _n, line, value in json_lines(text):
        if isinstance(value, dict):
            rows.append(value)
        else:
            bad.append(line)
    return rows, bad


def container_name(names):
    """First name of docker ps ``Names`` (``a,b/link`` for linked containers), no leading slash."""
    for name in str(names or "").split(","):
        name = name.strip().lstrip("/")
        if name and "/" not in name:
            return name
    return str(names or "").split(",")[0].strip().lstrip("/")


def parse_ps(text):
    """docker ps JSON lines -> list of dicts {name, image, status, state, created, labels, id}."""
    rows, _bad = parse_json_lines(text)
    out = []
    for r in rows:
        status = r.get("Status") or ""
        state = (r.get("State") or "").strip().lower() or _state_from_status(status)
        out.append({
            "name": container_name(r.get("Names")),
            "id": r.get("ID"),
            "image": r.get("Image"),
            "status": status,
            "state": state,
            "created": r.get("CreatedAt"),
            "labels": parse_labels(r.get("Labels")),
        })
    return out


def _state_from_status(status):
    """Older docker without ``State`` in ps: derive it from ``Status``."""
    s = status.lower()
    if s.startswith("up"):
        return "paused" if "(paused)" in s else "running"
    for word in ("exited", "created", "restarting", "removal", "dead"):
        if s.startswith(word):
            return "removing" if word == "removal" else word
    return s.split(" ", 1)[0] if s else None


def parse_stats(text):
    """docker stats JSON lines -> {name: {cpu_percent, mem_bytes}} (also keyed by ID)."""
    rows, _bad = parse_json_lines(text)
    out = {}
    for r in rows:
        entry = {"cpu_percent": parse_percent(r.get("CPUPerc")),
                 "mem_bytes": parse_mem_usage(r.get("MemUsage"))}
        for key in (r.get("Name"), r.get("Container"), r.get("ID")):
            if key:
                out.setdefault(str(key).lstrip("/"), entry)
    return out


def container_records(ps_rows, stats, owners=None, serving_prefix="dsv41-"):
    """Join ps rows with stats and the inventory owners -> the module's ``containers`` list."""
    owners = owners or {}
    out = []
    for row in ps_rows:
        name = row["name"]
        label_owner = row["labels"].get("owner")
        if label_owner:
            owner, source = label_owner, "label"
        elif owners.get(name) not in (None, ""):
            owner, source = str(owners[name]), "inventory"
        else:
            owner, source = None, "unknown"
        st = None
        if row["state"] in ("running", "paused", "restarting"):
            st = stats.get(name) or (row.get("id") and (stats.get(row["id"]) or stats.get(row["id"][:12])))
        out.append({
            "name": name,
            "image": row["image"],
            "status": row["status"],
            "state": row["state"],
            "owner": owner,
            "owner_source": source,
            "created": row["created"],
            "cpu_percent": st["cpu_percent"] if st else None,
            "mem_bytes": st["mem_bytes"] if st else None,
            "serving": bool(serving_prefix) and name.startswith(serving_prefix),
            "labels": row["labels"],
        })
    return out


def docker_totals(containers):
    non = [c for c in containers if not c["serving"]]
    mem = sum(c["mem_bytes"] for c in non if c["mem_bytes"] is not None)
    cpu = sum(c["cpu_percent"] for c in non if c["cpu_percent"] is not None)
    return {
        "non_serving_count": len(non),
        "non_serving_running_count": sum(1 for c in non if c["state"] in ("running", "paused", "restarting")),
        "serving": [c["name"] for c in containers if c["serving"]],
        "serving_running": [c["name"] for c in containers if c["serving"] and c["state"] == "running"],
        "non_serving_mem_bytes": mem,
        "non_serving_mem_gib": round(mem / float(GIB), 2),
        "non_serving_cpu_percent": round(float(cpu), 2),
    }


def gather_docker(run, docker="docker", owners=None, serving_prefix="dsv41-"):
    """-> dict with ``docker_available``, ``docker_error``, ``containers`` and the totals."""
    result = {"docker_available": False, "docker_error": None, "containers": []}
    rc, out, err = run([docker, "ps", "-a", "--no-trunc", "--format", DOCKER_FORMAT])
    if rc is None:
        result["docker_error"] = "%s: not found" % docker
    elif rc != 0:
        result["docker_error"] = "%s ps exited %s: %s" % (docker, rc, tail_text(err or out))
    else:
        result["docker_available"] = True
        rows = parse_ps(out)
        stats = {}
        if any(r["state"] in ("running", "paused", "restarting") for r in rows):
            src, sout, serr = run([docker, "stats", "--no-stream", "--format", DOCKER_FORMAT])
            if src == 0:
                stats = parse_stats(sout)
            else:
                result["docker_error"] = "%s stats exited %s: %s" % (docker, src, tail_text(serr or sout))
        result["containers"] = container_records(rows, stats, owners, serving_prefix)
    result.update(docker_totals(result["containers"]))
    return result
