# -*- coding: utf-8 -*-
"""Run a Python program an answer supplied (a graded code task) inside real isolation, never on the host.

The program is text an engine produced: it runs under bubblewrap (``bwrap``, installed on the head by the
``launch_sandbox`` role) in new user, mount, pid, network, ipc and uts namespaces, every capability dropped, with
nothing of the host but ``/usr`` read-only (and the ``/bin``, ``/lib`` links of a merged-/usr system): no home, no
``/etc``, no secrets, no docker socket, no network; a private ``/tmp``. CPU time, address space and file size are
limited, the wall time too (the whole process group is killed at the deadline), and the output kept is bounded.
Standard library only.
"""
from __future__ import absolute_import, division, print_function

import os
import signal
import subprocess

__metaclass__ = type

PYTHON = "/usr/bin/python3"
TIMEOUT_S = 10
CPU_S = 10
MEMORY_BYTES = 512 * 1024 * 1024
FILE_BYTES = 1024 * 1024
OUTPUT_BYTES = 64 * 1024
ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class IsolationError(Exception):
    pass


def which_bwrap(path=None):
    """``path`` when it is an executable, else bwrap from the system's directories, else None."""
    for candidate in ([path] if path else []) + ["/usr/bin/bwrap", "/bin/bwrap", "/usr/local/bin/bwrap"]:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def root_view():
    """bwrap arguments showing ``/usr`` read-only and the host's root links to it (``/lib64`` -> ``usr/lib64``)
    or, where they are directories, read-only binds of them: what the interpreter needs, nothing else."""
    args = ["--ro-bind", "/usr", "/usr"]
    for path in ROOT_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def argv(bwrap, program, python=PYTHON):
    return ([bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"] + root_view()
            + ["--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/tmp", "--clearenv",
               "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
               python, "-I", "-S", "-c", program])


def _limits():
    import resource
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_BYTES, FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run(program, bwrap=None, python=PYTHON, timeout=TIMEOUT_S):
    """(returncode, output) of ``program`` run isolated; output is stdout then stderr, at most OUTPUT_BYTES.
    A program still running at ``timeout`` seconds is killed with its process group (returncode -9)."""
    found = which_bwrap(bwrap)
    if not found:
        raise IsolationError("bwrap is not installed on this host: an answer's code runs only inside real isolation "
                             "(the launch_sandbox role installs bubblewrap on the head)")
    if not os.path.isfile(python):
        raise IsolationError("%s is not on this host: the graded code tasks need a Python 3 under /usr" % python)
    proc = subprocess.Popen(argv(found, program, python), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, preexec_fn=_limits, start_new_session=True, close_fds=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        out, _ = proc.communicate()
        return -9, "killed after %d s (the program did not finish)" % timeout
    text = out[:OUTPUT_BYTES].decode("utf-8", "replace")
    if proc.returncode and text.startswith("bwrap:"):
        raise IsolationError("the isolation could not start (%s): nothing was run" % text.strip()[:300])
    return proc.returncode, text
