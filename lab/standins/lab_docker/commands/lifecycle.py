"""docker start / stop / restart / pause / unpause / rm / kill."""
import signal
import sys

from ..base import STATE_DIR, DockerError
from ..cli import Flags, write_stdout
from ..procs import finish_stop, mark_exited, reconcile, remove_container, signal_group, start_container, stop_many
from ..store import Store


def cmd_simple(action, argv):
    """start / stop / restart / pause / unpause / rm / kill."""
    spec = [("-t|--time|--timeout", "time", True, False), ("-s|--signal", "signal", True, False),
            ("-f|--force", "force", False, False), ("-v|--volumes", "volumes", False, False),
            ("-a|--attach", "attach", False, False), ("-i|--interactive", "interactive", False, False)]
    f = Flags(spec, argv, action)
    if not f.args:
        raise DockerError('"docker %s" requires at least 1 argument.' % action, 1)
    rc = 0
    timeout = int(f.get("time", 10))
    if action in ("stop", "restart", "kill") or (action == "rm" and f.get("force")):
        targets, results = stop_many(STATE_DIR, f.args, timeout, force_kill=action in ("kill", "rm"))
    else:
        targets, results = [(r, None) for r in f.args], {}
    with Store() as store:
        reconcile(store)
        for ref in f.args:
            c = store.find(ref)
            if c is None:
                if action == "rm" and f.get("force"):
                    continue
                sys.stderr.write("Error response from daemon: No such container: %s\n" % ref)
                rc = 1
                continue
            st = c["State"]
            try:
                if action == "start":
                    if not st["Running"]:
                        start_container(store, c)
                elif action in ("stop", "kill"):
                    if c["Id"] in results:
                        finish_stop(store, c, results[c["Id"]])
                    if action == "kill" and st["Running"]:
                        mark_exited(c, 137)
                    elif st["Running"]:
                        mark_exited(c, 0)
                    if c["HostConfig"].get("AutoRemove"):
                        remove_container(store, c)
                elif action == "restart":
                    if c["Id"] in results:
                        finish_stop(store, c, results[c["Id"]])
                    if st["Running"]:
                        mark_exited(c, 0)
                    start_container(store, c)
                elif action == "pause":
                    if not st["Running"]:
                        raise DockerError("Error response from daemon: container %s is not running" % c["Id"])
                    if st["Paused"]:
                        raise DockerError("Error response from daemon: container %s is already paused" % c["Id"])
                    if c["Lab"].get("pgid"):
                        signal_group(c["Lab"]["pgid"], signal.SIGSTOP)
                    st.update(Status="paused", Paused=True)
                elif action == "unpause":
                    if not st["Paused"]:
                        raise DockerError("Error response from daemon: container %s is not paused" % c["Id"])
                    if c["Lab"].get("pgid"):
                        signal_group(c["Lab"]["pgid"], signal.SIGCONT)
                    st.update(Status="running", Paused=False)
                elif action == "rm":
                    if st["Running"] and not f.get("force"):
                        raise DockerError('Error response from daemon: cannot remove container "/%s": container '
                                          "is running: stop the container before removing or force remove" % c["Name"])
                    if c["Id"] in results:
                        finish_stop(store, c, results[c["Id"]])
                    remove_container(store, c)
            except DockerError as exc:
                sys.stderr.write(str(exc) + "\n")
                rc = 1
                continue
            write_stdout(ref + "\n")
    return rc
