# -*- coding: utf-8 -*-
"""Processes that poll nvidia-smi and how often (standard library only).

``ps -eo pid,ppid,user:32,etimes,args --no-headers`` (or ``/proc/*/``) for nvidia-smi pollers:
``-l N``/``--loop=N`` seconds, ``-lms N``/``--loop-ms=N`` milliseconds, ``dmon``/``pmon``
(``-d N``, default 1 s), or under ``watch``; the systemd unit of each from its cgroup.
"""
from __future__ import absolute_import, division, print_function

import os
import pwd

from ansible.module_utils.base.host_files import host_path, read_text
from ansible.module_utils.host.nvidia_smi import SHELLS, SMI, program_name, smi_interval, smi_invocation, watch_interval

__metaclass__ = type
PS_ARGS = ["ps", "-eo", "pid,ppid,user:32,etimes,args", "--no-headers"]


def unit_from_cgroup(text):
    """``/proc/PID/cgroup`` text -> the innermost ``*.service`` of the systemd hierarchy, or None.

    cgroup v2 (``0::/system.slice/gpu-dashboard.service``) and v1 (``1:name=systemd:/...``).
    """
    best = None
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if not (hid == "0" and controllers == "") and "name=systemd" not in controllers.split(","):
            continue
        units = [p for p in path.strip().split("/") if p.endswith(".service")]
        if units:
            best = units[-1]
            if hid == "0":
                break
    return best


def parse_ps_procs(text):
    """``ps -eo pid,ppid,user,etimes,args --no-headers`` -> list of {pid, ppid, user, elapsed_s, args}."""
    out = []
    for line in (text or "").splitlines():
        fields = line.split(None, 4)
        if len(fields) < 5:
            continue
        try:
            pid, ppid, etimes = int(fields[0]), int(fields[1]), int(fields[3])
        except ValueError:
            continue
        out.append({"pid": pid, "ppid": ppid, "user": fields[2], "elapsed_s": etimes,
                    "args": fields[4].strip(), "argv": None})
    return out


def read_cmdline(pid):
    text = read_text("/proc/%d/cmdline" % pid)
    if not text:
        return None
    argv = [a for a in text.split("\0")]
    while argv and argv[-1] == "":
        argv.pop()
    return argv or None


def procs_from_proc():
    """The same records as :func:`parse_ps_procs`, from ``/proc`` (when ``ps`` is missing)."""
    out = []
    uptime = read_text("/proc/uptime")
    try:
        up = float(uptime.split()[0]) if uptime else None
    except ValueError:
        up = None
    try:
        ticks = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        ticks = 100
    try:
        entries = os.listdir(host_path("/proc"))
    except OSError:
        return out
    for d in entries:
        if not d.isdigit():
            continue
        pid = int(d)
        argv = read_cmdline(pid)
        if not argv:
            continue                               # kernel thread or gone
        stat = read_text("/proc/%d/stat" % pid)
        ppid, elapsed = None, None
        if stat and ")" in stat:
            fields = stat.rsplit(")", 1)[1].split()
            try:
                ppid = int(fields[1])
                if up is not None:
                    elapsed = max(0, int(up - int(fields[19]) / float(ticks)))
            except (IndexError, ValueError):
                pass
        try:
            uid = os.stat(host_path("/proc/%d" % pid)).st_uid
            try:
                user = pwd.getpwuid(uid).pw_name
            except KeyError:
                user = str(uid)
        except OSError:
            user = None
        out.append({"pid": pid, "ppid": ppid, "user": user, "elapsed_s": elapsed,
                    "args": " ".join(argv), "argv": argv})
    return out


def own_tree(procs, self_pid):
    """Pids of ``self_pid``, its ancestors and its descendants."""
    parent = dict((p["pid"], p["ppid"]) for p in procs)
    tree = set([self_pid])
    pid = self_pid
    while pid in parent and parent[pid] not in (None, 0) and parent[pid] not in tree:
        pid = parent[pid]
        tree.add(pid)
    children = {}
    for p in procs:
        children.setdefault(p["ppid"], []).append(p["pid"])
    stack = [self_pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in tree:
                tree.add(child)
                stack.append(child)
    return tree


def _argv_from_ps(args):
    """ps ``args`` (argv joined by spaces) -> argv; ``sh -c`` keeps its whole command as one."""
    argv = args.split()
    if argv and program_name(argv[0]) in SHELLS and "-c" in argv[1:]:
        i = argv.index("-c", 1)
        argv = argv[:i + 1] + [" ".join(argv[i + 1:])]
    return argv


def find_pollers(procs, exclude=(), cmdline=read_cmdline, cgroup=None):
    """nvidia-smi processes among ``procs`` -> list of poller dicts, sorted by pid."""
    if cgroup is None:
        def cgroup(pid):
            return read_text("/proc/%d/cgroup" % pid)
    exclude = set(exclude)
    out = []
    for p in procs:
        if p["pid"] in exclude or SMI not in (p.get("args") or ""):
            continue
        argv = p.get("argv") or cmdline(p["pid"]) or _argv_from_ps(p["args"])
        inv = smi_invocation(argv)
        if inv is None:
            continue
        wrapper, smi_args = inv
        looping, interval = smi_interval(smi_args)
        if not looping:
            w = watch_interval(wrapper)
            if w is not None:
                looping, interval = True, w
        out.append({
            "pid": p["pid"], "user": p["user"], "elapsed_s": p["elapsed_s"], "args": p["args"],
            "looping": looping, "interval_s": interval if looping else None,
            "unit": unit_from_cgroup(cgroup(p["pid"])),
        })
    return sorted(out, key=lambda x: x["pid"])


def gather_pollers(run, self_pid=None):
    """-> (pollers, source) with source ``ps`` or ``/proc``."""
    self_pid = os.getpid() if self_pid is None else self_pid
    rc, out, _err = run(list(PS_ARGS))
    procs = parse_ps_procs(out) if rc == 0 else []
    source = "ps"
    if not procs:
        procs, source = procs_from_proc(), "/proc"
    return find_pollers(procs, own_tree(procs, self_pid)), source
