# -*- coding: utf-8 -*-
"""The stand-in commands of the launch sandbox (``module_utils/launch_sandbox.py``), as text.

The sandbox runs the launcher with a ``PATH`` holding only the names below, so every external
command the launcher runs by name is one of:

* :data:`ALLOWED`: harmless tools (text filters, queries) linked to the real binary;
* :data:`GUARDED`: tools that write files; they run for real only when every path they would write
  lies inside the sandbox, otherwise the call is recorded and not run (exit 0);
* :data:`RUNNERS`: tools that run another command (``env``, ``timeout``, ``xargs``...); they run
  for real (the command they start is found on the same stub ``PATH``) unless an argument names a
  program outside the sandbox by absolute path, which stops the evaluation;
* :data:`ANSWERED`: stand-ins that answer what ``serve`` waits on (``docker``, ``ssh``, ``curl``,
  ``nvidia-smi``, ``sleep``) and record every call;
* anything else: bash's ``command_not_found_handle`` records it (``unstubbed``) and returns 0.

:data:`BASH_ENV` is read by every bash the sandbox starts (the launcher and each worker command
string): it keeps ``PATH`` fixed, shadows the ``kill`` builtin, and a ``DEBUG`` trap stops the whole
evaluation before a command is run by an absolute path outside the sandbox (a literal path, or the
value of a ``$NAME`` first word). Standard library only.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

ALLOWED = (
    "awk", "gawk", "mawk", "base64", "basename", "bash", "cat", "cmp", "column", "comm", "cut", "date",
    "df", "diff", "dirname", "du", "echo", "egrep", "expr", "false", "fgrep", "fold", "free", "getconf",
    "grep", "head", "id", "jq", "ls", "md5sum", "nl", "nproc", "numfmt", "od", "paste", "printf", "ps",
    "readlink", "realpath", "rev", "seq", "sh", "sha256sum", "sort", "stat", "tac", "tail", "test", "tr",
    "true", "uname", "uniq", "wc", "whoami", "getent",
)
GUARDED = ("chmod", "chown", "cp", "install", "ln", "mkdir", "mktemp", "mv", "rm", "rmdir", "sed", "tee",
           "touch", "truncate", "find")
RUNNERS = ("env", "nice", "nohup", "setsid", "stdbuf", "timeout", "xargs")
ANSWERED = ("docker", "ssh", "scp", "rsync", "sudo", "curl", "wget", "nvidia-smi", "sleep", "hostname", "ip",
            "python", "python3", "systemctl", "exportfs", "showmount", "mount", "umount", "ping", "nc",
            "logger", "flock", "git", "make", "ibdev2netdev", "ibstat", "nmcli", "ethtool", "lsof", "podman",
            "__unknown", "__record")

BASH_ENV = r'''# launch sandbox: read by every bash it starts (BASH_ENV)
readonly PATH
__sbx_root=@ROOT@
__sbx_refuse() {
  ( set -C; printf '%s\n' "$1" >"$__sbx_root/violation" ) 2>/dev/null
  builtin kill -TERM 0
}
__sbx_check() {
  local w=${BASH_COMMAND#"${BASH_COMMAND%%[![:space:]]*}"}
  w=${w%%[[:space:]]*}
  case $w in
    exec | command | builtin | time)
      w=${BASH_COMMAND#*"$w"}; w=${w#"${w%%[![:space:]]*}"}; w=${w%%[[:space:]]*} ;;
  esac
  w=${w//\"/}; w=${w//\'/}
  case $w in
    '$'*)
      local n=${w#\$}; n=${n#\{}; n=${n%\}}
      case $n in '' | [0-9]* | *[!A-Za-z0-9_]*) return 0 ;; esac
      w=${!n-} ;;
  esac
  case $w in
    */*)
      [[ $w == /* ]] || w=$PWD/$w
      case $w in
        "$__sbx_root"/*) ;;
        *) __sbx_refuse "the launcher runs $w by absolute path ($BASH_COMMAND); the sandbox cannot stand in for it" ;;
      esac ;;
  esac
  return 0
}
kill() { "$__sbx_root/bin/__record" kill "$@"; }
command_not_found_handle() { "$__sbx_root/bin/__unknown" "$@"; }
set -T
trap __sbx_check DEBUG
'''

STUB = r'''# launch sandbox stand-in (one program for every stubbed name; the name is argv[0])
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(HERE)
with open(os.path.join(ROOT, "config.json")) as _fh:
    CONF = json.load(_fh)
NAME = os.path.basename(sys.argv[0])
ARGS = sys.argv[1:]
HOST = os.environ.get("DSV41_SBX_HOST") or CONF["head"]


def violation(message):
    try:
        fd = os.open(os.path.join(ROOT, "violation"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, message.encode("utf-8", "replace") + b"\n")
        os.close(fd)
    except OSError:
        pass
    os.killpg(os.getpgrp(), signal.SIGTERM)
    sys.exit(99)


def record(kind, name=NAME, args=ARGS, extra=None):
    calls = os.path.join(ROOT, "calls")
    if len(os.listdir(calls)) >= CONF["max_calls"]:
        violation("more than %d external commands: the launcher loops (last: %s %s)"
                  % (CONF["max_calls"], name, " ".join(args)[:200]))
    entry = {"t": time.time_ns(), "pid": os.getpid(), "kind": kind, "name": name, "argv": list(args),
             "host": HOST, "cwd": os.getcwd()}
    entry.update(extra or {})
    path = os.path.join(calls, "%020d-%d.json" % (entry["t"], os.getpid()))
    with open(path, "w") as fh:
        json.dump(entry, fh)


def inside(path):
    if path in ("/dev/null", "/dev/stdout", "/dev/stderr", "-"):
        return True
    full = os.path.realpath(os.path.join(os.getcwd(), path))
    return full == ROOT or full.startswith(ROOT + os.sep)


def run_real(name=NAME, args=ARGS):
    os.execv(CONF["real"][name], [name] + list(args))


def state():
    path = os.path.join(ROOT, "docker-state.json")
    try:
        with open(path) as fh:
            return json.load(fh), path
    except (IOError, OSError, ValueError):
        return {}, path


def save(data, path):
    with open(path, "w") as fh:
        json.dump(data, fh)


def fmt(template, ctn):
    values = {"Names": ctn["name"], "Name": "/" + ctn["name"], "ID": ctn["id"][:12], "Id": ctn["id"],
              "Image": ctn["image"], "Status": "Up 1 second", "State": "running", "State.Status": "running",
              "State.Running": "true", "Config.Image": ctn["image"]}
    return re.sub(r"\{\{\s*\.([A-Za-z.]+)\s*\}\}", lambda m: values.get(m.group(1), ""), template)


def opt_value(args, *names):
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(n + "="):
                return a[len(n) + 1:]
    return None


def docker():
    sub = next((a for a in ARGS if not a.startswith("-")), "")
    rest = ARGS[ARGS.index(sub) + 1:] if sub else []
    files = {}
    if sub in ("run", "create"):
        for i, a in enumerate(rest):
            path = rest[i + 1] if a == "--env-file" and i + 1 < len(rest) else (
                a[len("--env-file="):] if a.startswith("--env-file=") else None)
            if path:
                try:
                    with open(path) as fh:
                        files[path] = fh.read()
                except (IOError, OSError) as exc:
                    files[path] = None
                    sys.stderr.write("docker: open %s: %s\n" % (path, exc))
        record("docker-run", extra={"env": dict(os.environ), "files": files})
    else:
        record("stub")
    data, path = state()
    mine = data.setdefault(HOST, {})
    if sub in ("run", "create"):
        name = opt_value(rest, "--name") or "ctn%d" % len(mine)
        image = CONF.get("image_hint") or ""
        seq = "%s/%s/%d" % (HOST, name, len(os.listdir(os.path.join(ROOT, "calls"))))
        ctn = {"name": name, "id": hashlib.sha256(seq.encode("utf-8")).hexdigest(), "image": image,
               "ports": [v.split("=", 1)[1] for v in rest if re.match(r"^[A-Z_]*PORT=[0-9]+$", v)]
               + [rest[i + 1] for i, v in enumerate(rest[:-1]) if v == "--port"]}
        mine[name] = ctn
        save(data, path)
        if "-d" in rest or "--detach" in rest or any(re.match(r"^-[a-z]*d[a-z]*$", a) for a in rest):
            print(ctn["id"])
        return 0
    if sub in ("rm", "stop", "kill"):
        for a in rest:
            if not a.startswith("-"):
                mine.pop(a, None)
                print(a)
        save(data, path)
        return 0
    if sub == "logs":
        name = [a for a in rest if not a.startswith("-")][-1:]
        ports = list(CONF["ports"]) + (mine.get(name[0], {}).get("ports", []) if name else [])
        for p in sorted(set(ports)):
            print("Ready: API on port %s" % p)
        return 0
    if sub == "ps":
        template = opt_value(rest, "--format")
        if template is None and ("-q" in rest or "--quiet" in rest):
            template = "{{.ID}}"
        if template is None:
            print("CONTAINER ID   IMAGE   COMMAND   CREATED   STATUS   PORTS   NAMES")
            template = "{{.ID}}   {{.Image}}   \"run\"   1 second ago   Up 1 second      {{.Names}}"
        for ctn in mine.values():
            print(fmt(template, ctn))
        return 0
    if sub == "inspect":
        names = [a for a in rest if not a.startswith("-") and a != opt_value(rest, "--format", "-f")]
        template = opt_value(rest, "--format", "-f")
        status = 0
        for n in names:
            if n in mine:
                print(fmt(template, mine[n]) if template else json.dumps([{"Name": "/" + n, "State": {
                    "Status": "running", "Running": True}}]))
            elif template is None and ":" in n:
                print("[{}]")
            else:
                sys.stderr.write("Error: No such object: %s\n" % n)
                status = 1
        return status
    if sub == "image" or sub == "images":
        print("sha256:" + "0" * 64 if "-q" in rest else "[{}]")
        return 0
    if sub in ("version", "info"):
        print("Server Version: 28.0.0" if sub == "info" else "Docker version 28.0.0, build sandbox")
        return 0
    return 0


SSH_VALUE_OPTS = set("BbcDEeFIiJLlmOopQRSWw")


def ssh():
    i, user = 0, None
    while i < len(ARGS):
        a = ARGS[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        if a[-1] in SSH_VALUE_OPTS and len(a) == 2:
            if a == "-l" and i + 1 < len(ARGS):
                user = ARGS[i + 1]
            i += 2
            continue
        i += 1
    target = ARGS[i] if i < len(ARGS) else ""
    command = " ".join(ARGS[i + 1:])
    if "@" in target:
        user, target = target.split("@", 1)
    record("ssh", extra={"target": target, "user": user, "command": command})
    if not command or "-O" in ARGS[:i]:
        return 0
    env = dict(os.environ)
    env["DSV41_SBX_HOST"] = target
    env["HOME"] = os.path.join(ROOT, "remote", target or "worker")
    env["DSV41_SBX_REMOTE_USER"] = user or ""
    os.makedirs(env["HOME"], exist_ok=True)
    return subprocess.call([CONF["real"]["bash"], "-c", command], env=env, cwd=env["HOME"])


def curl():
    record("stub")
    out = opt_value(ARGS, "-o", "--output")
    body = "{}"
    if out and out != "-" and inside(out):
        with open(out, "w") as fh:
            fh.write(body)
    elif not out:
        sys.stdout.write(body)
    wfmt = opt_value(ARGS, "-w", "--write-out")
    if wfmt:
        sys.stdout.write(wfmt.replace("%{http_code}", "200").replace("%{response_code}", "200")
                         .replace("\\n", "\n"))
    return 0


def nvidia_smi():
    record("stub")
    query = opt_value(ARGS, "--query-gpu")
    if query:
        vals = {"name": "NVIDIA GB10", "driver_version": "580.95.05", "count": "1", "index": "0"}
        print(", ".join(vals.get(f.strip(), "[N/A]") for f in query.split(",")))
    elif "-L" in ARGS:
        print("GPU 0: NVIDIA GB10 (UUID: GPU-00000000-0000-0000-0000-000000000000)")
    return 0


def guarded():
    opts_done, paths, in_place = False, [], False
    for a in ARGS:
        if not opts_done and a == "--":
            opts_done = True
        elif not opts_done and a.startswith("-"):
            in_place = in_place or a.startswith("-i") or a.startswith("--in-place")
        else:
            paths.append(a)
    if NAME == "find":
        risky = {"-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls"}
        if not risky.intersection(ARGS):
            return run_real()
        paths = [a for a in ARGS if a.startswith("/") or a.startswith(".")][:1] + ["/"]
    elif NAME == "sed":
        if not in_place:
            return run_real()
        paths = paths[1:]
    elif NAME in ("cp", "ln", "install"):
        paths = paths[-1:]
    elif NAME == "mktemp":
        where = opt_value(ARGS, "-p", "--tmpdir")
        paths = ([where] if where else []) + [p for p in paths if "/" in p]
    if all(inside(p) for p in paths):
        return run_real()
    record("not-run")
    return 0


def runner():
    for a in ARGS:
        if a.startswith("/") and os.path.isfile(a) and os.access(a, os.X_OK) and not inside(a):
            violation("the launcher runs %s %s: %s is outside the sandbox and cannot be stood in for"
                      % (NAME, " ".join(ARGS)[:200], a))
    return run_real()


def main():
    if NAME in CONF["guarded"]:
        return guarded()
    if NAME in CONF["runners"]:
        return runner()
    if NAME == "__unknown":
        record("unstubbed", name=ARGS[0] if ARGS else "", args=ARGS[1:])
        return 0
    if NAME == "__record":
        record("stub", name=ARGS[0] if ARGS else "", args=ARGS[1:])
        return 0
    if NAME == "docker" or NAME == "podman":
        return docker()
    if NAME == "ssh":
        return ssh()
    if NAME in ("curl", "wget"):
        return curl()
    if NAME == "nvidia-smi":
        return nvidia_smi()
    if NAME == "hostname":
        if all(a.startswith("-") for a in ARGS) and NAME in CONF["real"]:
            record("stub")
            print(CONF["head_hostname"] if HOST == CONF["head"] else HOST)
            return 0
    if NAME == "ip" and not set(ARGS) & {"add", "del", "delete", "set", "flush", "change", "replace", "append",
                                         "up", "down", "exec", "netns"} and NAME in CONF["real"]:
        record("stub")
        return run_real()
    record("stub")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
