"""Built images: a root filesystem holding only what the lab build copies (the adapter directory)."""
import hashlib
import json
import os
from pathlib import Path

from .base import ENGINE_IMAGE_LABELS, DockerError
from .store import NONE, image_labels, is_engine_image, split_image
from .timefmt import now_utc, rfc3339

IMAGE_WORKDIR = "/sgl-workspace"                 # WORKDIR of the engine image
IMAGE_ADAPTER_DIR = "sgl-workspace/adapter"      # where the build copies <context>/adapter/*.py
ENGINE_BASE_SIZE = 38_412_300_000                # the engine base image (bytes); adapters add theirs


def image_rootfs(root, image_id):
    """<state>/images/<64 hex>/rootfs for an image id (with or without the sha256: prefix)."""
    return Path(root) / "images" / image_id.split(":", 1)[-1] / "rootfs"


def build_files(context):
    """{name: bytes} of what a build of CONTEXT copies: the regular *.py files directly in
    CONTEXT/adapter (sitecustomize.py included; subdirectories such as tp4/ are not copied)."""
    adir = Path(context) / "adapter"
    if not adir.is_dir():
        raise DockerError("COPY failed: file not found in build context or excluded by .dockerignore: "
                          "stat adapter: file does not exist")
    out = {}
    for p in sorted(adir.iterdir()):
        if p.suffix == ".py" and p.is_file():
            try:
                out[p.name] = p.read_bytes()
            except OSError as exc:
                raise DockerError("COPY failed: %s" % exc) from exc
    return out


def build_image_id(files, labels):
    """The image id: sha256 over the labels and the copied files (same content -> same id)."""
    doc = {"base": "dsv41-sglang-base", "workdir": IMAGE_WORKDIR, "labels": labels,
           "files": {"/%s/%s" % (IMAGE_ADAPTER_DIR, n): hashlib.sha256(b).hexdigest() for n, b in files.items()}}
    return "sha256:" + hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def write_rootfs(root, image_id, files):
    final = image_rootfs(root, image_id).parent
    if (final / "rootfs").is_dir():
        return
    tmp = final.with_name(".%s.%d.tmp" % (final.name, os.getpid()))
    adir = tmp / "rootfs" / IMAGE_ADAPTER_DIR
    adir.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        with open(adir / name, "wb") as fh:
            fh.write(data)
        os.chmod(adir / name, 0o644)
    os.replace(tmp, final)


def tag_image(store, ref, image_id, template):
    """Point REF at IMAGE_ID: the image it named before keeps its other tags or becomes <none>:<none>."""
    repo, tag = split_image(ref)
    current = next((i for i in store.images if i["Repository"] == repo and i["Tag"] == tag), None)
    if current is not None and current["Id"] == image_id:
        return current
    if current is not None:
        if any(i is not current and i["Id"] == current["Id"] for i in store.images):
            store.images.remove(current)
        else:
            current.update(Repository=NONE, Tag=NONE)
    dangling = next((i for i in store.images if i["Id"] == image_id and i["Repository"] == NONE), None)
    if dangling is not None:
        dangling.update(Repository=repo, Tag=tag)
        return dangling
    rec = dict(template, Repository=repo, Tag=tag)
    store.images.append(rec)
    return rec


def build_image(store, tags, context, labels=None, created=None):
    """Build an image from the launcher checkout CONTEXT and tag it; returns the record of tags[0].

    Labels: the engine labels (or those of the image the first tag named before) plus ``labels``.
    An existing id (same content) is reused as docker's cache would (its Created stays).
    """
    files = build_files(context)
    first = store.image(tags[0])
    base = image_labels(first) if first is not None else (
        dict(ENGINE_IMAGE_LABELS) if is_engine_image(tags[0]) else {})
    base.update(labels or {})
    image_id = build_image_id(files, base)
    write_rootfs(store.root, image_id, files)
    existing = next((i for i in store.images if i["Id"] == image_id), None)
    template = dict(existing) if existing is not None else {
        "Id": image_id, "RepoDigests": [], "Created": created or rfc3339(now_utc()),
        "Size": ENGINE_BASE_SIZE + sum(len(b) for b in files.values()), "Labels": base,
        "Lab": {"rootfs": str(image_rootfs(store.root, image_id).relative_to(store.root)),
                "context": str(Path(context).resolve()), "files": sorted(files)}}
    template.pop("Repository", None)
    template.pop("Tag", None)
    recs = [tag_image(store, t, image_id, template) for t in tags]
    return recs[0]
