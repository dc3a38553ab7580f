# -*- coding: utf-8 -*-
"""The engine's ranks in an effective launch, and whether every rank expected was started.

Used by ``module_utils/launcher/effective.py`` on the containers a sandbox record starts (in order of
start). Standard library only.

* A container is an engine rank when it says its rank (``NODE_RANK``/``RANK`` in its environment,
  ``--node-rank``/``--rank`` in its command), or, without one, when it runs the engine's image (the image
  of the containers that say their rank or name a model) and names a model as they do. Any other
  container (an NFS exporter on the head, a helper service) is auxiliary: no rank, not counted, never
  rank 0. When no container shows either sign, every container counts (nothing tells them apart).
* A rank without a stated one is 0 on the head, else the next worker rank in order of start.
* The ranks expected (the caller's TP size, else the engines' own ``--nnodes``) must all be started;
  a missing rank is named with its host, taken from the commands the launcher aimed at other hosts
  (``ssh`` targets, ``scp``/``rsync`` ``host:path``, a ``user@host`` argument of a helper that drives
  ssh itself), and the last such command.
"""
from __future__ import absolute_import, division, print_function

import re

from shlex import quote as shell_quote

__metaclass__ = type

MODEL_OPTS = ("--model-path", "--model", "--model-dir")
MODEL_ENV = ("MODEL_PATH", "MODEL")
USER_HOST_RE = re.compile(r"^[A-Za-z0-9._-]+@([A-Za-z0-9][A-Za-z0-9._-]*)$")
HOST_PATH_RE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?([A-Za-z0-9][A-Za-z0-9._-]*):")
NUMBER_RE = re.compile(r"^[0-9]+$")
SHOWN_CHARS = 300
MAX_NAMED = 16                      # missing ranks named one by one (the count says the rest)


def _option(command, names):
    for i, word in enumerate(command):
        for name in names:
            if word == name and i + 1 < len(command):
                return command[i + 1]
            if word.startswith(name + "="):
                return word[len(name) + 1:]
    return None


def stated_rank(ctn):
    """The rank a container says it has, else None."""
    for key in ("NODE_RANK", "RANK"):
        if NUMBER_RE.match(ctn["env"].get(key, "")):
            return int(ctn["env"][key])
    value = _option(ctn["command"], ("--node-rank", "--rank"))
    return int(value) if value is not None and NUMBER_RE.match(value) else None


def names_model(ctn):
    return _option(ctn["command"], MODEL_OPTS) is not None or any(ctn["env"].get(k) for k in MODEL_ENV)


def assign(containers, head):
    """Set ``role`` (head, worker, auxiliary) and ``rank`` (None for auxiliary) on each container, in order
    of start; returns ``(engines, auxiliary)``."""
    stated = [c for c in containers if stated_rank(c) is not None]
    signs = [c for c in containers if c in stated or names_model(c)]
    images = set(c["image"] for c in signs)
    model_tells = any(names_model(c) for c in stated) if stated else bool(signs)

    def engine(c):
        if not signs or c in stated:
            return True
        return c["image"] in images and (names_model(c) or not model_tells)

    engines, auxiliary, workers = [], [], 0
    for c in containers:
        if not engine(c):
            c["role"], c["rank"] = "auxiliary", None
            auxiliary.append(c)
            continue
        c["role"] = "head" if c["host"] == head else "worker"
        rank = stated_rank(c)
        c["rank"] = rank if rank is not None else (0 if c["role"] == "head" else workers + 1)
        workers += c["role"] == "worker"
        engines.append(c)
    return engines, auxiliary


def nnodes(engines):
    """``(count, container)``: the largest node count an engine container is given (``--nnodes``, ``NNODES``)."""
    best = (None, None)
    for c in engines:
        value = _option(c["command"], ("--nnodes",)) or c["env"].get("NNODES")
        if value and NUMBER_RE.match(value) and (best[0] is None or int(value) > best[0]):
            best = (int(value), c)
    return best


def aimed(calls, head):
    """``[(host, call)]``, in order: each command run on the head that names another host."""
    out = []
    for call in calls:
        if call.get("host") != head or call.get("kind") == "docker-run":
            continue
        if call.get("name") == "ssh":
            hosts = [call.get("target")] if call.get("target") else []
        else:
            hosts = []
            for arg in call.get("argv") or []:
                m = USER_HOST_RE.match(arg) or (call.get("name") in ("scp", "rsync") and HOST_PATH_RE.match(arg))
                if m:
                    hosts.append(m.group(1))
        out.extend((h, call) for h in hosts if h != head)
    return out


def shown(call, text):
    """One recorded command as a shell line, shortened; ``text`` shows a string as it may be shown (paths
    as on the head, secrets hidden)."""
    line = " ".join(shell_quote(text(w)) for w in [call.get("name") or ""] + list(call.get("argv") or []))
    return line if len(line) <= SHOWN_CHARS else line[:SHOWN_CHARS - 3] + "..."


def missing_ranks(engines, calls, head, expected, text):
    """``[(rank, host or None, last command aimed at it as shown or None, that call or None)]`` for each rank
    below ``expected`` that no engine container has; a missing worker rank takes, in order, the hosts commands
    were aimed at that got no engine container."""
    have = set(c["rank"] for c in engines)
    missing = []
    for rank in range(expected):
        if rank not in have:
            missing.append(rank)
            if len(missing) == MAX_NAMED:
                break
    if not missing:
        return []
    targets = aimed(calls, head)
    order = []
    for host, _ in targets:
        if host not in order:
            order.append(host)
    served = set(c["host"] for c in engines)
    free = [h for h in order if h not in served]
    last = dict(targets)
    out = []
    for rank in missing:
        host = head if rank == 0 else (free.pop(0) if free else None)
        out.append((rank, host, shown(last[host], text) if host in last else None, last.get(host)))
    return out


def missing_message(missing, started, expected, why):
    """The failure naming each missing rank."""
    parts = []
    for rank, host, line, call in missing:
        if rank == 0:
            parts.append("rank 0 (the head, %s): no engine container was started there" % host)
        elif host is None:
            parts.append("rank %d (host unknown: no ssh or helper command named one): no engine container" % rank)
        elif line is None:
            parts.append("rank %d (%s): no engine container was started there" % (rank, host))
        else:
            parts.append("rank %d (%s) never reached a docker run; the last command aimed at it: %s"
                         % (rank, host, line))
    more = expected - started - len(missing)
    return "starts %d of the %d engine ranks expected (%s): %s%s" % (
        started, expected, why, "; ".join(parts), "; and %d more ranks" % more if more > 0 else "")


MODULE_RE = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '([A-Za-z0-9_.]+)'")


def python_hint(output):
    """A sentence naming the Python packages a launcher's own helper could not import on the head (its
    interpreter runs for real in the sandbox), or ``""``."""
    names = []
    for m in MODULE_RE.finditer(output or ""):
        top = m.group(1).split(".")[0]
        if top not in names:
            names.append(top)
    if not names:
        return ""
    return ("; the launcher's Python helper cannot import %s on this host: install %s for the head's python3 "
            "(as the launcher's own setup says), then evaluate again" % (", ".join(names), ", ".join(names)))


def unserved(engines, calls, head, text):
    """Warnings: hosts commands were aimed at that got no engine container (when no rank count is known)."""
    served = set(c["host"] for c in engines)
    last = {}
    for host, call in aimed(calls, head):
        if host not in served:
            last.pop(host, None)
            last[host] = call
    return ["commands were aimed at %s (the last: %s) but no engine container was started there"
            % (host, shown(call, text)) for host, call in last.items()]
