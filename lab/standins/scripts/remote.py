#!/usr/bin/env python3
"""LAB STAND-IN for the launcher checkout's ssh helper (scripts/remote.py), launcher variant "family".

    python3 scripts/remote.py USER@HOST COMMAND-STRING

Runs COMMAND-STRING on HOST as USER over ssh and exits with its exit code. The string is handed to ssh as
one argument, unchanged: the remote login shell parses it (the launcher writes `bash -lc '...'` there), so
every expansion in it already happened on the head. ssh runs non-interactively (BatchMode: no password or
passphrase prompt, a host that asks for one fails) with a 10 s connect timeout, and with the key named by
SSH_IDENTITY when the environment sets it (the launcher's .env, sourced with `set -a`). ssh's own failures
keep ssh's code (255: could not connect or authenticate); a missing ssh is 127, as in a shell.

Standard library only. Lab hosts only; installed by the seeder beside start.sh (lab/seed/host_seed.py).
"""
import os
import subprocess
import sys

CONNECT_TIMEOUT = 10


def ssh_argv(target, command, identity=None):
    """The ssh command line: options, the target, then the command string as one argument."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=%d" % CONNECT_TIMEOUT]
    if identity:
        argv += ["-i", identity]
    return argv + [target, command]


def main(argv):
    if len(argv) != 2 or not argv[0] or argv[0].startswith("-"):
        sys.stderr.write("usage: remote.py USER@HOST COMMAND-STRING\n")
        return 2
    target, command = argv
    try:
        proc = subprocess.run(ssh_argv(target, command, os.environ.get("SSH_IDENTITY") or None), check=False)
    except FileNotFoundError:
        sys.stderr.write("remote.py: ssh: command not found\n")
        return 127
    except KeyboardInterrupt:
        return 130
    # killed by a signal: the shell's 128 + signal number
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
