"""docker run / docker create: a container record (an engine container gets its process), or a one-off
command in an image's filesystem."""
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

from ..base import DEFAULT_PATH, ENGINE_REPOS, DockerError
from ..builder import IMAGE_WORKDIR, image_rootfs
from ..cli import Flags, write_stdout
from ..procs import reconcile, start_container
from ..store import Store, image_labels, new_container
from ..timefmt import now_utc, rfc3339


def _parse_volume(spec):
    parts = spec.split(":")
    if len(parts) < 2 or len(parts) > 3:
        raise DockerError("invalid volume specification: '%s'" % spec, 125)
    src, dst = parts[0], parts[1]
    mode = parts[2] if len(parts) == 3 else ""
    if not dst.startswith("/"):
        raise DockerError("invalid volume specification: '%s': invalid mount config for type \"bind\": "
                          "invalid mount path: '%s' mount path must be absolute" % (spec, dst), 125)
    rw = "ro" not in mode.split(",")
    if src.startswith("/") or src.startswith("."):
        return {"Type": "bind", "Source": os.path.abspath(src), "Destination": dst, "Mode": mode, "RW": rw,
                "Propagation": "rprivate"}
    return {"Type": "volume", "Name": src, "Source": "/var/lib/docker/volumes/%s/_data" % src,
            "Destination": dst, "Mode": mode or "z", "RW": rw, "Propagation": ""}


def _parse_mount(spec):
    kv = {}
    for part in spec.split(","):
        k, eq, v = part.partition("=")
        kv[k] = v if eq else "true"
    src = kv.get("source") or kv.get("src", "")
    dst = kv.get("target") or kv.get("destination") or kv.get("dst", "")
    ro = kv.get("readonly", kv.get("ro", "false")) in ("true", "1")
    typ = kv.get("type", "volume")
    return {"Type": typ, "Source": src, "Destination": dst, "Mode": "", "RW": not ro,
            "Propagation": "rprivate" if typ == "bind" else ""}


def env_items(values, env_files):
    """-e K=V keeps V; -e K takes K from the caller's environment (skipped if unset), like docker."""
    out = {}
    order = []

    def add(item):
        k, eq, v = item.partition("=")
        if not k:
            raise DockerError("invalid environment variable: %s" % item, 125)
        if not eq:
            if k not in os.environ:
                return
            v = os.environ[k]
        if k not in out:
            order.append(k)
        out[k] = v

    for fpath in env_files:
        try:
            with open(fpath) as fh:
                for line in fh:
                    line = line.rstrip("\n").lstrip()
                    if not line or line.startswith("#"):
                        continue
                    add(line)
        except OSError as exc:
            raise DockerError("open %s: no such file or directory" % fpath, 125) from exc
    for item in values:
        add(item)
    return ["%s=%s" % (k, out[k]) for k in order]


RUN_SPEC = [
    ("-d|--detach", "detach", False, False), ("--name", "name", True, False),
    ("--network|--net", "network", True, False), ("-v|--volume", "volume", True, True),
    ("--mount", "mount", True, True), ("-e|--env", "env", True, True), ("--env-file", "envfile", True, True),
    ("-l|--label", "label", True, True), ("--rm", "rm", False, False), ("--restart", "restart", True, False),
    ("--gpus", "gpus", True, False), ("--ipc", "ipc", True, False), ("--shm-size", "shm", True, False),
    ("--privileged", "privileged", False, False), ("--ulimit", "ulimit", True, True),
    ("--device", "device", True, True), ("-w|--workdir", "workdir", True, False),
    ("--entrypoint", "entrypoint", True, False), ("--init", "init", False, False),
    ("-u|--user", "user", True, False), ("-h|--hostname", "hostname", True, False),
    ("--cap-add", "capadd", True, True), ("--security-opt", "secopt", True, True),
    ("--pid", "pid", True, False), ("-p|--publish", "publish", True, True), ("-i|--interactive", "i", False, False),
    ("-t|--tty", "t", False, False), ("--runtime", "runtime", True, False), ("--pull", "pull", True, False),
    ("--memory|-m", "memory", True, False), ("--cpus", "cpus", True, False),
    ("--add-host", "addhost", True, True), ("--group-add", "groupadd", True, True),
    ("--log-driver", "logdriver", True, False), ("--log-opt", "logopt", True, True),
    ("--stop-timeout", "stoptimeout", True, False), ("--platform", "platform", True, False),
]


RUN_EXTRA_ENV = "/etc/dsv41-lab/docker-run-extra.env"


def run_extra_env():
    """Lab knob: ``NAME=value`` lines of RUN_EXTRA_ENV (``LAB_DOCKER_RUN_EXTRA_ENV`` names another file) are
    added to every container this host's docker creates, as if the launch on this host had been edited
    after it was predicted; no file, nothing added."""
    path = os.environ.get("LAB_DOCKER_RUN_EXTRA_ENV", RUN_EXTRA_ENV)
    try:
        with open(path, encoding="utf-8") as fh:
            return [ln.strip() for ln in fh if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", ln.strip())]
    except OSError:
        return []


RUN_DEVICES = "/etc/dsv41-lab/docker-run-devices"


def run_devices(flags):
    """HostConfig.Devices as docker shows them ({"PathOnHost", "PathInContainer", "CgroupPermissions"}) for the
    run's ``--device host[:container[:perms]]`` flags, plus the lab knob RUN_DEVICES (``LAB_DOCKER_RUN_DEVICES``
    names another file): one such spec per line, added to every container this host's docker creates, as if the
    launch on this host had been edited to pass the DRM node; no file, nothing added."""
    specs = list(flags)
    try:
        with open(os.environ.get("LAB_DOCKER_RUN_DEVICES", RUN_DEVICES), encoding="utf-8") as fh:
            specs += [ln.strip() for ln in fh if ln.strip() and not ln.lstrip().startswith("#")]
    except OSError:
        pass
    out = []
    for spec in specs:
        parts = spec.split(":")
        out.append({"PathOnHost": parts[0], "PathInContainer": parts[1] if len(parts) > 1 and parts[1] else parts[0],
                    "CgroupPermissions": parts[2] if len(parts) > 2 and parts[2] else "rwm"})
    return out


def cmd_run(argv, create_only=False):
    f = Flags(RUN_SPEC, argv, "create" if create_only else "run", stop_at_positional=True)
    if not f.args:
        raise DockerError('"docker run" requires at least 1 argument.', 1)
    image, cmd = f.args[0], f.args[1:]
    if not create_only and not f.get("detach") and (f.get("entrypoint") or (cmd and cmd[0] in ONE_OFF_TOOLS)):
        return run_one_off(f, image, ([f.get("entrypoint")] if f.get("entrypoint") else []) + cmd)
    name = f.get("name") or ("lab_%s" % secrets.token_hex(4))
    if not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", name):
        raise DockerError('Invalid container name (%s), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed' % name, 125)
    mounts = [_parse_volume(v) for v in f.get("volume", [])] + [_parse_mount(m) for m in f.get("mount", [])]
    labels = {}
    for item in f.get("label", []):
        k, _, v = item.partition("=")
        labels[k] = v
    env = ["PATH=" + DEFAULT_PATH] + env_items(f.get("env", []), f.get("envfile", [])) + run_extra_env()
    # a later PATH from -e wins, as in docker
    if sum(1 for e in env if e.startswith("PATH=")) > 1:
        env = env[1:]
    ports = []
    for p in f.get("publish", []):
        m = re.fullmatch(r"(?:([\d.]+):)?(\d+):(\d+)(?:/(tcp|udp))?", p)
        if not m:
            raise DockerError("invalid publish spec: %s" % p, 125)
        ports.append({"IP": m.group(1) or "0.0.0.0", "PublicPort": int(m.group(2)),
                      "PrivatePort": int(m.group(3)), "Type": m.group(4) or "tcp"})
    hc = {"RestartPolicy": {"Name": f.get("restart", "no"), "MaximumRetryCount": 0},
          "AutoRemove": bool(f.get("rm")), "Privileged": bool(f.get("privileged")),
          "IpcMode": f.get("ipc", "private"), "ShmSize": f.get("shm", "64m"),
          "Devices": run_devices(f.get("device", [])), "CapAdd": f.get("capadd"), "SecurityOpt": f.get("secopt"),
          "Ulimits": f.get("ulimit", []), "PidMode": f.get("pid", ""), "Runtime": f.get("runtime", "runc"),
          "Init": bool(f.get("init")), "ExtraHosts": f.get("addhost")}
    if f.get("gpus"):
        hc["DeviceRequests"] = [{"Driver": "", "Count": -1 if f.get("gpus") == "all" else 1,
                                 "Capabilities": [["gpu"]], "Options": {}}]
    entrypoint = [f.get("entrypoint")] if f.get("entrypoint") else None
    with Store() as store:
        reconcile(store)
        old = next((x for x in store.containers if x["Name"] == name), None)
        if old is not None:
            raise DockerError('docker: Error response from daemon: Conflict. The container name "/%s" is already '
                              'in use by container "%s". You have to remove (or rename) that container to be '
                              "able to reuse that name.\nSee 'docker run --help'." % (name, old["Id"]), 125)
        if store.image(image) is None:
            sys.stderr.write("Unable to find image '%s' locally\n(lab stand-in: recording it as pulled)\n"
                             % (image if ":" in image.rsplit("/", 1)[-1] else image + ":latest"))
        c = new_container(store, name, image, cmd=cmd, env=env, labels=labels, mounts=mounts,
                          network=f.get("network", "bridge"), entrypoint=entrypoint, host_config=hc, ports=ports)
        if f.get("workdir"):
            c["Config"]["WorkingDir"] = f.get("workdir")
        if f.get("hostname"):
            c["Config"]["Hostname"] = f.get("hostname")
        store.containers.append(c)
        try:
            store.log_path(name).unlink()
        except FileNotFoundError:
            pass
        if not create_only:
            start_container(store, c)
    write_stdout(c["Id"] + "\n")
    return 0


# Tools a one-off ``docker run [--rm] [--entrypoint TOOL] IMAGE [TOOL] ARGS...`` may run inside an
# image: the host's tool, with every absolute path argument (and -w) mapped into the image rootfs
# and the rootfs prefix removed from its output, so output and exit code are the real tool's.
ONE_OFF_TOOLS = {"sha256sum", "md5sum", "cat", "ls", "head", "tail", "wc", "stat", "test", "true", "false"}


def _map_into(rootfs, arg):
    if arg.startswith("/"):
        return str(rootfs) + arg
    k, eq, v = arg.partition("=")
    if k.startswith("--") and eq and v.startswith("/"):
        return "%s=%s%s" % (k, rootfs, v)
    return arg


# The engine's own source tree, the base layer every engine image shares: the lab keeps one per engine version
# (the image's org.opencontainers.image.version label) plus a common part, read by one-off commands under
# ENGINE_SOURCE_IN_IMAGE when the image's own rootfs (the adapters a build copied) does not have the path.
ENGINE_SOURCE_DIR = Path(os.environ.get("LAB_DOCKER_ENGINE_SRC", "/usr/local/lib/dsv41-lab/seed/engine_src"))
ENGINE_SOURCE_IN_IMAGE = "/sgl-workspace/sglang/"


def engine_source_layers(im):
    """[(host dir, path prefix in the image)] of an engine image's source layers, most specific first."""
    if im is None or im.get("Repository", "").rsplit("/", 1)[-1] not in ENGINE_REPOS:
        return []
    version = image_labels(im).get("org.opencontainers.image.version", "")
    names = ([version] if version and "/" not in version and not version.startswith(".") else []) + ["common"]
    return [(ENGINE_SOURCE_DIR / n, ENGINE_SOURCE_IN_IMAGE) for n in names if (ENGINE_SOURCE_DIR / n).is_dir()]


def _map_layered(rootfs, layers, arg):
    """An argument mapped into the image: the rootfs path, or a source layer's where only the layer has it."""
    mapped = _map_into(rootfs, arg)
    if arg.startswith("/") and not os.path.lexists(mapped):
        for root, inside in layers:
            if arg.startswith(inside) and os.path.lexists(root / arg[len(inside):]):
                return str(root / arg[len(inside):])
    return mapped


def run_one_off(f, image, argv):
    """A non-engine command in IMAGE's filesystem (the built image's rootfs; empty for others)."""
    import tempfile
    exe = argv[0] if argv else ""
    if not argv:
        raise DockerError("docker: Error response from daemon: no command specified.", 125)
    with Store() as store:
        reconcile(store)
        im = store.image(image)
        if im is None:
            sys.stderr.write("Unable to find image '%s' locally\n(lab stand-in: recording it as pulled)\n"
                             % (image if ":" in image.rsplit("/", 1)[-1] else image + ":latest"))
            im = store.image(image, create=True)
        rootfs = image_rootfs(store.root, im["Id"])
        layers = engine_source_layers(im)
        record = None
        if not f.get("rm"):
            record = new_container(store, f.get("name") or ("lab_%s" % secrets.token_hex(4)), image,
                                   cmd=argv[1:] if f.get("entrypoint") else argv,
                                   entrypoint=[exe] if f.get("entrypoint") else None)
            if any(x["Name"] == record["Name"] for x in store.containers):
                raise DockerError('docker: Error response from daemon: Conflict. The container name "/%s" is '
                                  "already in use." % record["Name"], 125)
            store.containers.append(record)
    if os.path.basename(exe) not in ONE_OFF_TOOLS or "/" in exe and not exe.startswith(("/usr/bin/", "/bin/")):
        sys.stderr.write('docker: Error response from daemon: failed to create task for container: failed to '
                         'create shim task: OCI runtime create failed: runc create failed: unable to start '
                         'container process: exec: "%s": executable file not found in $PATH: unknown.\n' % exe)
        rc = 127
    else:
        env = {"PATH": DEFAULT_PATH, "HOME": "/root", "LC_ALL": "C.UTF-8"}
        env.update(dict(e.partition("=")[::2] for e in env_items(f.get("env", []), f.get("envfile", []))))
        with tempfile.TemporaryDirectory(prefix="lab-docker-run-") as empty:
            workdir = f.get("workdir") or IMAGE_WORKDIR
            cwd = Path(_map_into(rootfs, workdir)) if workdir.startswith("/") else rootfs / IMAGE_WORKDIR[1:]
            if not cwd.is_dir():
                cwd = Path(empty)
            p = subprocess.run([os.path.basename(exe)] + [_map_layered(rootfs, layers, a) for a in argv[1:]],
                               cwd=str(cwd), env=env, stdin=subprocess.DEVNULL, capture_output=True)
        out, err = p.stdout, p.stderr
        for root, _inside in layers:
            out, err = out.replace(str(root).encode(), b""), err.replace(str(root).encode(), b"")
        prefix = str(rootfs).encode()
        sys.stdout.buffer.write(out.replace(prefix, b""))
        sys.stdout.flush()
        sys.stderr.buffer.write(err.replace(prefix, b""))
        sys.stderr.flush()
        rc = p.returncode
    if record is not None:
        with Store() as store:
            c = store.find(record["Id"])
            if c is not None:
                now = rfc3339(now_utc())
                c["State"].update(Status="exited", ExitCode=rc, StartedAt=now, FinishedAt=now)
    return rc
