# -*- coding: utf-8 -*-
"""The stand-in commands of the launch sandbox (``module_utils/launcher/sandbox.py``), as text.

The sandbox is real isolation (bubblewrap); the stand-ins only record and answer. Every name below is
first on the sandbox's ``PATH``; the :data:`ANSWERED` ones are also mounted over the real programs, so a
login shell, ``env -i`` or an absolute ``/usr/bin/docker`` reaches them too:

* :data:`GUARDED`: tools that write files; they run for real when every path they would write lies in
  a place the sandbox can write (its scratch places, the checkout's copy), otherwise the call is
  recorded and not run (exit 0), as the launcher would go on on the head;
* :data:`ANSWERED`: stand-ins that answer what ``serve`` waits on (``docker``, ``ssh``, ``curl``,
  ``nvidia-smi``, ``sleep``...) and record every call; ``docker`` records what changes state and answers
  its read-only queries from the head's daemon through the broker (``module_utils/launcher/broker.py``);
  ``ssh`` runs the command string as sshd does (the worker user's shell ``-c``, in the worker user's home
  and a fresh environment), and every command started under it, whatever its environment, is recorded
  as that worker's (``hostname`` there answers the worker's name);
* anything else runs for real (interpreters included); an unknown command is recorded by bash's
  ``command_not_found_handle`` (``unstubbed``) and returns 0.

Standard library only.
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.launcher.docker import DOCKER
from ansible.module_utils.launcher.docker_query import DOCKER_QUERIES
from ansible.module_utils.launcher.docker_format import FORMAT

__metaclass__ = type

INSIDE = "/run/dsv41-launch"         # where the sandbox's own directory appears inside it
GUARDED = ("chmod", "chown", "cp", "install", "ln", "mkdir", "mktemp", "mv", "rm", "rmdir", "sed", "tee",
           "touch", "truncate", "find")
# Interpreters run for real (a launcher's own helper drives ssh); on the sandbox's PATH they are recorded
# first, so a helper aimed at a worker is named when that worker never starts. Never mounted over the real
# program (the stand-in itself runs on it).
RECORDED = ("python3", "python")
ANSWERED = ("docker", "ssh", "scp", "rsync", "sudo", "curl", "wget", "nvidia-smi", "sleep", "hostname", "ip",
            "systemctl", "exportfs", "showmount", "mount", "umount", "ping", "nc", "logger", "flock", "git",
            "ibdev2netdev", "ibstat", "nmcli", "ethtool", "lsof", "podman", "hf", "huggingface-cli", "rpcinfo",
            "__unknown", "__record")

BASH_ENV = r'''# launch sandbox: read by every bash it starts (BASH_ENV); unknown commands are recorded
command_not_found_handle() { "@INSIDE@/bin/__unknown" "$@"; }
'''

STUB_HEAD = r'''# launch sandbox stand-in (one program for every stubbed name; the name is argv[0])
import json
import os
import re
import signal
import sys
import time


class _OnFirstUse(object):
    """A module imported where it is first used. Most stand-in calls (``docker rm``, ``date``, a recorded
    ``mkdir``) never ask the broker, start a process, hash or match a glob, and a call's cost is mostly its
    imports: a launcher's serve path makes dozens of calls, on a head that serves."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        module = __import__(self._name)
        globals()[self._name] = module
        return getattr(module, attr)


fnmatch = _OnFirstUse("fnmatch")
hashlib = _OnFirstUse("hashlib")
socket = _OnFirstUse("socket")
subprocess = _OnFirstUse("subprocess")

ROOT = "@INSIDE@"
with open(os.path.join(ROOT, "config.json")) as _fh:
    CONF = json.load(_fh)
NAME = os.path.basename(sys.argv[0])
ARGS = sys.argv[1:]


def _pid():
    """This process's pid as the sandbox's /proc numbers it (a fresh /proc or the host's, read-only)."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return os.getpid()


def _host():
    """The host a command runs on: the ssh stand-in marks its own pid with the worker it stands for, and a
    command started under it (however its environment was cleared) finds the mark among its ancestors."""
    pid = _pid()
    for _ in range(128):
        try:
            with open(os.path.join(ROOT, "hosts", str(pid))) as fh:
                return fh.read().strip() or CONF["head"]
        except (IOError, OSError):
            pass
        try:
            with open("/proc/%d/stat" % pid) as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (IOError, OSError, ValueError, IndexError):
            break
        if pid <= 1:
            break
    return CONF["head"]


HOST = _host()


def violation(message, kind="violation"):
    try:
        fd = os.open(os.path.join(ROOT, kind), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
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
    """True when the sandbox can write ``path``: its nearest existing directory lies on a writable mount here
    (the sandbox's scratch places, the checkout's copy, a worker's own home), read from the mount itself."""
    if path in ("/dev/null", "/dev/stdout", "/dev/stderr", "-"):
        return True
    full = os.path.realpath(os.path.join(os.getcwd(), path))
    while full != "/" and not os.path.isdir(full):
        full = os.path.dirname(full)
    try:
        return not os.statvfs(full).f_flag & os.ST_RDONLY and os.access(full, os.W_OK)
    except OSError:
        return False


def run_real(name=NAME, args=ARGS):
    os.execv(CONF["real"][name], [name] + list(args))


def opt_value(args, *names):
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(n + "="):
                return a[len(n) + 1:]
    return None


def stop(message):
    """A question the sandbox cannot answer faithfully: the evaluation stops, naming it."""
    violation(message, "unanswered")


def ask(kind, args):
    """``(status, stdout, detail)`` from the broker outside the sandbox (``launch_broker.py``)."""
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(os.path.join(ROOT, "query.sock"))
        s.sendall(json.dumps({"kind": kind, "args": list(args)}).encode("utf-8"))
        s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        status, out, detail = json.loads(data.decode("utf-8"))
    except (OSError, ValueError) as exc:
        return "down", "", "the sandbox's question channel failed: %s" % exc
    if status == "refused":
        stop(detail)
    return status, out, detail


'''
STUB_TAIL = r'''
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
    return remote(target, user, command)


def remote(target, user, command):
    """Run a worker's command string as sshd does: the user's shell ``-c``, in their home, with sshd's fresh
    environment (never the head's). Everything started under it is recorded as the worker's (:func:`_host`)."""
    user = user or CONF["user"]
    try:
        import pwd
        entry = pwd.getpwnam(user)
        home, shell = entry.pw_dir, entry.pw_shell or "/bin/sh"
    except (KeyError, ImportError):
        home, shell = ("/home/" + user if user != "root" else "/root"), CONF["bash"]
    if user == CONF["user"]:
        home = CONF["home"]              # the head's own user: the same home path on every node
    if os.path.basename(shell) in ("nologin", "false", ""):
        shell = CONF["bash"]
    with open(os.path.join(ROOT, "hosts", str(_pid())), "w") as fh:
        fh.write(target or "worker")
    if not os.path.isdir(home) and os.path.dirname(home) == "/home":
        try:
            os.makedirs(home, 0o755)     # the worker user's own home, in the sandbox's empty /home
            skeleton = os.path.join(ROOT, "homes", user)
            for base, dirs, files in os.walk(skeleton):  # what was read there beforehand (names only)
                rel = os.path.relpath(base, skeleton)
                for d in dirs:
                    os.makedirs(os.path.join(home, rel, d), exist_ok=True)
                for f in files:
                    open(os.path.join(home, rel, f), "a").close()
        except OSError:
            pass
    env = {"HOME": home, "USER": user, "LOGNAME": user, "SHELL": shell, "LANG": "C.UTF-8",
           "PATH": os.path.join(ROOT, "bin") + ":/usr/local/bin:/usr/bin:/bin:/usr/games",
           "BASH_ENV": os.path.join(ROOT, "lib", "bash_env.sh"), "SSH_CONNECTION": "head 22 worker 22"}
    argv = [shell, "-c", command]
    if os.path.isdir(home) and not inside(home) and CONF.get("proc_fresh"):
        argv = own_home(home) + argv
    return subprocess.call(argv, env=env, cwd=home if os.path.isdir(home) else "/")


def own_home(home):
    """A worker whose home is a read-only path here (the head user's, when the fleet's nodes share a user):
    a nested mount namespace gives it a writable home of its own, holding the head's entries read-only, as
    the same user's home on another node would (writes gone with the sandbox). Needs a fresh /proc (a
    nested bwrap reads its own namespaces there); without one the worker keeps the read-only home."""
    argv = [CONF["bwrap"], "--dev-bind", "/", "/", "--tmpfs", home]
    for name in sorted(os.listdir(home)):
        path = os.path.join(home, name)
        if os.path.isdir(path) and not os.path.islink(path):
            argv += ["--ro-bind", path, path]
        elif os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isfile(path):
            argv += ["--ro-bind", path, path]
    return argv + ["--die-with-parent", "--chdir", home, "--"]


def rpcinfo():
    """The NFS readiness check (``rpcinfo -t HOST nfs 4``): answered yes when the sandbox started an NFS
    exporter container (its name or image says nfs) on that host, as the real server would then answer."""
    record("stub")
    words = [a for a in ARGS if not a.startswith("-")]
    target = words[0] if words else "localhost"
    host = HOST if target in ("127.0.0.1", "localhost", "::1", CONF["head_hostname"]) else target
    try:
        with open(os.path.join(ROOT, "docker-state.json")) as fh:
            state = json.load(fh)
    except (IOError, OSError, ValueError):
        state = {}
    ctns = ((state.get(host) or {}).get("ctn") or {}).values()
    if any("nfs" in (c.get("name", "") + " " + c.get("image", "")).lower() and c.get("state") == "running"
           for c in ctns):
        return 0
    sys.stderr.write("rpcinfo: RPC: Program not registered\n")
    return 1


def hostname():
    record("stub")
    if ARGS and set(ARGS) <= {"-I", "-i", "-A", "--all-ip-addresses", "--ip-address", "--all-fqdns"}:
        status, out, detail = ask("hostname", ARGS)
        sys.stdout.write(out)
        if status != "ok":
            sys.stderr.write("hostname: %s\n" % detail)
        return 0 if status == "ok" else 1
    name = CONF["head_hostname"] if HOST == CONF["head"] else HOST
    print(name.split(".")[0] if "-s" in ARGS or "--short" in ARGS else name)
    return 0


def ip():
    record("stub")
    status, out, detail = ask("ip", ARGS)
    sys.stdout.write(out)
    if status != "ok":
        sys.stderr.write("ip: %s\n" % detail)
    return 0 if status == "ok" else 1


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


def main():
    if NAME in CONF["guarded"]:
        return guarded()
    if NAME in CONF["recorded"]:
        record("stub")
        return run_real()
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
        return hostname()
    if NAME == "ip":
        return ip()
    if NAME == "rpcinfo":
        return rpcinfo()
    record("stub")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

STUB = STUB_HEAD + FORMAT + DOCKER + DOCKER_QUERIES + STUB_TAIL
