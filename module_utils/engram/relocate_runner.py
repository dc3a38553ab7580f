# -*- coding: utf-8 -*-
"""How engram_relocate reaches hosts and keeps its record, on the head (standard library only).

:class:`Runner` runs an operation of :data:`~engram_relocate_agent.AGENT` on a host: ``None`` is the head
itself (``python -c AGENT OP ARGS``, no shell), anything else an ssh target
(``ssh -T [options] -- HOST 'python3' '-c' '<AGENT>' 'OP' 'ARGS'...``, every word quoted for the remote
user's shell, since ssh hands the remote side one command line). Only the head reaches the workers (the
launcher's key); workers never reach each other, so every transfer is relayed by the head.

:class:`Manifest` is the JSON record on the head of what was moved, restored and deleted (rewritten
atomically: temporary file, fsync, rename, directory fsync; guarded by a flock beside it).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import subprocess
import sys
import time

from ansible.module_utils.engram.relocate_agent import AGENT, MARK
from ansible.module_utils.base.host_label import host_label
from ansible.module_utils.engram.shard_format import EngramError, fsync_dir

CALL_TIMEOUT = 300         # seconds for the small operations (inspect, discard, remove)
SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-o", "ServerAliveInterval=15",
               "-o", "ServerAliveCountMax=4"]
MANIFEST_FORMAT = "dsv41-engram-relocate/1"


class RelocateError(EngramError):
    """A refusal or failure; the message names the host, the file and the value."""


def utc_now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def parse_report(raw):
    """The last ``DSV41-RELOCATE {json}`` line of an agent's output (ssh may add its own lines)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    for line in reversed(text.splitlines()):
        if line.startswith(MARK):
            with contextlib.suppress(ValueError):
                return json.loads(line[len(MARK):])
    return None


def _tail(raw, limit=400):
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = " ".join(line for line in text.strip().splitlines() if not line.startswith(MARK))
    return text[-limit:] or "no output"


class Runner(object):
    """Runs agent operations on a host: ``None`` is the head (no ssh), anything else an ssh target."""

    def __init__(self, ssh_executable="ssh", ssh_options=None, remote_python="python3", local_python=None,
                 labels=None):
        self.ssh_executable = ssh_executable
        self.ssh_options = list(SSH_OPTIONS if ssh_options is None else ssh_options)
        self.remote_python = remote_python
        self.local_python = local_python or sys.executable
        self.labels = dict(labels or {})

    def label(self, host):
        """What messages call ``host``: an explicit label, the ssh target without its user, or the head's name."""
        if host in self.labels:
            return self.labels[host]
        return host_label() if host is None else host.rsplit("@", 1)[-1]

    def argv(self, host, op, args):
        words = [op] + [str(a) for a in args]
        if host is None:
            return [self.local_python, "-c", AGENT] + words
        if not host or host.startswith("-") or any(c.isspace() for c in host):
            raise RelocateError("ssh target %r is not a host name (user@host or host)" % (host,))
        remote = " ".join(shlex.quote(w) for w in [self.remote_python, "-c", AGENT] + words)
        return [self.ssh_executable, "-T"] + self.ssh_options + ["--", host, remote]

    def popen(self, host, op, args, **kwargs):
        try:
            return subprocess.Popen(self.argv(host, op, args), **kwargs)
        except OSError as exc:
            raise RelocateError("%s: cannot start %s for %s: %s" % (self.label(host), self.argv(host, op, args)[0],
                                                                    op, exc))

    def call(self, host, op, args, timeout=CALL_TIMEOUT):
        """The agent's report of one small operation; RelocateError naming the host when it refuses or fails."""
        argv = self.argv(host, op, args)
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RelocateError("%s: %s did not finish within %s s" % (self.label(host), op, timeout))
        except OSError as exc:
            raise RelocateError("%s: cannot run %s for %s: %s" % (self.label(host), argv[0], op, exc))
        report = parse_report(proc.stdout)
        if report is None:
            raise RelocateError("%s: %s gave no answer (exit %d): %s" % (self.label(host), op, proc.returncode,
                                                                        _tail(proc.stderr + proc.stdout)))
        if not report.get("ok"):
            raise RelocateError("%s: %s" % (self.label(host), report.get("error")))
        return report


# --------------------------------------------------------------------------- manifest

class Manifest(object):
    """The JSON record on the head of what was moved, restored and deleted; rewritten atomically."""

    def __init__(self, path, entries=None, create_dir=False):
        self.path = path
        self.entries = list(entries or [])
        self.recorded = []   # the entries this run added or changed, in order
        self.create_dir = create_dir  # make the manifest's directory when a real run first needs it

    def load(self, must_exist=False):
        """Read the entries from the file (none when there is no file yet); returns self."""
        try:
            with open(self.path, "rb") as handle:
                data = json.loads(handle.read().decode("utf-8"))
        except FileNotFoundError:
            if must_exist:
                raise RelocateError("%s: manifest %s does not exist; nothing to restore" % (host_label(), self.path))
            self.entries = []
            return self
        except (OSError, ValueError) as exc:
            raise RelocateError("%s: manifest %s cannot be read: %s" % (host_label(), self.path, exc))
        if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or \
                not isinstance(data.get("entries"), list):
            raise RelocateError("%s: %s is not an engram_relocate manifest (format %s expected)"
                                % (host_label(), self.path, MANIFEST_FORMAT))
        self.entries = data["entries"]
        return self

    def refusal(self):
        """Why the manifest could not be written (checked before anything moves), or None."""
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory) and self.create_dir:
            up = directory
            while not os.path.lexists(up):
                up = os.path.dirname(up)
            if not os.path.isdir(up) or not os.access(up, os.W_OK | os.X_OK):
                return "%s: the manifest's directory %s does not exist and cannot be created in %s" % (
                    host_label(), directory, up)
            return None
        if not os.path.isdir(directory):
            return "%s: the manifest's directory %s does not exist" % (host_label(), directory)
        if not os.access(directory, os.W_OK | os.X_OK):
            return "%s: the manifest's directory %s is not writable" % (host_label(), directory)
        if os.path.islink(self.path) or os.path.lexists(self.path) and not os.path.isfile(self.path):
            return "%s: manifest %s is not a regular file" % (host_label(), self.path)
        return None

    @contextlib.contextmanager
    def locked(self, must_exist=False):
        """Hold an exclusive flock on ``MANIFEST.lock`` (two runs never interleave their records), then load.

        A manifest directory made for this run (``create_dir``) is taken away again, lock and all, when the run
        ends without recording anything (a refusal changes nothing)."""
        lock_path = self.path + ".lock"
        directory = os.path.dirname(os.path.abspath(self.path))
        made = []
        if self.create_dir and not os.path.isdir(directory):
            up = directory
            while not os.path.lexists(up):
                made.insert(0, up)
                up = os.path.dirname(up)
            try:
                for path in made:
                    os.mkdir(path, 0o755)
            except OSError as exc:
                raise RelocateError("%s: cannot create the manifest's directory for %s: %s" % (host_label(), self.path, exc))
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise RelocateError("%s: cannot open %s: %s" % (host_label(), lock_path, exc))
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RelocateError("%s: another engram_relocate holds %s; nothing was done" % (host_label(), lock_path))
            yield self.load(must_exist)
        finally:
            os.close(fd)
            if made and not self.recorded:
                with contextlib.suppress(OSError):
                    os.unlink(lock_path)
                    for path in reversed(made):
                        os.rmdir(path)

    def save(self):
        directory = os.path.dirname(os.path.abspath(self.path))
        temp = "%s.%d.tmp" % (self.path, os.getpid())
        body = json.dumps({"format": MANIFEST_FORMAT, "updated": utc_now(), "entries": self.entries},
                          indent=2, sort_keys=True).encode("utf-8") + b"\n"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                view = memoryview(body)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, self.path)
            fsync_dir(directory)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise RelocateError("%s: cannot write manifest %s: %s" % (host_label(), self.path, exc))

    def record(self, entry):
        """Add ``entry`` (or keep its update, when already there) and rewrite the file."""
        if not any(e is entry for e in self.entries):
            self.entries.append(entry)
        if not any(e is entry for e in self.recorded):
            self.recorded.append(entry)
        self.save()

    def find(self, state, **where):
        return [e for e in self.entries if e.get("state") == state and all(e.get(k) == v for k, v in where.items())]
