"""State: containers.json / images.json under an exclusive lock, atomic replace; the container and image
records (the shapes in the package docstring)."""
import json
import os
import re
from pathlib import Path

import labstate

from .base import ENGINE_IMAGE_LABELS, ENGINE_REPOS, STATE_DIR, DockerError
from .timefmt import ZERO_TIME, now_utc, rfc3339

# hashlib and secrets are imported where used (a new record): every docker call on a lab host is a fresh Python,
# and ps, inspect or logs make none.

NONE = "<none>"                 # Repository and Tag of an image no tag names (docker's <none>:<none>)


class Store:
    def __init__(self, root=STATE_DIR):
        self.root = Path(root)
        self._lock = None

    def __enter__(self):
        os.umask(0o002)
        for d in (self.root, self.root / "logs", self.root / "run"):
            if not d.is_dir():
                try:
                    d.mkdir(parents=True, exist_ok=True)
                except PermissionError as exc:
                    raise DockerError("permission denied while trying to connect to the Docker daemon "
                                      "socket (lab: cannot create %s)" % d) from exc
        self._lock = labstate.locked(self.root)
        try:
            self._lock.__enter__()
        except PermissionError as exc:
            raise DockerError("permission denied while trying to connect to the Docker daemon socket at "
                              "unix:///var/run/docker.sock (lab: %s is writable by root and group docker)"
                              % self.root) from exc
        self.containers = labstate.read_json(self.root / "containers.json", [])
        self.images = labstate.read_json(self.root / "images.json", None) or []
        self._orig = json.dumps([self.containers, self.images], sort_keys=True)
        return self

    def save(self):
        if json.dumps([self.containers, self.images], sort_keys=True) != self._orig:
            labstate.write_json(self.root / "containers.json", self.containers, mode=0o664)
            labstate.write_json(self.root / "images.json", self.images, mode=0o664)
            self._orig = json.dumps([self.containers, self.images], sort_keys=True)

    def __exit__(self, *exc):
        try:
            if exc[0] is None:
                self.save()
        finally:
            self._lock.__exit__(*exc)

    # lookups ---------------------------------------------------------------------------------
    def find(self, ref):
        """By name (with or without the leading '/'), full id or unique id prefix, like docker."""
        name = ref[1:] if ref.startswith("/") else ref
        for c in self.containers:
            if c["Name"] == name or c["Id"] == ref:
                return c
        if re.fullmatch(r"[0-9a-f]+", ref):
            hits = [c for c in self.containers if c["Id"].startswith(ref)]
            if len(hits) == 1:
                return hits[0]
        return None

    def get(self, ref):
        c = self.find(ref)
        if c is None:
            raise DockerError("Error response from daemon: No such container: %s" % ref)
        return c

    def image(self, ref, create=False):
        repo, tag = split_image(ref)
        if "@" in ref:                    # repo@sha256:... (a RepoDigests entry), like docker
            for im in self.images:
                if ref in im.get("RepoDigests", []):
                    return im
            if not create:
                return None
        for im in self.images:
            if im["Repository"] == repo and im["Tag"] == tag:
                return im
            if ref.startswith("sha256:") and im["Id"] == ref or (len(ref) >= 12 and im["Id"][7:].startswith(ref)):
                return im
        if not create:
            return None
        im = make_image(repo, tag)
        self.images.append(im)
        return im

    def log_path(self, name):
        return self.root / "logs" / ("%s.log" % name)


def split_image(ref):
    """'repo:tag' -> (repo, tag); default tag latest; registry ports kept in repo."""
    if "@" in ref:
        ref = ref.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
    else:
        repo, tag = ref, "latest"
    return repo, tag


def make_image(repo, tag, created=None, size=None):
    """A deterministic image record (ids derive from the name, as a stable lab fiction)."""
    import hashlib
    h = hashlib.sha256(("lab-image:%s:%s" % (repo, tag)).encode()).hexdigest()
    d = hashlib.sha256(("lab-digest:%s:%s" % (repo, tag)).encode()).hexdigest()
    return {
        "Repository": repo, "Tag": tag, "Id": "sha256:" + h,
        "RepoDigests": ["%s@sha256:%s" % (repo, d)],
        "Created": created or "2026-09-01T00:00:00.000000000Z",
        "Size": size if size is not None else 40_000_000 + int(h[:6], 16) * 150,
        "Labels": dict(ENGINE_IMAGE_LABELS) if repo.rsplit("/", 1)[-1] in ENGINE_REPOS else {},
    }


def image_labels(im):
    """Config.Labels of an image record (records written before labels existed get the defaults)."""
    if "Labels" in im:
        return dict(im["Labels"] or {})
    return dict(ENGINE_IMAGE_LABELS) if im["Repository"].rsplit("/", 1)[-1] in ENGINE_REPOS else {}


def is_engine_image(image):
    return split_image(image)[0].rsplit("/", 1)[-1] in ENGINE_REPOS


def new_container(store, name, image, cmd=None, env=None, labels=None, mounts=None, network="bridge",
                  entrypoint=None, host_config=None, created=None, ports=None, stats=None):
    """Build a container record in the 'created' state (also used by host_seed.py)."""
    import secrets
    im = store.image(image, create=True)
    created = created or rfc3339(now_utc())
    cid = secrets.token_hex(32)
    hc = {"NetworkMode": network, "Binds": [], "RestartPolicy": {"Name": "no", "MaximumRetryCount": 0},
          "AutoRemove": False, "Privileged": False, "IpcMode": "private", "PortBindings": {}}
    hc.update(host_config or {})
    mounts = mounts or []
    hc["Binds"] = ["%s:%s%s" % (m["Source"], m["Destination"], ":" + m["Mode"] if m["Mode"] else "")
                   for m in mounts if m["Type"] == "bind"]
    return {
        "Id": cid, "Name": name, "Image": image, "ImageId": im["Id"], "RepoDigests": im["RepoDigests"],
        "Created": created,
        "State": {"Status": "created", "Running": False, "Paused": False, "Pid": 0, "ExitCode": 0,
                  "StartedAt": ZERO_TIME, "FinishedAt": ZERO_TIME},
        "Config": {"Image": image, "Env": list(env or []), "Labels": dict(labels or {}),
                   "Cmd": list(cmd or []), "Entrypoint": entrypoint, "Hostname": cid[:12],
                   "WorkingDir": ""},
        "Mounts": mounts, "HostConfig": hc,
        # by the image itself, not by how it was named: `docker run sha256:<id>` or `repo@sha256:...` of an
        # engine image runs the engine, as docker would
        "Lab": {"engine": is_engine_image(image) or is_engine_image(im["Repository"]), "pgid": 0,
                "ports": list(ports or []),
                "stats": dict(stats or {})},
    }
