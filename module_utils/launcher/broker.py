# -*- coding: utf-8 -*-
"""The launch sandbox's one window on the head: the read-only questions a sandboxed launcher may ask.

The sandbox (``module_utils/launcher/sandbox.py``) has no network and no docker socket, so the head's
docker daemon, its addresses and routes cannot be read from inside. The stand-ins for ``docker``, ``ip``
and ``hostname -I`` ask this broker instead, over a unix socket in the sandbox's own directory (a path
socket crosses network namespaces; nothing else is reachable through it). The broker runs outside the
sandbox, as the module's user, and answers only questions of fixed shapes:

* docker: ``container inspect NAME``, ``image inspect REF`` (names checked against docker's syntax),
  ``ps``/``images`` with the stand-in's own fixed options, ``version``, ``info``, ``--version``;
* ``ip`` with a show-type object (``addr``, ``link``, ``route``, ``neigh``) and no verb that changes
  anything (``add``, ``del``, ``set``, ``flush``...);
* ``hostname`` with ``-I``/``-i``/``-A``/``--all-ip-addresses``.

Every program is run from an argument list (never a shell), with a timeout, a small fixed environment
and no standard input; an answer is cached for the evaluation (or for several, when the caller shares
the cache: the key trials of ``launch_record.key_effects``). Anything else is answered ``refused``, and
the stand-in stops the evaluation naming the question. Standard library only.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import re
import socket
import subprocess
import threading

__metaclass__ = type

QUERY_TIMEOUT = 10                       # seconds one question may take (a docker daemon under load)
MAX_REQUEST = 64 * 1024
SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DOCKER_ENV = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY",
              "DOCKER_API_VERSION")
NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,254}$")
DOCKER_FIXED = (["--version"], ["version"], ["info"], ["version", "--format", "{{json .}}"],
                ["info", "--format", "{{json .}}"], ["ps", "--all", "--no-trunc", "--format", "{{json .}}"],
                ["images", "--no-trunc", "--format", "{{json .}}"],
                ["images", "--no-trunc", "--format", "{{json .}}", "--all"])
IP_OBJECTS = frozenset(["a", "ad", "add", "addr", "address", "l", "li", "lin", "link", "r", "ro", "rou", "route",
                        "n", "ne", "nei", "neigh", "neighbor", "neighbour"])
IP_CHANGES = frozenset(["add", "del", "delete", "set", "flush", "change", "replace", "append", "exec", "netns",
                        "save", "restore", "monitor", "prepend", "test", "-batch", "-b", "-force", "-n", "-netns"])
IP_WORD = re.compile(r"^[A-Za-z0-9_.:/@%=-]{1,80}$")
HOSTNAME_FLAGS = frozenset(["-I", "-i", "-A", "--all-ip-addresses", "--ip-address", "--all-fqdns"])


def _which(name):
    for d in SEARCH_PATH.split(":"):
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def docker_shape(args):
    """True when ``args`` is a docker question the broker answers."""
    if list(args) in [list(f) for f in DOCKER_FIXED]:
        return True
    return (len(args) == 3 and args[0] in ("container", "image") and args[1] == "inspect"
            and bool(NAME_OK.match(args[2])))


def ip_shape(args):
    """True for ``ip [flags] OBJECT [show ...]`` that only reads."""
    words = list(args)
    if not words or not all(IP_WORD.match(w) for w in words) or IP_CHANGES.intersection(words):
        return False
    objects = [w for w in words if not w.startswith("-")]
    return bool(objects) and objects[0] in IP_OBJECTS and (len(objects) == 1 or objects[1] in (
        "show", "list", "ls", "lst", "sh", "s", "get", "dev") or objects[0] in ("r", "ro", "rou", "route"))


class Broker(object):
    """Listens on ``path`` while the sandbox runs; :meth:`close` stops it."""

    def __init__(self, path, docker_client=None, cache=None, timeout=QUERY_TIMEOUT):
        self.path = path
        self.timeout = timeout
        self.cache = cache if cache is not None else {}
        self.lock = threading.Lock()
        self.env = dict((k, os.environ[k]) for k in DOCKER_ENV if k in os.environ)
        self.env.update(PATH=SEARCH_PATH, HOME=os.path.expanduser("~"), LANG="C.UTF-8", LC_ALL="C.UTF-8")
        if docker_client is False:
            self.docker, self.docker_why = None, "the daemon is not asked (docker_client: false)"
        else:
            self.docker = docker_client or _which("docker")
            if self.docker and not os.access(self.docker, os.X_OK):
                self.docker = None
            self.docker_why = None if self.docker else "no docker client on this host"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        os.chmod(path, 0o600)
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, name="launch-broker")
        self.thread.daemon = True
        self.thread.start()

    def _serve(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if self.stopping:           # close()'s own wake-up call
                conn.close()
                return
            try:
                conn.settimeout(self.timeout + 5)
                data = b""
                while len(data) < MAX_REQUEST:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                try:
                    req = json.loads(data.decode("utf-8"))
                    answer = self.answer(req.get("kind"), [str(a) for a in req.get("args") or []])
                except (ValueError, AttributeError):
                    answer = ["refused", "", "an unreadable question"]
                conn.sendall(json.dumps(answer).encode("utf-8"))
            except OSError:
                pass
            finally:
                conn.close()

    def answer(self, kind, args):
        """``[status, stdout, detail]``: ``ok``, ``missing`` (docker has no such object), ``down`` (could not
        be asked) or ``refused`` (not a question the broker answers)."""
        if kind == "docker":
            if not docker_shape(args):
                return ["refused", "", "docker %s is not a question the sandbox answers" % " ".join(args)[:200]]
            if not self.docker:
                return ["down", "", self.docker_why]
            return self._run("docker", [self.docker] + args, docker=True)
        if kind == "ip" and ip_shape(args):
            exe = _which("ip")
            return self._run("ip", [exe] + args) if exe else ["down", "", "no ip command on this host"]
        if kind == "hostname" and args and set(args) <= HOSTNAME_FLAGS:
            exe = _which("hostname")
            return self._run("hostname", [exe] + args) if exe else ["down", "", "no hostname command on this host"]
        return ["refused", "", "%s %s is not a question the sandbox answers" % (kind, " ".join(args)[:200])]

    def _run(self, kind, argv, docker=False):
        key = json.dumps([kind, argv])
        with self.lock:
            if key in self.cache:
                return self.cache[key]
            if docker and ("docker", "stalled") in self.cache and argv[1:] != ["--version"]:
                return self.cache[("docker", "stalled")]
        try:
            proc = subprocess.run(argv, env=self.env, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=self.timeout)
            out, err = proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace").strip()
            if proc.returncode == 0:
                result = ["ok", out, ""]
            elif docker and re.search(r"No such (image|object|container)", err):
                result = ["missing", out, err]
            else:
                result = ["down", "", "%s %s: %s" % (kind, " ".join(argv[1:3]), (err.splitlines() or [
                    "exit %d" % proc.returncode])[-1][:200])]
                if docker and re.search(r"Cannot connect to the Docker daemon|error during connect|permission denied",
                                        err):
                    with self.lock:
                        self.cache[("docker", "stalled")] = result   # the daemon itself is unreachable
        except subprocess.TimeoutExpired:
            result = ["down", "", "%s did not answer within %s s" % (kind, self.timeout)]
            if docker:
                with self.lock:
                    self.cache[("docker", "stalled")] = result
        except OSError as exc:
            result = ["down", "", "%s: %s" % (argv[0], exc)]
        with self.lock:
            self.cache[key] = result
        return result

    def close(self):
        self.stopping = True
        try:    # wake the accept loop now instead of at its next 0.2 s timeout (one per evaluation)
            wake = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            wake.settimeout(1)
            wake.connect(self.path)
            wake.close()
        except OSError:
            pass
        self.thread.join(2)
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
