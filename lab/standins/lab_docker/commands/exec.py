"""docker exec."""
import subprocess
import sys

from ..base import DockerError
from ..cli import Flags
from ..procs import caller_home, reconcile
from ..store import Store
from .run import env_items


def cmd_exec(argv):
    """exec runs the command on the lab host with the container's env (there is no container fs)."""
    f = Flags([("-i|--interactive", "i", False, False), ("-t|--tty", "t", False, False),
               ("-e|--env", "env", True, True), ("-w|--workdir", "workdir", True, False),
               ("-u|--user", "user", True, False), ("-d|--detach", "detach", False, False)],
              argv, "exec", stop_at_positional=True)
    if len(f.args) < 2:
        raise DockerError('"docker exec" requires at least 2 arguments.', 1)
    with Store() as store:
        reconcile(store)
        c = store.get(f.args[0])
        if not c["State"]["Running"]:
            raise DockerError("Error response from daemon: container %s is not running" % c["Id"])
        if c["State"]["Paused"]:
            raise DockerError("Error response from daemon: Container %s is paused, unpause the container "
                              "before exec" % c["Id"])
        env = dict(e.partition("=")[::2] for e in c["Config"]["Env"])
    env.update(dict(e.partition("=")[::2] for e in env_items(f.get("env", []), [])))
    env.setdefault("HOME", caller_home())
    env["LAB_CONTAINER_NAME"] = c["Name"]
    try:
        return subprocess.call(f.args[1:], env=env, cwd=f.get("workdir") or "/")
    except FileNotFoundError:
        sys.stderr.write('OCI runtime exec failed: exec failed: unable to start container process: exec: "%s": '
                         "executable file not found in $PATH: unknown\n" % f.args[1])
        return 126
