# -*- coding: utf-8 -*-
"""Run the launcher's own code (``start.sh serve``) in a sandbox and record every external command.

Used by ``launcher_effective``, ``launcher_settings`` and ``launcher_forward`` (through
``module_utils/launch_record.py``, which turns the record into the effective launch). Standard library
only: it runs on the head, where the launcher's checkout is.

What the sandbox is:

* a scratch copy of the checkout (a temporary directory, mode 0700; when the checkout lies under the
  user's home it is copied to the same place under a scratch ``HOME``, so ``$HOME/<checkout>`` in the
  script still finds it), with a proposed ``.env`` written into the copy when one is given;
* a scratch ``HOME`` and ``TMPDIR``; an environment holding nothing else of the caller's (no ssh agent);
* a ``PATH`` of stand-ins only (``module_utils/launch_stubs.py``): ``docker``, ``ssh`` (the worker command
  string is itself run by bash with the same ``PATH``, so its ``docker run`` is recorded with the ssh
  target as its host), ``curl``, ``sudo``, ``sleep`` (returns at once) and the rest are recorded, writers
  run only inside the scratch tree, unknown commands are recorded and return 0;
* bounded: a wall-clock ``timeout`` and a maximum number of external commands (a loop). A command run by
  absolute path outside the sandbox stops the evaluation before it runs.

Nothing outside the scratch directory is written by the sandbox itself; the scratch directory is
removed afterwards. Limits, said plainly: shell redirections (``> /some/file``) and builtins other than
``kill`` are bash's own and are not intercepted, and read-only queries a worker command makes
(``getent``, ``ip addr``) are answered by the head.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile

from shlex import quote as shell_quote

from ansible.module_utils.launch_stubs import ALLOWED, ANSWERED, BASH_ENV, GUARDED, RUNNERS, STUB

__metaclass__ = type

DEFAULT_TIMEOUT = 60
DEFAULT_MAX_CALLS = 2000
MAX_FILE_BYTES = 8 * 1024 * 1024          # larger files (images, weights, logs) are not copied
MAX_TREE_BYTES = 256 * 1024 * 1024
SKIP_DIRS = frozenset([".git", "logs", "__pycache__", ".venv", "node_modules"])
SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class LaunchError(Exception):
    """The launcher could not be evaluated (missing, unstubbed access, loop, timeout, failure)."""

    def __init__(self, message, record=None):
        Exception.__init__(self, message)
        self.record = record


def _which(name):
    for d in (os.environ.get("PATH", "") + ":" + SEARCH_PATH).split(":"):
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

    def __init__(self, checkout, home, user, head, head_hostname=None, ports=(8888,), max_calls=DEFAULT_MAX_CALLS):
        self.checkout = os.path.abspath(checkout)
        self.home = home.rstrip("/") or "/"
        self.user = user
        self.head = head
        self.root = os.path.realpath(tempfile.mkdtemp(prefix="dsv41-launch-"))
        os.chmod(self.root, stat.S_IRWXU)
        self.shome = os.path.join(self.root, "home")
        rel = os.path.relpath(self.checkout, self.home)
        if self.home != "/" and not rel.startswith(".."):
            self.sco = os.path.join(self.shome, rel)       # $HOME/<checkout> still finds the copy
        else:
            self.sco = os.path.join(self.root, "co")
        for d in ("bin", "lib", "calls", "tmp", "remote"):
            os.mkdir(os.path.join(self.root, d))
        os.makedirs(os.path.dirname(self.sco), exist_ok=True)
        os.makedirs(self.shome, exist_ok=True)
        self.skipped = _copy_checkout(self.checkout, self.sco)
        self._tools(head_hostname or head, ports, max_calls)

    def _tools(self, head_hostname, ports, max_calls):
        real = {}
        bindir = os.path.join(self.root, "bin")
        stub = os.path.join(self.root, "lib", "stub.py")
        with open(stub, "w") as fh:
            fh.write("#!%s -SE\n" % sys.executable + STUB)
        os.chmod(stub, 0o700)
        for name in ALLOWED:
            path = _which(name)
            if path:
                os.symlink(path, os.path.join(bindir, name))
                real[name] = path
        for name in GUARDED + RUNNERS + ANSWERED:
            path = _which(name) if not name.startswith("__") else None
            if path:
                real[name] = path
            os.symlink(stub, os.path.join(bindir, name))
        if "bash" not in real:
            raise LaunchError("bash is not installed on this host: the launcher cannot be evaluated")
        config = {"head": self.head, "head_hostname": head_hostname, "ports": [str(p) for p in ports],
                  "max_calls": int(max_calls), "real": real, "guarded": list(GUARDED), "runners": list(RUNNERS)}
        with open(os.path.join(self.root, "config.json"), "w") as fh:
            json.dump(config, fh)
        with open(os.path.join(self.root, "lib", "bash_env.sh"), "w") as fh:
            fh.write(BASH_ENV.replace("@ROOT@", shell_quote(self.root)))
        self.bash = real["bash"]

    def write_env(self, name, text):
        """Write ``text`` as ``name`` in the scratch copy (a proposed .env or launcher)."""
        path = os.path.join(self.sco, name)
        if os.path.islink(path):
            os.unlink(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)

    def environment(self):
        return {"PATH": os.path.join(self.root, "bin"), "HOME": self.shome, "USER": self.user,
                "LOGNAME": self.user, "TMPDIR": os.path.join(self.root, "tmp"), "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8", "TERM": "dumb", "SHELL": self.bash,
                "BASH_ENV": os.path.join(self.root, "lib", "bash_env.sh"), "DSV41_SBX_HOST": self.head}

    def run(self, script, args, timeout):
        path = os.path.join(self.sco, script)
        proc = subprocess.Popen([self.bash] + _shebang_flags(path) + [path] + list(args), cwd=self.sco,
                                env=self.environment(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._kill(proc.pid)
            out, err = proc.communicate()
        self._kill(proc.pid)             # background jobs the launcher left behind
        return {"exit_code": proc.returncode, "timed_out": timed_out,
                "stdout": out.decode("utf-8", "replace"), "stderr": err.decode("utf-8", "replace"),
                "violation": self._read("violation"), "calls": self._calls()}

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
        """(scratch prefix, real path) pairs, longest first, to show paths as on the head."""
        pairs = [(self.sco, self.checkout), (self.shome, self.home),
                 (os.path.join(self.root, "tmp"), "/tmp"), (os.path.join(self.root, "remote"), "/home/~remote")]
        return sorted(pairs, key=lambda p: -len(p[0]))

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)


def evaluate(launcher, command="serve", env_text=None, env_name=".env", home=None, user=None, head="head",
             head_hostname=None, ports=(8888,), timeout=DEFAULT_TIMEOUT, max_calls=DEFAULT_MAX_CALLS,
             script_text=None):
    """Run ``launcher command`` in a sandbox; the raw record (calls, output, path map).

    ``env_text``: a proposed ``.env`` written into the scratch copy instead of the checkout's;
    ``script_text``: a proposed launcher, likewise (the checkout itself is never written). Raises
    :class:`LaunchError` when the launcher cannot be evaluated: missing, a command by absolute path
    outside the sandbox, a loop, the timeout.
    """
    launcher = os.path.abspath(launcher)
    if not os.path.isfile(launcher):
        raise LaunchError("%s: no such launcher script" % launcher)
    import pwd
    entry = pwd.getpwuid(os.getuid())
    home = home or entry.pw_dir
    user = user or entry.pw_name
    box = Sandbox(os.path.dirname(launcher), home, user, head, head_hostname, ports, max_calls)
    try:
        if env_text is not None:
            box.write_env(env_name, env_text)
        if script_text is not None:
            box.write_env(os.path.basename(launcher), script_text)
        record = box.run(os.path.basename(launcher), [command] if command else [], timeout)
        record.update({"launcher": launcher, "checkout": box.checkout, "home": home, "user": user, "head": head,
                       "skipped": box.skipped, "path_map": box.path_map(), "root": box.root,
                       "command": command})
    finally:
        box.close()
    if record["violation"]:
        raise LaunchError("%s %s cannot be evaluated safely: %s; nothing was run outside the sandbox"
                          % (launcher, command, record["violation"]), record)
    if record["timed_out"]:
        raise LaunchError("%s %s did not finish within %d s in the sandbox (it loops or waits for something "
                          "the sandbox does not answer)" % (launcher, command, timeout), record)
    return record
