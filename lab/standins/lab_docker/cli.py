"""The docker command line: argument parsing (docker-style: -abc short clusters, --flag=value, --flag value) and
dispatch to commands/<command>.py, imported only when it is the command run (every docker call on a lab host
is a fresh Python)."""
import importlib
import os
import sys

from .base import AGE, CLIENT_VERSION, STATE_DIR, SUPERVISE, DockerError


class Flags:
    """Parse docker-style options; spec maps each spelling to (key, takes_value, repeatable)."""

    def __init__(self, spec, argv, cmd, stop_at_positional=False):
        self.values, self.args = {}, []
        alias = {}
        for names, key, takes, multi in spec:
            for n in names.split("|"):
                alias[n] = (key, takes, multi)
        i = 0
        while i < len(argv):
            a = argv[i]
            if a == "--":
                self.args.extend(argv[i + 1:])
                break
            if not a.startswith("-") or a == "-":
                if stop_at_positional:
                    self.args.extend(argv[i:])
                    break
                self.args.append(a)
                i += 1
                continue
            if a.startswith("--"):
                name, eq, val = a[2:].partition("=")
                opts = [("--" + name, val if eq else None)]
            else:
                opts, body = [], a[1:]
                while body:
                    n = "-" + body[0]
                    body = body[1:]
                    if n in alias and alias[n][1]:
                        opts.append((n, body.lstrip("=") if body else None))
                        body = ""
                    else:
                        opts.append((n, None))
            for n, val in opts:
                if n not in alias:
                    raise DockerError("unknown flag: %s\nSee 'docker %s --help'." % (n, cmd), 125)
                key, takes, multi = alias[n]
                if takes:
                    if val is None:
                        i += 1
                        if i >= len(argv):
                            raise DockerError("flag needs an argument: %s" % n, 125)
                        val = argv[i]
                else:
                    val = True if val is None else val.lower() not in ("false", "0")
                if multi:
                    self.values.setdefault(key, []).append(val)
                else:
                    self.values[key] = val
            i += 1

    def get(self, key, default=None):
        return self.values.get(key, default)


def write_stdout(s):
    sys.stdout.write(s)


USAGE = """Usage:  docker [OPTIONS] COMMAND

LAB STAND-IN: a subset of the docker CLI backed by %s.

Commands: ps, inspect, stats, logs, start, stop, restart, pause, unpause, rm, kill, run, create,
          exec, images, build, version (also 'docker container ...' and 'docker image ...')
""" % STATE_DIR


# the commands with a module of their own, commands/<command>.py (its cmd_<command> runs it)
COMMANDS = ("ps", "inspect", "stats", "logs", "run", "exec", "images", "version", "build")
LIFECYCLE = ("start", "stop", "restart", "pause", "unpause", "rm", "kill")    # commands/lifecycle.py


def command(name):
    """The function that runs docker NAME (commands/<name>.py's cmd_<name>)."""
    return getattr(importlib.import_module(".commands." + name, __package__), "cmd_" + name)


def main(argv):
    if argv and argv[0] == SUPERVISE:
        from .procs import supervise
        return supervise(argv[1:])
    if argv and argv[0] == AGE:
        from .commands.lab_age import lab_age
        return lab_age(argv[1:])
    if not argv or argv[0] in ("-h", "--help", "help"):
        write_stdout(USAGE)
        return 0
    if argv[0] in ("-v", "--version"):
        write_stdout("Docker version %s, build ce12230\n" % CLIENT_VERSION)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd in ("container", "image") and rest:
        sub = rest[0]
        rest = rest[1:]
        if cmd == "image":
            if sub in ("ls", "list"):
                return command("images")(rest)
            if sub == "inspect":
                return command("inspect")(rest, kind="image")
            if sub == "build":
                return command("build")(rest)
            raise DockerError("docker: 'image %s' is not supported by the lab stand-in" % sub)
        if sub in ("ls", "list", "ps"):
            return command("ps")(rest)
        if sub == "inspect":
            return command("inspect")(rest, kind="container")
        cmd = sub
    if cmd in COMMANDS:
        return command(cmd)(rest)
    if cmd == "create":
        return command("run")(rest, create_only=True)
    if cmd in LIFECYCLE:
        from .commands.lifecycle import cmd_simple
        return cmd_simple(cmd, rest)
    raise DockerError("docker: '%s' is not a docker command.\nSee 'docker --help'" % cmd)


def run(argv):
    """The stand-in run as ``docker ARGV...``: exits with the command's code; a DockerError is reported as docker
    reports it (message on stderr, its exit code)."""
    try:
        sys.exit(main(argv))
    except DockerError as exc:
        sys.stderr.write(str(exc) + "\n")
        sys.exit(exc.code)
    except BrokenPipeError:
        # the reader stopped reading (docker logs ... | head): nothing left to say, and nothing to flush at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.dup2(devnull, sys.stderr.fileno())
        sys.exit(0)
    except KeyboardInterrupt:
        sys.exit(130)
