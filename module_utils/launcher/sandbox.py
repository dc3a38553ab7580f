# -*- coding: utf-8 -*-
"""Run the launcher's own code (``start.sh serve``) inside real isolation and record every external command.

Used by ``launcher_effective``, ``launcher_settings`` and ``launcher_forward`` (through
``module_utils/launcher/effective.py``, which turns the record into the effective launch). Standard library
only: it runs on the head, where the launcher's checkout is.

The isolation is bubblewrap (``bwrap``, Debian/Ubuntu package ``bubblewrap``; the ``launch_sandbox`` role
installs it): new user, mount, pid, network, ipc and uts namespaces, so whatever the launcher or a value
in its ``.env`` runs (``sh -c``, ``bash -lc``, ``env -i``, ``/usr/bin/docker`` by absolute path,
redirections) can write only to places that vanish with it, reaches no network and no docker socket, and
leaves no process behind (the pid namespace dies with the evaluation). Inside:

* the real root, read-only; the head user's home read-only at its own path (``$HOME/NewModels/...``,
  ``~/.ssh/*.pub`` and ``~/nccl-*`` exist as on the head); the checkout replaced by a scratch copy at
  its own path (the launcher may write logs or copy ``.env.example``), with a proposed ``.env`` or
  launcher written into the copy; empty ``/tmp``, ``/var/tmp``, ``/run`` and ``/dev/shm``;
* the head user's name and home, a ``PATH`` of the stand-ins
  (``module_utils/launcher/stubs.py``) first, then the system's; the stand-ins are also mounted over the
  real programs they stand for (``/usr/bin/docker``, ``/usr/bin/ssh``...), so a login shell that resets
  ``PATH`` or ``env -i`` still reaches them. They record: ``docker`` changes are recorded, never run, and
  its read-only queries are answered by the head's daemon through the broker
  (``module_utils/launcher/broker.py``); ``ssh`` runs the command string as sshd would, in the worker
  user's home and a fresh environment, and what it starts is recorded as the worker's; ``curl``, ``sleep`` and
  the rest answer what ``serve`` waits on. Interpreters (``python3``) run for real, so a launcher's own
  helper that drives ssh runs as it does on the head;
* writers (``mkdir``, ``cp``, ``sed -i``...) run for real where the sandbox can write and are recorded,
  not run, elsewhere (the launcher goes on as it would on the head);
* bounded: a wall-clock ``timeout`` and a maximum number of external commands (a loop).

The scratch directory is removed afterwards. Limits, said plainly: a redirection (``> $HOME/x``) to a
place outside the sandbox's writable ones fails as on a read-only disk; worker-side read-only questions
(``ip addr``, ``hostname -I`` in a worker command) are answered by the head. A worker's home is what was
read there beforehand (``worker_homes``: names only, empty files), or, for the head's own user, the head's
home; anything else a worker command reads is the head's.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import pwd
import py_compile
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile

from ansible.module_utils.base.process_wait import pid_alive, wait_gone
from ansible.module_utils.launcher.broker import Broker
from ansible.module_utils.launcher.stubs import ANSWERED, BASH_ENV, GUARDED, INSIDE, RECORDED, STUB

__metaclass__ = type

DEFAULT_TIMEOUT = 60
DEFAULT_MAX_CALLS = 2000
NAMESPACE_WAIT = 10                       # s: a killed sandbox's pid namespace empties in milliseconds
MAX_FILE_BYTES = 8 * 1024 * 1024          # larger files (images, weights, logs) are not copied
MAX_TREE_BYTES = 256 * 1024 * 1024
SKIP_DIRS = frozenset([".git", "logs", "__pycache__", ".venv", "node_modules"])
SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STUB_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin", "/snap/bin")
SCRATCH = ("/tmp", "/var/tmp", "/run", "/dev/shm")
HOMES = "/home"                           # other users' homes: read-only; a worker user's missing one is made
# Devices launchers test for (``test -d /dev/infiniband``, ``ls /dev/nvidia*``) that bwrap's fresh /dev lacks:
# shown as /dev/null (a character device that reaches nothing), never the real device.
DEVICE_DIRS = ("/dev/infiniband",)
DEVICE_PREFIXES = ("/dev/nvidia",)
PROC_FRESH = {}                           # bwrap path -> False when this host cannot mount a fresh /proc
BWRAP_HINT = ("install the package bubblewrap (the launch_sandbox role does); on Ubuntu 24.04 the packaged "
              "bwrap carries the AppArmor profile that allows its user namespaces")


_ASSIGN = re.compile(r"""^\s*(?:export\s+|readonly\s+|declare\s+-\w+\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$""")
_SOURCE = re.compile(r"""^\s*(?:set\s+-a\s*;\s*)?(?:source|\.)\s+(\S+)""")
_DIR_VAR = re.compile(r"""^["']?\$\{?[A-Za-z_][A-Za-z0-9_]*\}?/([A-Za-z0-9_.-]+)["']?$""")


def config_name(launcher):
    """The name of the settings file the launcher reads from its own directory (``source "$ROOT/fleet.env"``,
    ``ENV_FILE="${ENV_FILE:-$ROOT/.env}"`` then ``source "$ENV_FILE"``), read from the script itself;
    ``.env`` when it names none or several."""
    try:
        with open(launcher) as fh:
            lines = fh.read().splitlines()
    except (IOError, OSError):
        return ".env"
    values = {}
    found = []
    for line in lines:
        m = _ASSIGN.match(line)
        if m:
            value = m.group(2).strip().strip("\"'")
            d = re.match(r"^\$\{%s:-(.*)\}$" % re.escape(m.group(1)), value)
            values[m.group(1)] = d.group(1) if d else value
        m = _SOURCE.match(line)
        if not m:
            continue
        target = m.group(1).strip("\"'")
        v = re.match(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$", target)
        if v:
            target = values.get(v.group(1), "")
        d = _DIR_VAR.match(target)
        if d and d.group(1) not in found and not d.group(1).endswith(".sh"):
            found.append(d.group(1))
    return found[0] if len(found) == 1 else ".env"


class LaunchError(Exception):
    """The launcher could not be evaluated (missing, no isolation, loop, timeout, failure)."""

    def __init__(self, message, record=None):
        Exception.__init__(self, message)
        self.record = record


def _which(name):
    for d in SEARCH_PATH.split(":"):
        if d and os.path.isabs(d):
            p = os.path.join(d, name)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    return None


def _copy_checkout(src, dst):
    """Copy the checkout; returns the files left out (too big, links leaving the checkout)."""
    skipped = []
    total = [0]
    real_src = os.path.realpath(src)

    def ignore(directory, names):
        out = []
        for n in names:
            p = os.path.join(directory, n)
            if n in SKIP_DIRS and os.path.isdir(p):
                out.append(n)
            elif os.path.islink(p):
                target = os.path.realpath(p)
                if not (target == real_src or target.startswith(real_src + os.sep)):
                    out.append(n)
                    skipped.append(os.path.relpath(p, src))
            elif os.path.isfile(p):
                size = os.path.getsize(p)
                if size > MAX_FILE_BYTES:
                    out.append(n)
                    skipped.append(os.path.relpath(p, src))
                else:
                    total[0] += size
                    if total[0] > MAX_TREE_BYTES:
                        raise LaunchError("%s: the checkout holds more than %d MiB of small files; the sandbox "
                                          "copies at most that" % (src, MAX_TREE_BYTES // 2 ** 20))
            elif not os.path.isdir(p):
                out.append(n)          # sockets, FIFOs, devices
        return out

    shutil.copytree(src, dst, symlinks=True, ignore=ignore)
    return sorted(skipped)


def _read_child_pid(fd):
    """The ``child-pid`` bwrap wrote on its --info-fd (read to its end, then closed), or None."""
    chunks = []
    try:
        while True:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        pid = json.loads(b"".join(chunks).decode("utf-8", "replace")).get("child-pid")
    except (ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 1 else None


def _shebang_flags(path):
    """Options on the script's ``#!`` line (``#!/bin/bash -eu``): bash would apply them when the script is
    run as ``./start.sh``, and not when it is given to bash as a file, so they are passed on."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(256).decode("utf-8", "replace").strip()
    except (IOError, OSError):
        return []
    if not first.startswith("#!"):
        return []
    words = first[2:].split()
    if words and os.path.basename(words[0]) == "env":
        words = words[1:]
    if not words or os.path.basename(words[0]) not in ("bash", "sh"):
        return []
    return [w for w in words[1:] if w.startswith(("-", "+")) and w not in ("-", "--")]


class Sandbox(object):
    """One scratch tree; :meth:`run` evaluates the launcher in it, :meth:`close` removes it."""

    def __init__(self, checkout, home, user, head, head_hostname=None, ports=(8888,), max_calls=DEFAULT_MAX_CALLS,
                 docker_client=None, query_cache=None, worker_homes=None):
        self.checkout = os.path.abspath(checkout)
        self.home = os.path.abspath(home).rstrip("/") or "/"
        self.user = user
        self.head = head
        self.hostname = head_hostname or head
        self.bwrap = _which("bwrap")
        if not self.bwrap:
            raise LaunchError("bwrap is not installed on this host: the launcher is evaluated only inside real "
                              "isolation; %s" % BWRAP_HINT)
        self.bash = _which("bash")
        if not self.bash:
            raise LaunchError("bash is not installed on this host: the launcher cannot be evaluated")
        self.root = os.path.realpath(tempfile.mkdtemp(prefix="dsv41-launch-"))
        os.chmod(self.root, stat.S_IRWXU)
        self.sco = os.path.join(self.root, "co")
        for d in ("bin", "lib", "calls", "hosts"):
            os.mkdir(os.path.join(self.root, d))
        self.skipped = _copy_checkout(self.checkout, self.sco)
        self._skeletons(worker_homes or {})
        self._tools(ports, max_calls)
        self.broker = Broker(os.path.join(self.root, "query.sock"), docker_client, query_cache)

    def _tools(self, ports, max_calls):
        # The stand-ins' code is a module compiled once here (every stand-in call imports the bytecode instead
        # of compiling a thousand lines: most of a call's cost on a busy head); stub.py is its entry point.
        lib = os.path.join(self.root, "lib")
        with open(os.path.join(lib, "dsv41_launch_stub.py"), "w") as fh:
            fh.write(STUB.replace("@INSIDE@", INSIDE))
        py_compile.compile(os.path.join(lib, "dsv41_launch_stub.py"), doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        stub = os.path.join(lib, "stub.py")
        with open(stub, "w") as fh:
            fh.write("#!%s -SE\nimport sys\nsys.path.insert(0, %r)\nimport dsv41_launch_stub\n"
                     "sys.exit(dsv41_launch_stub.main())\n" % (sys.executable, os.path.join(INSIDE, "lib")))
        os.chmod(stub, 0o755)
        real, self.overmounts = {}, []
        for name in GUARDED + RECORDED + ANSWERED:
            if not name.startswith("__"):
                real[name] = _which(name)
            os.symlink(os.path.join(INSIDE, "lib", "stub.py"), os.path.join(self.root, "bin", name))
        self.missing = []
        for name in ANSWERED:           # the real programs too: a login shell or env -i still reaches a stand-in
            found = False
            for d in STUB_DIRS:
                path = os.path.realpath(os.path.join(d, name))     # merged /usr: /bin/x is /usr/bin/x
                if not name.startswith("__") and os.path.isfile(path):
                    found = True
                    if path not in self.overmounts:
                        self.overmounts.append(path)
            if not found and not name.startswith("__"):
                self.missing.append(name)
        self._local_bin()
        config = {"head": self.head, "head_hostname": self.hostname, "ports": [str(p) for p in ports],
                  "max_calls": int(max_calls), "real": dict((k, v) for k, v in real.items() if v),
                  "guarded": list(GUARDED), "recorded": list(RECORDED), "home": self.home, "user": self.user,
                  "bash": self.bash, "bwrap": self.bwrap,
                  "proc_fresh": PROC_FRESH.get(self.bwrap, True)}
        with open(os.path.join(self.root, "config.json"), "w") as fh:
            json.dump(config, fh)
        with open(os.path.join(self.root, "lib", "bash_env.sh"), "w") as fh:
            fh.write(BASH_ENV.replace("@INSIDE@", INSIDE))

    def _skeletons(self, worker_homes):
        """What was read beforehand in each worker user's home ({user: ["NewModels/", "nccl-2.30.7/",
        ".ssh/authorized_keys", ...]}, directories with a trailing slash): a tree of empty directories and
        empty files the ssh stand-in lays out as that user's home, so a worker's own tests
        (``[ -d ~/nccl-2.30.7 ]``) see what the worker has. Paths that leave the home are ignored."""
        base = os.path.join(self.root, "homes")
        os.mkdir(base)
        for user, entries in sorted(worker_homes.items()):
            if not user or "/" in user or user in (".", ".."):
                continue
            top = os.path.join(base, user)
            os.mkdir(top)
            for entry in entries or []:
                rel = os.path.normpath(str(entry).lstrip("/"))
                if rel.startswith("..") or rel == ".":
                    continue
                path = os.path.join(top, rel)
                if str(entry).endswith("/"):
                    os.makedirs(path, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    if not os.path.exists(path):
                        open(path, "w").close()

    def _local_bin(self):
        """A view of ``/usr/local/bin`` that also holds the stand-ins this host lacks (``docker`` on a host
        without it): every usual ``PATH``, a login shell's or bash's default, starts there, so a command
        the head would run is recorded rather than "not found". Its own entries stay, as links to the real
        directory (mounted read-only at ``INSIDE/local-bin``)."""
        self.local_bin = None
        real = "/usr/local/bin"
        if not self.missing or not os.path.isdir(real) or os.path.islink(real):
            return
        view = os.path.join(self.root, "local-bin-view")
        os.mkdir(view)
        stubbed = set(n for n in ANSWERED if not n.startswith("__"))
        for entry in os.listdir(real):
            if entry not in stubbed:
                os.symlink(os.path.join(INSIDE, "local-bin", entry), os.path.join(view, entry))
        for name in stubbed:
            os.symlink(os.path.join(INSIDE, "lib", "stub.py"), os.path.join(view, name))
        self.overmounts = [p for p in self.overmounts if os.path.dirname(p) != real]
        os.mkdir(os.path.join(self.root, "local-bin"))
        self.local_bin = real

    def write_env(self, name, text):
        """Write ``text`` as ``name`` in the scratch copy (a proposed .env or launcher)."""
        path = os.path.join(self.sco, name)
        if os.path.islink(path):
            os.unlink(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)

    def environment(self):
        path = ":".join([os.path.join(INSIDE, "bin"), self.home + "/.local/bin", self.home + "/bin", SEARCH_PATH])
        return {"PATH": path, "HOME": self.home, "USER": self.user, "LOGNAME": self.user, "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8", "TERM": "dumb", "SHELL": self.bash,
                "BASH_ENV": os.path.join(INSIDE, "lib", "bash_env.sh")}

    def bwrap_argv(self, argv, info_fd=None):
        """bwrap's arguments: the order matters (later mounts go over earlier ones). ``info_fd``: where bwrap
        writes the pid of the sandbox's first process (the init of its pid namespace)."""
        # (no --hostname: a container host's seccomp filter refuses sethostname; the hostname stand-in answers
        # the head's name, and ranks are told apart by the ssh stand-in, not by the kernel's hostname)
        args = [self.bwrap, "--unshare-all", "--die-with-parent", "--new-session",
                "--ro-bind", "/", "/", "--dev", "/dev"]
        # A fresh /proc of the sandbox's pid namespace; a host whose /proc has files mounted over it (a
        # container, such as the lab's hosts with their meminfo) refuses a fresh one, so it is shown
        # read-only instead: the pid namespace still ends every process with the evaluation.
        args += ["--proc", "/proc"] if PROC_FRESH.get(self.bwrap, True) else ["--ro-bind", "/proc", "/proc"]
        for place in SCRATCH:
            if os.path.isdir(place) and not os.path.islink(place):
                args += ["--tmpfs", place]
        args += self._device_views()
        if os.path.isdir(HOMES) and not os.path.islink(HOMES):
            # an empty /home where the ssh stand-in makes a worker user's home (sshd's cwd, writable and gone
            # with the sandbox); every home that exists on the head is shown again, read-only
            args += ["--tmpfs", HOMES]
            for name in sorted(os.listdir(HOMES)):
                path = os.path.join(HOMES, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    args += ["--ro-bind", path, path]
        if os.path.isdir(self.home):
            args += ["--ro-bind", self.home, self.home]      # again, when the home lies under a scratch place
        args += ["--bind", self.root, INSIDE, "--bind", self.sco, self.checkout]
        if self.local_bin:
            args += ["--ro-bind", self.local_bin, os.path.join(INSIDE, "local-bin"),
                     "--ro-bind", os.path.join(self.root, "local-bin-view"), self.local_bin]
        for path in self.overmounts:
            args += ["--ro-bind", os.path.join(self.root, "lib", "stub.py"), path]
        if info_fd is not None:
            args += ["--info-fd", str(info_fd)]
        args += ["--chdir", self.checkout, "--"]
        return args + list(argv)

    @staticmethod
    def _device_views(root="/dev"):
        """bwrap arguments showing the head's InfiniBand and GPU device names as /dev/null."""
        args = []
        for d in DEVICE_DIRS:
            path = os.path.join(root, os.path.relpath(d, "/dev"))
            if os.path.isdir(path):
                args += ["--dir", d]
                for name in sorted(os.listdir(path)):
                    args += ["--ro-bind", "/dev/null", os.path.join(d, name)]
        for prefix in DEVICE_PREFIXES:
            base = os.path.basename(prefix)
            try:
                names = os.listdir(root)
            except OSError:
                names = []
            for name in sorted(n for n in names if n.startswith(base)):
                if not os.path.isdir(os.path.join(root, name)):
                    args += ["--ro-bind", "/dev/null", os.path.join("/dev", name)]
        return args

    def run(self, script, args, timeout):
        record = self._run(script, args, timeout)
        if record.get("no_proc"):
            PROC_FRESH[self.bwrap] = False
            path = os.path.join(self.root, "config.json")
            with open(path) as fh:
                config = json.load(fh)
            config["proc_fresh"] = False
            with open(path, "w") as fh:
                json.dump(config, fh)
            record = self._run(script, args, timeout)
        return record

    def _run(self, script, args, timeout):
        path = os.path.join(self.checkout, script)
        info_read, info_write = os.pipe()
        try:
            argv = self.bwrap_argv([self.bash] + _shebang_flags(os.path.join(self.sco, script)) + [path]
                                   + list(args), info_fd=info_write)
            proc = subprocess.Popen(argv, env=self.environment(), cwd="/", stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                    pass_fds=(info_write,))
        except BaseException:
            os.close(info_read)
            raise
        finally:
            os.close(info_write)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._kill(proc.pid)
            out, err = proc.communicate()
        self._kill(proc.pid)             # bwrap's session
        self._wait_namespace_gone(_read_child_pid(info_read))
        err = err.decode("utf-8", "replace")
        if proc.returncode and err.startswith("bwrap: Can't mount proc") and PROC_FRESH.get(self.bwrap, True):
            return {"no_proc": True}
        if proc.returncode and err.startswith("bwrap:") and not self._calls():
            raise LaunchError("the launch sandbox could not start on this host (%s): %s"
                              % (err.strip().splitlines()[0], BWRAP_HINT))
        return {"exit_code": proc.returncode, "timed_out": timed_out,
                "stdout": out.decode("utf-8", "replace"), "stderr": err,
                "violation": self._read("violation"), "unanswered": self._read("unanswered"),
                "calls": self._calls()}

    @staticmethod
    def _wait_namespace_gone(init_pid, wait=NAMESPACE_WAIT):
        """Return once the sandbox's pid namespace is empty: its init ends every process in it before it becomes
        a zombie, but when bwrap itself was killed (a timed-out launcher) the init dies after bwrap, and a
        process of the launcher could still be running a moment after the evaluation has returned."""
        if init_pid is not None:
            wait_gone(lambda: pid_alive(init_pid), wait)     # a zombie init has ended: the namespace is empty

    @staticmethod
    def _kill(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass

    def _read(self, name):
        try:
            with open(os.path.join(self.root, name)) as fh:
                return fh.read().strip() or None
        except (IOError, OSError):
            return None

    def _calls(self):
        calls = []
        directory = os.path.join(self.root, "calls")
        for name in sorted(os.listdir(directory)):
            try:
                with open(os.path.join(directory, name)) as fh:
                    calls.append(json.load(fh))
            except (IOError, OSError, ValueError):
                continue        # a stub killed while writing: the record is incomplete, not evidence
        calls.sort(key=lambda c: (c.get("t", 0), c.get("pid", 0)))
        return calls

    def path_map(self):
        """(sandbox path, real path) pairs, longest first, to show paths as on the head."""
        return [(os.path.join(INSIDE, "co"), self.checkout), (self.sco, self.checkout)]

    def close(self):
        self.broker.close()
        shutil.rmtree(self.root, ignore_errors=True)


def evaluate(launcher, command="serve", env_text=None, env_name=None, home=None, user=None, head="head",
             head_hostname=None, ports=(8888,), timeout=DEFAULT_TIMEOUT, max_calls=DEFAULT_MAX_CALLS,
             script_text=None, docker_client=None, query_cache=None, worker_homes=None):
    """Run ``launcher command`` in the sandbox; the raw record (calls, output, path map).

    ``env_text``: a proposed ``.env`` written into the scratch copy instead of the checkout's, under
    ``env_name`` (default: the name the launcher reads, :func:`config_name`);
    ``script_text``: a proposed launcher, likewise (the checkout itself is never written);
    ``docker_client``: the docker client that answers the read-only queries from the head's daemon (default
    the one on ``PATH``; ``False``: the daemon is never asked); ``query_cache``: a dict shared by several
    evaluations so the daemon is asked each question once; ``worker_homes``: what was read in each worker
    user's home beforehand ({user: [relative paths, directories ending in /]}). Raises :class:`LaunchError` when the launcher
    cannot be evaluated: missing, no isolation on this host, a loop, the timeout, a question the sandbox
    cannot answer faithfully.
    """
    launcher = os.path.abspath(launcher)
    if not os.path.isfile(launcher):
        raise LaunchError("%s: no such launcher script" % launcher)
    entry = pwd.getpwuid(os.getuid())
    home = home or entry.pw_dir
    user = user or entry.pw_name
    box = Sandbox(os.path.dirname(launcher), home, user, head, head_hostname, ports, max_calls, docker_client,
                  query_cache, worker_homes)
    try:
        if env_text is not None:
            box.write_env(env_name or config_name(launcher), env_text)
        if script_text is not None:
            box.write_env(os.path.basename(launcher), script_text)
        record = box.run(os.path.basename(launcher), [command] if command else [], timeout)
        record.update({"launcher": launcher, "checkout": box.checkout, "home": home, "user": user, "head": head,
                       "skipped": box.skipped, "path_map": box.path_map(), "root": box.root,
                       "command": command})
    finally:
        box.close()
    if record["violation"]:
        raise LaunchError("%s %s cannot be evaluated: %s; nothing outside the sandbox was changed"
                          % (launcher, command, record["violation"]), record)
    if record["unanswered"]:
        raise LaunchError("%s %s cannot be evaluated: %s (nothing outside the sandbox was changed)"
                          % (launcher, command, record["unanswered"]), record)
    if record["timed_out"]:
        raise LaunchError("%s %s did not finish within %d s in the sandbox (it loops or waits for something "
                          "the sandbox does not answer)" % (launcher, command, timeout), record)
    return record
