"""docker build: copies a launcher checkout's adapter/*.py into an image's root filesystem (lab_docker/builder.py)."""
import hashlib
import os
import re
from pathlib import Path

from ..base import ENGINE_IMAGE_LABELS, DockerError
from ..builder import (ENGINE_BASE_SIZE, IMAGE_WORKDIR, build_files, build_image, build_image_id, image_rootfs,
                       write_rootfs)
from ..cli import Flags, write_stdout
from ..procs import reconcile
from ..sizes import human_size
from ..store import NONE, Store, split_image
from ..timefmt import now_utc, rfc3339


def cmd_build(argv):
    """docker build -t TAG [-t TAG2] [-f FILE] [--build-arg K=V] [--label K=V] [-q] [--no-cache] DIR."""
    f = Flags([("-t|--tag", "tag", True, True), ("-f|--file", "file", True, False),
               ("--build-arg", "buildarg", True, True), ("--label", "label", True, True),
               ("-q|--quiet", "quiet", False, False), ("--no-cache", "nocache", False, False),
               ("--pull", "pull", False, False), ("--rm", "rm", False, False),
               ("--progress", "progress", True, False), ("--network", "network", True, False),
               ("--platform", "platform", True, False)], argv, "build")
    if len(f.args) != 1:
        raise DockerError('"docker build" requires exactly 1 argument.', 1)
    context = f.args[0]
    if not os.path.isdir(context):
        raise DockerError('ERROR: unable to prepare context: path "%s" not found' % context, 1)
    if f.get("file"):
        dfile = f.get("file")
        if not os.path.isfile(dfile) and not os.path.isabs(dfile) and os.path.isfile(os.path.join(context, dfile)):
            dfile = os.path.join(context, dfile)
        if not os.path.isfile(dfile):
            raise DockerError("ERROR: unable to prepare context: unable to evaluate symlinks in Dockerfile path: "
                              "lstat %s: no such file or directory" % os.path.abspath(dfile), 1)
    tags = f.get("tag", [])
    for t in tags:
        if not re.fullmatch(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9._-]+)*(?::[\w][\w.-]{0,127})?", t):
            raise DockerError('ERROR: invalid tag "%s": invalid reference format' % t, 1)
    labels = {}
    for item in f.get("label", []):
        k, _, v = item.partition("=")
        labels[k] = v
    files = build_files(context)
    with Store() as store:
        reconcile(store)
        if tags:
            rec = build_image(store, tags, context, labels=labels)
            image_id = rec["Id"]
        else:  # an untagged build: a dangling image
            base = dict(ENGINE_IMAGE_LABELS, **labels)
            image_id = build_image_id(files, base)
            write_rootfs(store.root, image_id, files)
            if not any(i["Id"] == image_id for i in store.images):
                store.images.append({"Repository": NONE, "Tag": NONE, "Id": image_id, "RepoDigests": [],
                                     "Created": rfc3339(now_utc()), "Labels": base,
                                     "Size": ENGINE_BASE_SIZE + sum(len(b) for b in files.values()),
                                     "Lab": {"rootfs": str(image_rootfs(store.root, image_id).relative_to(store.root)),
                                             "context": str(Path(context).resolve()), "files": sorted(files)}})
    if f.get("quiet"):
        write_stdout(image_id + "\n")
        return 0
    short = image_id[7:19]
    size = sum(len(b) for b in files.values())
    out = ["Sending build context to Docker daemon  %s" % human_size(size, 4),
           "Step 1/2 : FROM dsv41-sglang-base (lab stand-in)",
           " ---> %s" % hashlib.sha256(b"dsv41-sglang-base").hexdigest()[:12],
           "Step 2/2 : COPY adapter/*.py %s/adapter/" % IMAGE_WORKDIR,
           " ---> %s" % short,
           "Successfully built %s" % short]
    out += ["Successfully tagged %s:%s" % split_image(t) for t in tags]
    write_stdout("\n".join(out) + "\n")
    return 0
