"""Processes (engine containers): start, signal and stop the engine under its supervisor (``__lab-supervise``),
and reconcile the records with the processes that still run."""
import json
import os
import signal
import sys
import time
from pathlib import Path

from .base import DEFAULT_PATH, ENGINE, STATE_DIR, SUPERVISE
from .store import Store
from .timefmt import ZERO_TIME, now_utc, rfc3339

# subprocess, select, pwd, the log writer and the image paths are imported where used: every docker call on a lab
# host is a fresh Python, and most (ps, inspect, logs) only reconcile.

# The supervisor runs as the stand-in's own executable file, the package's sibling ``docker`` (the command line
# it had when the stand-in was that one file): python3 -I <dir>/docker __lab-supervise STATE_DIR ID12 LOG -- CMD...
DOCKER_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docker")


def _proc_alive(pid):
    """True if pid runs (not a zombie) and is one of our supervisors."""
    if pid <= 0:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        return False
    return SUPERVISE.encode() in cmdline


def signal_group(pgid, sig):
    """Signal the container's process group; fall back to sudo when the engine is not ours."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        import subprocess
        name = signal.Signals(sig).name[3:]
        subprocess.run(["sudo", "-n", "kill", "-s", name, "--", "-%d" % pgid],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def _run_record(c, pid):
    return STATE_DIR / "run" / ("%s-%d.json" % (c["Id"][:12], pid))


def _exit_record(c, pid):
    """What the supervisor pid recorded when c's engine exited ({} when it recorded nothing readable)."""
    p = _run_record(c, pid)
    if p.exists():
        try:
            return json.loads(p.read_text())
        except ValueError:
            pass
    return {}


def reconcile(store):
    """Engine containers whose process is gone are 'exited' (with the supervisor's exit code)."""
    for c in list(store.containers):
        st, lab = c["State"], c.get("Lab", {})
        if not (lab.get("engine") and lab.get("pgid")) or not st["Running"]:
            continue
        pid = lab["pgid"]
        if _proc_alive(pid):
            continue
        rec = _exit_record(c, pid)
        mark_exited(c, rec.get("ExitCode", 1), rec.get("FinishedAt"))
        if c["HostConfig"].get("AutoRemove"):
            remove_container(store, c)


def mark_exited(c, code, finished=None):
    st = c["State"]
    if st["Running"] or st["Status"] in ("running", "paused"):
        st.update(Status="exited", Running=False, Paused=False, Pid=0, ExitCode=int(code),
                  FinishedAt=finished or rfc3339(now_utc()))
    c["Lab"]["pgid"] = 0


def remove_container(store, c):
    store.containers.remove(c)
    for p in (store.log_path(c["Name"]),):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
    for p in (STATE_DIR / "run").glob("%s-*.json" % c["Id"][:12]):
        try:
            p.unlink()
        except OSError:
            pass


def caller_home():
    home = os.environ.get("HOME")
    if home:
        return home
    import pwd
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return "/"


def start_container(store, c):
    """Start (or restart) a container: engines get a process, others only change state."""
    import subprocess
    from .builder import image_rootfs
    st = c["State"]
    now = rfc3339(now_utc())
    if c["Lab"].get("engine"):
        env = {}
        for item in c["Config"]["Env"]:
            k, _, v = item.partition("=")
            env[k] = v
        env["PATH"] = os.environ.get("PATH", DEFAULT_PATH)
        env["HOME"] = caller_home()
        env["PYTHONUNBUFFERED"] = "1"
        env["LAB_CONTAINER_NAME"] = c["Name"]
        env["LAB_MOUNTS"] = json.dumps({m["Destination"]: m["Source"] for m in c["Mounts"]}, sort_keys=True)
        im = next((i for i in store.images if i["Id"] == c.get("ImageId")), None) or store.image(c["Image"])
        env["LAB_IMAGE_ROOT"] = str(image_rootfs(store.root, (im or {}).get("Id") or c.get("ImageId") or "none"))
        argv = [sys.executable, ENGINE] + list(c["Config"]["Cmd"])
        logp = store.log_path(c["Name"])
        with open(logp, "ab"):
            try:
                os.chmod(logp, 0o664)
            except PermissionError:
                pass
        # the supervisor captures the engine's stdout and stderr apart into the json-file log
        proc = subprocess.Popen(
            [sys.executable, "-I", DOCKER_FILE, SUPERVISE, str(STATE_DIR), c["Id"][:12], str(logp),
             "--"] + argv,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/",
            start_new_session=True, close_fds=True)
        c["Lab"]["pgid"] = proc.pid
        st["Pid"] = proc.pid
    else:
        st["Pid"] = st.get("Pid") or (1000 + int(c["Id"][:4], 16) % 30000)
    st.update(Status="running", Running=True, Paused=False, ExitCode=0, StartedAt=now,
              FinishedAt=ZERO_TIME if st["FinishedAt"] == ZERO_TIME else st["FinishedAt"])


def stop_many(store_root, refs, timeout, force_kill=False):
    """Stop containers: SIGTERM, wait up to timeout, SIGKILL.  Waits happen outside the lock."""
    with Store(store_root) as store:
        reconcile(store)
        targets = []
        for ref in refs:
            c = store.find(ref)
            if c is None:
                targets.append((ref, None))
                continue
            targets.append((ref, (c["Id"], c["Lab"].get("pgid", 0), c["State"]["Paused"])))
    results = {}
    for ref, info in targets:
        if info is None:
            continue
        cid, pgid, paused = info
        code = 0
        if pgid and _proc_alive(pgid):
            if force_kill:
                signal_group(pgid, signal.SIGKILL)
            else:
                signal_group(pgid, signal.SIGTERM)
                if paused:
                    signal_group(pgid, signal.SIGCONT)
            deadline = time.time() + max(0, timeout)
            while _proc_alive(pgid) and time.time() < deadline:
                time.sleep(0.05)
            if _proc_alive(pgid):
                signal_group(pgid, signal.SIGKILL)
                for _ in range(100):
                    if not _proc_alive(pgid):
                        break
                    time.sleep(0.05)
                code = 137
            else:
                code = 137 if force_kill else None
        results[cid] = (pgid, code)
    return targets, results


def finish_stop(store, c, result):
    pgid, code = result
    if code is None:
        code = _exit_record(c, pgid).get("ExitCode", 143)
    if c["State"]["Running"]:
        mark_exited(c, code)


def supervise(argv):
    """__lab-supervise STATE_DIR ID12 LOG -- CMD...: run the engine, log its two streams, record its exit code.

    Like docker's log copier: each stream is read apart and cut into messages at newlines (a line over
    16 KiB is cut into partial messages); each message is stamped when it is read and appended to LOG as
    one json-file record. Output left without a newline when the stream closes is a last partial message
    (no newline)."""
    import select
    import subprocess
    from .logfile import LOG_MESSAGE_MAX, JsonLogWriter
    state_dir, cid, logpath = argv[0], argv[1], argv[2]
    cmd = argv[4:] if len(argv) > 3 and argv[3] == "--" else argv[3:]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)  # the engine gets the group signal; we outlive it
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = subprocess.Popen(cmd, stdout=out_w, stderr=err_w, stdin=subprocess.DEVNULL)
    finally:
        os.close(out_w)
        os.close(err_w)
    writer = JsonLogWriter(logpath)
    names = {out_r: "stdout", err_r: "stderr"}
    bufs = {out_r: b"", err_r: b""}
    open_fds = [out_r, err_r]
    while open_fds:
        try:
            ready, _, _ = select.select(open_fds, [], [])
        except InterruptedError:
            continue
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except InterruptedError:
                continue
            if not data:
                if bufs[fd]:
                    writer.write(names[fd], bufs[fd])
                    bufs[fd] = b""
                open_fds.remove(fd)
                os.close(fd)
                continue
            buf = bufs[fd] + data
            while True:
                nl = buf.find(b"\n", 0, LOG_MESSAGE_MAX)
                if nl >= 0:
                    writer.write(names[fd], buf[:nl + 1])
                    buf = buf[nl + 1:]
                elif len(buf) >= LOG_MESSAGE_MAX:  # a partial message, no newline
                    writer.write(names[fd], buf[:LOG_MESSAGE_MAX])
                    buf = buf[LOG_MESSAGE_MAX:]
                else:
                    break
            bufs[fd] = buf
    writer.close()
    while True:
        try:
            rc = proc.wait()
            break
        except InterruptedError:
            continue
    code = rc if rc >= 0 else 128 - rc
    rec = Path(state_dir) / "run" / ("%s-%d.json" % (cid, os.getpid()))
    tmp = rec.with_suffix(".tmp")
    os.umask(0o002)
    tmp.write_text(json.dumps({"ExitCode": code, "FinishedAt": rfc3339(now_utc()), "EnginePid": proc.pid}))
    os.replace(tmp, rec)
    return 0
