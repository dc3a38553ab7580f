# -*- coding: utf-8 -*-
"""The docker stand-in of the launch sandbox, as text (part of the stand-in program that
``module_utils/launcher/sandbox.py`` writes; its read-only queries are in
``module_utils/launcher/docker_query.py``, its templates in ``module_utils/launcher/docker_format.py``).

* What changes state (``run``, ``create``, ``rm``, ``stop``, ``pull``, ``build``, ``tag``, ``rmi``...) is
  recorded and never executed; the sandbox keeps what it would have changed (containers started,
  removed or stopped, images built, pulled or removed) and later answers see it.
* The read-only queries launchers make (``inspect``, ``container inspect``, ``image inspect``, ``ps``,
  ``images``, ``version``, ``info``, ``--version``) are answered from the real daemon of the head: the
  stand-in asks the broker outside the sandbox (``module_utils/launcher/broker.py``, which runs the real
  client) with an argument list it builds from the allowed subcommands and its own fixed options only,
  the launcher's names checked against docker's name syntax; each answer is cached for the evaluation. The launcher's ``--format`` is rendered by the stand-in, over the daemon's
  data overlaid with the sandbox's changes.
* When the daemon cannot be asked (no client, not running, a timeout, an error), or the object exists
  only in the sandbox, the answer is what the module knows: an image of this fleet (``Architecture``
  arm64, ``Os`` linux); no container other than the sandbox's. Such a call is recorded with
  ``answer: assumed`` and its reason. A worker's containers are not visible from the head; its image
  queries are answered by the head's daemon (same image across the fleet) and recorded so.
* A query, option, filter or template the stand-in cannot answer faithfully stops the evaluation, naming
  it, rather than answering something that may be wrong.

Standard library only.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCKER = r'''
# ---- docker: changes recorded, read-only queries answered from the head's daemon ----------------
RUN_FLAGS = frozenset(["-d", "--detach", "--rm", "-i", "--interactive", "-t", "--tty", "--init", "--privileged",
                       "--read-only", "--no-healthcheck", "--oom-kill-disable", "-P", "--publish-all", "-q",
                       "--quiet", "--disable-content-trust", "--sig-proxy", "--help"])
GLOBAL_VALUE = frozenset(["-H", "--host", "-c", "--context", "--config", "-l", "--log-level", "--tlscacert",
                          "--tlscert", "--tlskey"])
LOCAL_GLOBAL = frozenset(["-l", "--log-level", "-D", "--debug"])
NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,254}$")
GROUPS = {"container": {"ls": "ps", "list": "ps", "ps": "ps", "inspect": "container-inspect"},
          "image": {"ls": "images", "list": "images", "inspect": "image-inspect", "rm": "rmi", "remove": "rmi"},
          "system": {"info": "info"}, "buildx": {}}
QUERIES = ("inspect", "container-inspect", "image-inspect", "ps", "images", "version", "info", "--version")
NO_ID = "sha256:" + "0" * 64


class Answer(object):
    """How a query was answered, for the record: daemon, sandbox, or assumed (with the reasons)."""

    def __init__(self):
        self.kind, self.reasons = "sandbox", []

    def daemon(self):
        self.kind = "daemon" if self.kind == "sandbox" else self.kind

    def assume(self, why):
        self.kind = "assumed"
        if why not in self.reasons:
            self.reasons.append(why)


def load_json(path, default):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (IOError, OSError, ValueError):
        return default


def save_json(path, data):
    tmp = "%s.%d" % (path, os.getpid())
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def ask_daemon(args):
    """``(status, stdout, detail)`` of the head's daemon for one read-only query, asked through the broker
    outside the sandbox (``module_utils/launcher/broker.py``, which runs the real client): ``ok``, ``missing``
    (the daemon has no such object) or ``down`` (it could not be asked; detail says why). ``args`` is built
    by the callers below from fixed words and checked names, never passed through from the launcher."""
    if NAME != "docker":
        return "down", "", "the sandbox asks no %s daemon" % NAME
    path = os.path.join(ROOT, "docker-daemon.json")
    cache = load_json(path, {})
    key = json.dumps(args)
    if key in cache:
        return tuple(cache[key])
    result = list(ask("docker", args))
    cache[key] = result
    save_json(path, cache)
    return tuple(result)


def daemon_json(args, what):
    """``(status, data)``: the daemon's JSON answer; unreadable output counts as ``down``."""
    status, out, detail = ask_daemon(args)
    if status != "ok":
        return status, detail
    try:
        if what == "lines":
            return "ok", [json.loads(line) for line in out.splitlines() if line.strip()]
        data = json.loads(out)
    except ValueError:
        return "down", "docker %s printed no JSON" % " ".join(args[:2])
    if what == "object":
        return ("ok", data[0]) if isinstance(data, list) and data and isinstance(data[0], dict) else (
            "down", "docker %s printed an unexpected answer" % " ".join(args[:2]))
    if isinstance(data, dict) and data.get("ServerErrors"):
        return "down", "docker %s: %s" % (args[0], data["ServerErrors"][0])
    return "ok", data


def sandbox_state():
    path = os.path.join(ROOT, "docker-state.json")
    data = load_json(path, {})
    mine = data.setdefault(HOST, {})
    for key, empty in (("ctn", {}), ("gone", []), ("stopped", []), ("images", []), ("rmi", [])):
        mine.setdefault(key, empty)
    return data, mine, path


def split_docker(args):
    """``(global options, subcommand, arguments)``; ``docker image inspect`` is ``image-inspect``."""
    i, glob = 0, []
    while i < len(args) and args[i].startswith("-") and args[i] not in ("-v", "--version"):
        glob.append(args[i])
        i += 2 if args[i] in GLOBAL_VALUE else 1
    if i < len(args) and args[i] in ("-v", "--version"):
        return glob, "--version", args[i + 1:]
    words = args[i:]
    sub, rest = (words[0], words[1:]) if words else ("", [])
    if sub in GROUPS and rest:
        sub, rest = GROUPS[sub].get(rest[0], rest[0]), rest[1:]
    return glob, sub, rest


def options(sub, rest, spec):
    """``(values, positionals)`` of a query's arguments by ``spec`` ({option: (key, takes value)}); an option
    the stand-in does not know stops the evaluation."""
    values, names, i = {}, [], 0
    while i < len(rest):
        a = rest[i]
        if a == "--":
            names.extend(rest[i + 1:])
            break
        if not a.startswith("-") or a == "-":
            names.append(a)
        else:
            opt, value = (a.split("=", 1) + [None])[:2] if a.startswith("--") else (a[:2], a[2:] or None)
            if opt not in spec:
                stop("docker %s %s: an option the sandbox does not answer" % (sub, a))
            key, takes = spec[opt]
            if takes and value is None:
                i += 1
                value = rest[i] if i < len(rest) else ""
            elif not takes and value is not None and not a.startswith("--"):
                rest = rest[:i + 1] + ["-" + value] + rest[i + 1:]
            values.setdefault(key, []).append(value if takes else True)
        i += 1
    return dict((k, v if k == "filter" else v[-1]) for k, v in values.items()), names


def parse_run(rest):
    opts, j = [], 0
    while j < len(rest):
        a = rest[j]
        if a == "--":
            j += 1
            break
        if not a.startswith("-") or a == "-":
            break
        if a.startswith("--") and "=" in a:
            opts.append(tuple(a.split("=", 1)))
        elif a in RUN_FLAGS or (len(a) > 2 and not a.startswith("--") and set(a[1:]) <= set("dit")):
            opts.append((a, None))
        elif len(a) > 2 and not a.startswith("--"):
            opts.append((a[:2], a[2:]))
        else:
            opts.append((a, rest[j + 1] if j + 1 < len(rest) else None))
            j += 1
        j += 1
    return opts, (rest[j] if j < len(rest) else ""), rest[j + 1:]


def started(rest, seq):
    opts, image, command = parse_run(rest)
    env, mounts = [], []
    for n, v in opts:
        if n in ("-e", "--env") and v is not None:
            env.append(v if "=" in v else ("%s=%s" % (v, os.environ[v]) if v in os.environ else None))
        elif n in ("-v", "--volume") and v:
            parts = v.split(":")
            if len(parts) > 1:
                mounts.append({"Type": "bind" if parts[0].startswith(("/", ".")) else "volume", "Source": parts[0],
                               "Destination": parts[1], "RW": "ro" not in (parts[2:] or [""])[0].split(",")})
    name = next((v for n, v in opts if n == "--name"), None) or "ctn%d" % seq
    network = next((v for n, v in opts if n in ("--network", "--net")), None) or "bridge"
    return {"name": name, "id": hashlib.sha256(("%s/%s/%d" % (HOST, name, seq)).encode()).hexdigest(),
            "image": image, "command": command, "env": [e for e in env if e], "mounts": mounts,
            "network": network, "state": "running", "auto_remove": ("--rm", None) in opts,
            "detached": any(n in ("-d", "--detach") or (n.startswith("-") and not n.startswith("--") and "d" in n[1:]
                                                        and v is None) for n, v in opts),
            # the ports its Ready line names: a PORT variable it is given (-e PORT=8888) or the engine's --port
            "ports": [v.split("=", 1)[1] for v in [e for e in env if e] + command
                      if re.match(r"^[A-Z_]*PORT=[0-9]+$", v)]
            + [command[i + 1] for i, v in enumerate(command[:-1]) if v == "--port"]}


def mutate(sub, rest, seq):
    data, mine, path = sandbox_state()
    names = [a for i, a in enumerate(rest) if not a.startswith("-")
             and (i == 0 or rest[i - 1] not in ("-t", "--time", "-s", "--signal", "--platform"))]
    out = 0
    if sub in ("run", "create"):
        c = started(rest, seq)
        mine["ctn"].pop(c["name"], None)           # newest last
        mine["gone"] = [n for n in mine["gone"] if n != c["name"]]
        if sub == "create":
            c["state"] = "created"
        if sub == "run" and c["auto_remove"] and not c["detached"]:
            mine["gone"].append(c["name"])         # a one-off helper run: over and removed when docker returns
        else:
            mine["ctn"][c["name"]] = c
        out = c["id"] if c["detached"] or sub == "create" else 0
    elif sub in ("rm", "stop", "kill"):
        for n in names:
            if sub == "rm":
                mine["ctn"].pop(n, None)
                mine["gone"].append(n)
            elif n in mine["ctn"]:
                mine["ctn"][n]["state"] = "exited"
            else:
                mine["stopped"].append(n)
            print(n)
    elif sub in ("start", "restart"):
        for n in names:
            if n in mine["ctn"]:
                mine["ctn"][n]["state"] = "running"
            mine["stopped"] = [s for s in mine["stopped"] if s != n]
            print(n)
    elif sub in ("build", "pull", "tag", "rmi"):
        refs = ([v for i, v in enumerate(rest[1:]) if rest[i] in ("-t", "--tag")] + [a[len("--tag="):] for a in rest
                if a.startswith("--tag=")] if sub == "build" else names[-1:] if sub in ("pull", "tag") else names)
        for ref in refs:
            if sub == "rmi":
                mine["images"] = [r for r in mine["images"] if r != ref]
                mine["rmi"].append(ref)
            else:
                mine["images"].append(ref)
                mine["rmi"] = [r for r in mine["rmi"] if r != ref]
    save_json(path, data)
    if out:
        print(out)
    return 0


def docker():
    glob, sub, rest = split_docker(ARGS)
    if sub not in QUERIES:
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
        if sub == "logs":
            _, mine, _ = sandbox_state()
            name = [a for a in rest if not a.startswith("-")][-1:]
            ports = list(CONF["ports"]) + (mine["ctn"].get(name[0], {}).get("ports", []) if name else [])
            for p in sorted(set(ports)):
                print("Ready: API on port %s" % p)
            return 0
        return mutate(sub, rest, len(os.listdir(os.path.join(ROOT, "calls"))))
    remote = [g for g in glob if g.split("=", 1)[0] not in LOCAL_GLOBAL]
    if remote:
        stop("docker %s: the sandbox asks only the head's own daemon, not another one (%s)"
             % (" ".join(ARGS)[:200], " ".join(remote)))
    ans = Answer()
    if sub == "ps":
        code = q_ps(sub, rest, ans)
    elif sub == "images":
        code = q_images(sub, rest, ans)
    elif sub in ("version", "info", "--version"):
        code = q_system(sub, rest, ans)
    else:
        code = q_inspect(sub, rest, ans)
    record("stub", extra={"answer": ans.kind, "reasons": ans.reasons})
    return code
'''
