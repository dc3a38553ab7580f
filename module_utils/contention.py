# -*- coding: utf-8 -*-
"""What competes with the engine for a Spark's unified memory and GPU (standard library only).

Used by the ``contention_report`` module (stage A, "reduce spark3 contention"). Everything here
is read-only: parsers are pure functions of command output or file text, and the ``gather_*``
functions take a ``run`` callable, ``run(args) -> (rc, stdout, stderr)``, where ``rc`` is None
when the executable does not exist (the module wraps ``AnsibleModule.run_command``; never a shell).

Sources and the formats parsed:

==================  ===========================================================================
docker              ``docker ps -a --no-trunc --format '{{json .}}'``: one JSON object a line
                    (``Names``, ``Image``, ``State``, ``Status``, ``CreatedAt`` like
                    ``2026-09-21 08:14:00 +0000 UTC``, ``Labels`` as ``k=v,k2=v2``);
                    ``docker stats --no-stream --format '{{json .}}'``: ``Name``, ``CPUPerc``
                    (``4.72%``), ``MemUsage`` (``141MiB / 119.7GiB``; ``--`` when unknown).
systemd             ``systemctl show -p Id --value display-manager.service`` (or the
                    ``/etc/systemd/system/display-manager.service`` link), ``is-active``,
                    ``is-enabled``, ``get-default``; ``/proc/PID/cgroup`` for a pid's unit.
/proc               ``meminfo`` (kB), ``pressure/memory`` (PSI; absent on kernels without it),
                    ``loadavg``.
processes           ``ps -eo pid,ppid,user:32,etimes,args --no-headers`` (or ``/proc/*/``) for
                    nvidia-smi pollers: ``-l N``/``--loop=N`` seconds, ``-lms N``/``--loop-ms=N``
                    milliseconds, ``dmon``/``pmon`` (``-d N``, default 1 s), or under ``watch``.
journal             ``journalctl --no-pager -o short-iso -g PATTERN [--since S]``; when this
                    journalctl has no pattern matching, the whole journal (``--since`` still
                    applied) filtered here with the same smart-case rule as ``-g``.
==================  ===========================================================================
"""
from __future__ import absolute_import, division, print_function

import json
import os
import pwd
import re
import shlex

from ansible.module_utils.meminfo import memory_facts, parse_meminfo

__metaclass__ = type

GIB = 2 ** 30
FS_ROOT = "/"                 # tests point this at a fake tree
MAX_EVENT_LINES = 50          # journal lines returned (the count covers all of them)
DM_LINK = "/etc/systemd/system/display-manager.service"
PS_ARGS = ["ps", "-eo", "pid,ppid,user:32,etimes,args", "--no-headers"]
DOCKER_FORMAT = "{{json .}}"
ENABLED_STATES = ("enabled", "enabled-runtime", "alias")


def host_path(path):
    """``path`` under :data:`FS_ROOT`."""
    if FS_ROOT in ("", "/"):
        return path
    return os.path.join(FS_ROOT, path.lstrip("/"))


def read_text(path):
    """File text, or None when it is missing or unreadable (including EOPNOTSUPP on PSI files)."""
    try:
        with open(host_path(path), "rb") as f:
            return f.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return None


def _tail(text, n=300):
    return (text or "").strip()[-n:]


# ---------------------------------------------------------------------------------------------
# docker
# ---------------------------------------------------------------------------------------------
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
    for line in (text or "").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            bad.append(line)
            continue
        if isinstance(obj, dict):
            rows.append(obj)
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
        result["docker_error"] = "%s ps exited %s: %s" % (docker, rc, _tail(err or out))
    else:
        result["docker_available"] = True
        rows = parse_ps(out)
        stats = {}
        if any(r["state"] in ("running", "paused", "restarting") for r in rows):
            src, sout, serr = run([docker, "stats", "--no-stream", "--format", DOCKER_FORMAT])
            if src == 0:
                stats = parse_stats(sout)
            else:
                result["docker_error"] = "%s stats exited %s: %s" % (docker, src, _tail(serr or sout))
        result["containers"] = container_records(rows, stats, owners, serving_prefix)
    result.update(docker_totals(result["containers"]))
    return result


# ---------------------------------------------------------------------------------------------
# systemd
# ---------------------------------------------------------------------------------------------
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
# /proc: PSI, load (meminfo: module_utils/meminfo.py)
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
# nvidia-smi pollers
# ---------------------------------------------------------------------------------------------
SMI = "nvidia-smi"
SHELLS = frozenset(("sh", "bash", "dash", "zsh", "ash", "ksh"))
WRAPPERS = frozenset(("env", "nice", "ionice", "timeout", "stdbuf", "setsid", "sudo", "runuser",
                      "chrt", "taskset", "nohup", "unbuffer", "watch", "doas", "systemd-run"))
_INTERP_RE = re.compile(r"^(python[0-9.]*|perl|ruby)$")
_NUM_RE = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")


def _base(tok):
    return tok.rsplit("/", 1)[-1]


def _split(cmd):
    try:
        return shlex.split(cmd)
    except ValueError:
        return cmd.split()


def smi_invocation(argv, depth=0):
    """``(wrapper_argv, smi_args)`` when ``argv`` runs nvidia-smi, else None.

    nvidia-smi itself, under an interpreter (the lab stand-in is ``python3 /usr/bin/nvidia-smi``),
    under wrappers such as ``watch``/``timeout``/``sudo``, or in ``sh -c '...'``. A program that
    merely mentions it (``grep nvidia-smi``, ``less nvidia-smi.log``) is not a poller.
    """
    if not argv or depth > 4:
        return None
    first = _base(argv[0])
    if first == SMI:
        return [], list(argv[1:])
    if not (first in SHELLS or first in WRAPPERS or _INTERP_RE.match(first)):
        return None
    if first in SHELLS:
        if "-c" in argv[1:]:
            i = argv.index("-c", 1)
            if i + 1 < len(argv):
                inner = smi_invocation(_split(argv[i + 1]), depth + 1)
                if inner is not None:
                    return [argv[0]] + inner[0], inner[1]
        return None
    for i in range(1, len(argv)):
        tok = argv[i]
        if _base(tok) == SMI:
            return list(argv[:i]), list(argv[i + 1:])
        if " " in tok and not tok.startswith("-"):       # watch 'nvidia-smi -q'
            inner = smi_invocation(_split(tok), depth + 1)
            if inner is not None:
                return list(argv[:i]) + inner[0], inner[1] + list(argv[i + 1:])
    return None


def _num(tok):
    return float(tok) if tok is not None and _NUM_RE.match(tok) else None


def smi_interval(args):
    """nvidia-smi arguments -> (looping, interval seconds or None).

    ``-l N``/``--loop=N``/``--loop N`` seconds; ``-lms N``/``--loop-ms=N`` milliseconds;
    ``dmon``/``pmon`` loop every ``-d N`` seconds (default 1). A one-shot query gives (False, None).
    """
    args = list(args)
    if args and args[0] in ("dmon", "pmon"):
        interval = 1.0
        for i, tok in enumerate(args):
            if tok == "-d" and i + 1 < len(args) and _num(args[i + 1]) is not None:
                interval = _num(args[i + 1])
        return True, interval
    looping, interval = False, None
    for i, tok in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else None
        for names, scale in ((("-lms", "--loop-ms"), 1000.0), (("-l", "--loop"), 1.0)):
            value = None
            if tok in names:
                value = nxt
            else:
                for name in names:
                    if tok.startswith(name + "="):
                        value = tok[len(name) + 1:]
            if tok in names or value is not None:
                looping = True
                n = _num(value)
                interval = None if n is None else n / scale
                break
    return looping, interval


def watch_interval(wrapper):
    """``watch -n N`` / ``--interval=N`` / ``-nN`` -> seconds (watch's default 2), else None."""
    if not wrapper or "watch" not in [_base(t) for t in wrapper]:
        return None
    start = [_base(t) for t in wrapper].index("watch")
    toks = wrapper[start + 1:]
    interval = 2.0
    for i, tok in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if tok in ("-n", "--interval") and _num(nxt) is not None:
            interval = _num(nxt)
        elif tok.startswith("--interval=") and _num(tok[11:]) is not None:
            interval = _num(tok[11:])
        elif tok.startswith("-n") and len(tok) > 2 and _num(tok[2:]) is not None:
            interval = _num(tok[2:])
    return interval


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
    if argv and _base(argv[0]) in SHELLS and "-c" in argv[1:]:
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


# ---------------------------------------------------------------------------------------------
# journal
# ---------------------------------------------------------------------------------------------
_GREP_UNSUPPORTED = ("pattern matching not supported", "compiled without pattern matching",
                     "unrecognized option", "invalid option", "unknown option")
_PERMISSION = ("insufficient permissions", "permission denied", "access denied")
_NO_JOURNAL = ("no journal files were found",)


def journal_args(pattern, since=None, grep=True):
    args = ["journalctl", "--no-pager", "-o", "short-iso"]
    if since:
        args += ["--since", since]
    if grep:
        args += ["-g", pattern]
    return args


def grep_unsupported(rc, out, err):
    if rc in (0, None):
        return False
    text = ((err or "") + "\n" + (out or "")).lower()
    return any(s in text for s in _GREP_UNSUPPORTED)


# Ansible logs every module invocation (with its arguments) to the journal as ``ansible-<module>[pid]``;
# those lines carry the search pattern itself and are not events.
_ANSIBLE_INVOCATION = re.compile(r"\sansible-[\w.]+\[\d+\]:\s")


def journal_lines(text):
    """Entries of journalctl output; ``-- No entries --``, ``-- Boot ... --`` markers and Ansible's own
    module-invocation lines dropped."""
    return [line for line in (text or "").splitlines()
            if line.strip() and not line.startswith("-- ") and not _ANSIBLE_INVOCATION.search(line)]


def pattern_matcher(pattern):
    """A predicate like ``journalctl -g``: regex, case-insensitive when the pattern is all lowercase."""
    flags = 0 if any(c.isupper() for c in pattern) else re.IGNORECASE
    try:
        rx = re.compile(pattern, flags)
    except re.error:
        rx = re.compile(re.escape(pattern), flags)
    return rx.search


def gather_journal(run, pattern, since=None, max_lines=MAX_EVENT_LINES):
    """-> {readable, method, count, lines (last ``max_lines``), truncated, note, pattern, since}."""
    res = {"readable": False, "method": "grep", "count": 0, "lines": [], "truncated": False,
           "note": None, "pattern": pattern, "since": since}
    rc, out, err = run(journal_args(pattern, since, grep=True))
    if rc is None:
        res["note"] = "journalctl: not found"
        return res
    if grep_unsupported(rc, out, err):
        res["method"] = "python"
        rc, out, err = run(journal_args(pattern, since, grep=False))
        match = pattern_matcher(pattern)
        lines = [line for line in journal_lines(out) if match(line)]
    else:
        lines = journal_lines(out)
    low = (err or "").lower()
    if any(s in low for s in _PERMISSION + _NO_JOURNAL) and not lines:
        res["note"] = _tail(err)
        return res
    if rc not in (0, 1) or (rc == 1 and _tail(err)):
        # rc 1 with nothing on stderr is "no match" for journalctl -g
        res["note"] = "journalctl exited %s: %s" % (rc, _tail(err or out))
        if not lines:
            return res
    if "not seeing messages from other users" in low:
        res["note"] = "partial journal: " + _tail(err, 200)
    res["readable"] = True
    res["count"] = len(lines)
    res["truncated"] = len(lines) > max_lines
    res["lines"] = lines[-max_lines:] if max_lines else lines
    return res


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


COMMAND_TIMEOUT = 60      # seconds any probe command may take (docker, journalctl, systemctl, nvidia-smi)


def make_runner(module, timeout=COMMAND_TIMEOUT):
    """``run(args) -> (rc, out, err)`` over ``module.run_command``; rc is None when the executable
    does not exist (the read-only probes of contention_report and clock_lock_status share it).
    Each command runs under coreutils ``timeout`` where it exists: a probe that hangs (a docker
    daemon that stops answering) ends with rc 124 and its own name in the error."""
    import shutil
    tool = shutil.which("timeout") if timeout else None

    def run(args):
        args = list(args)
        if tool and (os.path.exists(args[0]) or shutil.which(args[0])):
            bounded = [tool, "--kill-after=10", "%ds" % int(timeout)] + args
        else:
            bounded = args
        try:
            rc, out, err = module.run_command(bounded, expand_user_and_vars=False, handle_exceptions=False)
            if bounded is not args and rc in (124, 137):
                return rc, out, "%s: no answer within %d s (killed)" % (args[0], timeout)
            return rc, out, err
        except (IOError, OSError) as exc:
            return None, "", "%s: %s" % (args[0], exc)
    return run
