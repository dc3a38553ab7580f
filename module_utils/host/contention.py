# -*- coding: utf-8 -*-
"""What competes with the engine for a Spark's unified memory and GPU (standard library only).

Used by the ``contention_report`` module (stage A, "reduce spark3 contention"). Everything here
is read-only: parsers are pure functions of command output or file text, and the ``gather_*``
functions take a ``run`` callable, ``run(args) -> (rc, stdout, stderr)``, where ``rc`` is None
when the executable does not exist (the module wraps ``AnsibleModule.run_command``; never a shell).

What each source says is read by its own module_utils file: docker_ps (containers),
gpu_pollers and nvidia_smi (nvidia-smi pollers), journal_search (NV_ERR lines), meminfo; here the
display manager and default target (``systemctl show -p Id --value display-manager.service`` or the
``/etc/systemd/system/display-manager.service`` link, ``is-active``, ``is-enabled``, ``get-default``),
memory pressure (``/proc/pressure/memory``, absent on kernels without PSI) and ``/proc/loadavg``, and
the report that puts them together.
"""
from __future__ import absolute_import, division, print_function

import os

from ansible.module_utils.host.docker_ps import gather_docker
from ansible.module_utils.host.gpu_pollers import gather_pollers
from ansible.module_utils.base.host_files import host_path, read_text
from ansible.module_utils.host.journal import gather_journal
from ansible.module_utils.host.meminfo import memory_facts, parse_meminfo

__metaclass__ = type
DM_LINK = "/etc/systemd/system/display-manager.service"
ENABLED_STATES = ("enabled", "enabled-runtime", "alias")


def _first_line(text):
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def gather_display_manager(run):
    """-> {unit, active, active_state, enabled, enabled_state, source}."""
    unit, source = None, None
    rc, out, _err = run(["systemctl", "show", "-p", "Id", "--value", "display-manager.service"])
    if rc == 0:
        value = _first_line(out)
        if value.startswith("Id="):          # systemd < 230 has no --value
            value = value[3:]
        if value and value != "display-manager.service":
            unit, source = value, "systemctl"
    if unit is None:
        path = host_path(DM_LINK)
        try:
            target = os.readlink(path)
        except (IOError, OSError):
            target = None
        if target:
            unit, source = os.path.basename(target), "link"
    dm = {"unit": unit, "source": source, "active": False, "active_state": None,
          "enabled": False, "enabled_state": None}
    if unit is None:
        return dm
    rc, out, _err = run(["systemctl", "is-active", unit])
    if rc is not None:
        dm["active_state"] = _first_line(out) or None
        dm["active"] = dm["active_state"] == "active"
    rc, out, _err = run(["systemctl", "is-enabled", unit])
    if rc is not None:
        dm["enabled_state"] = _first_line(out) or None
        dm["enabled"] = dm["enabled_state"] in ENABLED_STATES
    return dm


def gather_default_target(run):
    rc, out, _err = run(["systemctl", "get-default"])
    if rc == 0:
        return _first_line(out) or None
    return None


# ---------------------------------------------------------------------------------------------
# /proc: PSI, load (meminfo: module_utils/host/meminfo.py)
# ---------------------------------------------------------------------------------------------
def parse_psi(text):
    """``/proc/pressure/memory`` -> {some: {avg10, avg60, avg300, total}, full: {...}} or None."""
    if not text:
        return None
    out = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] not in ("some", "full"):
            continue
        entry = {}
        for item in fields[1:]:
            key, _, value = item.partition("=")
            try:
                entry[key] = int(value) if key == "total" else float(value)
            except ValueError:
                continue
        out[fields[0]] = entry
    return out or None


def parse_loadavg(text):
    """``0.52 0.58 0.59 2/1234 5678`` -> {load1, load5, load15, running, total}."""
    fields = (text or "").split()
    if len(fields) < 4:
        return None
    try:
        running, total = fields[3].split("/", 1)
        return {"load1": float(fields[0]), "load5": float(fields[1]), "load15": float(fields[2]),
                "running": int(running), "total": int(total)}
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# all together
# ---------------------------------------------------------------------------------------------
def summarize(r):
    intervals = [p["interval_s"] for p in r["gpu_pollers"] if p["interval_s"] is not None]
    return {
        "host": r["host"],
        "docker_available": r["docker_available"],
        "containers": len(r["containers"]),
        "non_serving": r["non_serving_count"],
        "non_serving_running": r["non_serving_running_count"],
        "non_serving_mem_gib": r["non_serving_mem_gib"],
        "non_serving_cpu_percent": r["non_serving_cpu_percent"],
        "serving_running": r["serving_running"],
        "mem_available_gib": r["memory"]["mem_available_gib"],
        "psi_some_avg10": (r["psi"] or {}).get("some", {}).get("avg10") if r["psi"] else None,
        "display_manager": r["display_manager"]["unit"],
        "display_manager_active": r["display_manager"]["active"],
        "default_target": r["default_target"],
        "gpu_pollers": len(r["gpu_pollers"]),
        "min_poll_interval_s": min(intervals) if intervals else None,
        "nv_err_count": r["nv_err_events"]["count"],
        "journal_readable": r["journal_readable"],
    }


def findings(r):
    """Human-readable list of what competes with the engine (empty when nothing does)."""
    out = []
    if r["non_serving_running_count"]:
        unknown = sum(1 for c in r["containers"] if not c["serving"] and c["owner"] is None)
        out.append("%d non-serving container(s) running, %.2f GiB, %.2f%% CPU%s"
                   % (r["non_serving_running_count"], r["non_serving_mem_gib"], r["non_serving_cpu_percent"],
                      "; %d without an owner" % unknown if unknown else ""))
    dm = r["display_manager"]
    if dm["active"]:
        out.append("display manager %s is active" % dm["unit"])
    if r["default_target"] == "graphical.target":
        out.append("default target is graphical.target")
    for p in r["gpu_pollers"]:
        if p["looping"]:
            every = "every %g s" % p["interval_s"] if p["interval_s"] is not None else "in a loop"
            out.append("nvidia-smi poller pid %d (%s) %s%s" % (p["pid"], p["user"], every,
                                                                " from %s" % p["unit"] if p["unit"] else ""))
    ev = r["nv_err_events"]
    if ev["count"]:
        out.append("%d journal line(s) match %s" % (ev["count"], ev["pattern"]))
    return out


def gather(run, owners=None, serving_prefix="dsv41-", docker="docker", journal_pattern="NV_ERR_NO_MEMORY",
           journal_since=None, host="this host", self_pid=None):
    """Everything the contention_report module returns (without ``changed``)."""
    r = {"host": host}
    r.update(gather_docker(run, docker, owners, serving_prefix))
    r["display_manager"] = gather_display_manager(run)
    r["default_target"] = gather_default_target(run)
    r["memory"] = memory_facts(parse_meminfo(read_text("/proc/meminfo")))
    r["psi"] = parse_psi(read_text("/proc/pressure/memory"))
    r["load"] = parse_loadavg(read_text("/proc/loadavg"))
    r["gpu_pollers"], r["gpu_pollers_source"] = gather_pollers(run, self_pid)
    r["nv_err_events"] = gather_journal(run, journal_pattern, journal_since)
    r["journal_readable"] = r["nv_err_events"]["readable"]
    r["summary"] = summarize(r)
    r["findings"] = findings(r)
    return r
