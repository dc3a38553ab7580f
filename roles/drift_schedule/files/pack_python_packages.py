#!/usr/bin/env python3
"""Archive installed Python distributions and their dependencies, as installed in this interpreter.

    pack_python_packages.py CACHE_DIR NAME [NAME ...]

The fleet hosts have no package index, so the drift runner's venv gets the control node's own pinned
packages (requirements.txt): every file of each distribution and of everything it requires (markers
evaluated for this interpreter, extras ignored), relative to site-packages. The archive is named by a
digest of the name==version list and this Python's version, so an unchanged set is built once.
Prints JSON {path, created, python, packages}.
"""
import hashlib
import importlib.metadata as md
import json
import os
import sys
import tarfile

from packaging.requirements import Requirement


def closure(names):
    seen, todo = {}, list(names)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        dist = md.distribution(name)
        seen[key] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def main(cache, names):
    dists = closure(names)
    pins = sorted("%s==%s" % (k, d.version) for k, d in dists.items())
    py = "%d.%d" % sys.version_info[:2]
    digest = hashlib.sha256(json.dumps([py, pins]).encode()).hexdigest()[:16]
    path = os.path.join(cache, "python%s-packages-%s.tar.gz" % (py, digest))
    created = False
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        tmp = path + ".partial"
        with tarfile.open(tmp, "w:gz") as tar:
            for dist in dists.values():
                for f in dist.files or []:
                    src = f.locate()
                    if os.path.isfile(src) and "__pycache__" not in f.parts and not str(f).startswith(".."):
                        tar.add(str(src), arcname=str(f))
        os.rename(tmp, path)
        created = True
    print(json.dumps({"path": path, "created": created, "python": py, "packages": pins}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
