# -*- coding: utf-8 -*-
"""What every node of one experiment condition actually ran (standard library only).

One subject: the per-node facts an experiment record keeps for each condition, as SPEC section 4 and the report
ask of every run: the container variables each rank's container actually received (``docker inspect``, values
of secrets masked by the project's one secret rule), the image id, engine and FlashInfer versions (the image's
labels), the kernel, the CUDA graph shapes each rank captured, and MemAvailable with the memory pressure stalls
(PSI) read before the restart, after the graph captures and after the measurement. Nothing here is read again:
the inputs are what the engine role's restart and the ``host_memory`` module already returned.
"""
from __future__ import absolute_import, division, print_function

import json

from ansible.module_utils.engine_log.scan import scan_text
from ansible.module_utils.launcher.truth import env_dict
from ansible.module_utils.base.secrets import SECRET_MASK, is_secret

__metaclass__ = type

GIB = float(2 ** 30)
# When each memory reading is taken in a condition (the report: at load, capture and measurement)
PHASES = ("before_restart", "after_capture", "after_measurement")
VERSION_LABELS = {"engine_version": "org.opencontainers.image.version",
                  "flashinfer_version": "dsv41.flashinfer.version"}


def _first_json(stdout):
    try:
        data = json.loads(stdout or "")
    except ValueError:
        return {}
    return data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}


def _by_host(registered, key=lambda r: r.get("item")):
    """{host: parsed first JSON object} of a looped, delegated ``docker inspect`` result."""
    out = {}
    for r in (registered or {}).get("results") or []:
        host = key(r)
        if isinstance(host, dict):           # a loop over an earlier loop's results: its item names the host
            host = host.get("item")
        if isinstance(host, str) and r.get("rc") == 0:
            out[host] = _first_json(r.get("stdout"))
    return out


def masked_env(env_items):
    """Config.Env as {name: value}, every secret (by name or by shape) masked."""
    return dict((k, SECRET_MASK if is_secret(k, v) else v) for k, v in sorted(env_dict(env_items or []).items()))


def _memory(reading):
    if not isinstance(reading, dict) or reading.get("mem_available_bytes") is None:
        return None
    pressure = reading.get("pressure") or {}
    return {"mem_available_gib": round(reading["mem_available_bytes"] / GIB, 2),
            "pressure_some_avg10": (pressure.get("some") or {}).get("avg10"),
            "pressure_full_avg10": (pressure.get("full") or {}).get("avg10"),
            "pressure_full_total_us": (pressure.get("full") or {}).get("total_us")}


def node_facts(running, images, memory, logs, ranks):
    """{host: {rank, image_id, engine_version, flashinfer_version, kernel, container_env, graph_shapes, memory}}.

    ``running``/``images``: the engine restart's registered ``docker inspect`` of each rank's container and of
    its image; ``memory``: {phase: {host: host_memory result}}; ``logs``: each rank's latest boot."""
    containers, image_info = _by_host(running), _by_host(images)
    out = {}
    for host in sorted(ranks or {}, key=lambda h: ranks[h]):
        c = containers.get(host) or {}
        labels = ((image_info.get(host) or {}).get("Config") or {}).get("Labels") or {}
        readings = dict((phase, ((memory or {}).get(phase) or {}).get(host)) for phase in PHASES)
        kernel = next((r.get("kernel") for r in readings.values() if isinstance(r, dict) and r.get("kernel")), None)
        shapes = {}
        if (logs or {}).get(host):
            shapes = scan_text(logs[host], name=host).to_dict().get("graph_shapes") or {}
        out[host] = {
            "rank": ranks[host],
            "image_id": c.get("Image"),
            "engine_version": labels.get(VERSION_LABELS["engine_version"]),
            "flashinfer_version": labels.get(VERSION_LABELS["flashinfer_version"]),
            "kernel": kernel,
            "container_env": masked_env((c.get("Config") or {}).get("Env")) if c else None,
            "graph_shapes": shapes,
            "memory": dict((phase, _memory(r)) for phase, r in readings.items()),
        }
    return out


def _pct(value):
    return "-" if value is None else "%.2f" % value


def markdown_rows(conditions, order):
    """The record's per-node table: one row per condition and rank."""
    rows = []
    for name in order:
        for host, n in sorted(((conditions.get(name) or {}).get("nodes") or {}).items(),
                              key=lambda kv: kv[1].get("rank", 0)):
            mem = n.get("memory") or {}
            avail = " / ".join("-" if not mem.get(p) else "%.2f" % mem[p]["mem_available_gib"] for p in PHASES)
            stall = " / ".join("-" if not mem.get(p) else "%s, %s" % (_pct(mem[p]["pressure_some_avg10"]),
                                                                       _pct(mem[p]["pressure_full_avg10"]))
                               for p in PHASES)
            shapes = "; ".join("%s %s" % (k, ",".join(str(b) for b in v)) for k, v in sorted((n.get("graph_shapes") or {}).items()))
            rows.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                name, host, n.get("rank"), (n.get("image_id") or "-")[:19], n.get("engine_version") or "-",
                n.get("kernel") or "-", shapes or "-", len(n.get("container_env") or {}), avail, stall))
    if not rows:
        return []
    return ["", "## Each node (what it ran and its memory, per condition)", "",
            "Memory: MemAvailable GiB and memory pressure avg10 % (some, full) before the restart / after the graph "
            "captures / after the measurement. Container variables: how many each rank's container received "
            "(record.json lists them, secrets masked).", "",
            "| condition | host | rank | image | engine | kernel | graph shapes | container variables | MemAvailable GiB "
            "| pressure some, full |", "|---|---|---|---|---|---|---|---|---|---|"] + rows
