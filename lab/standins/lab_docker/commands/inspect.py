"""docker inspect (docker container inspect, docker image inspect)."""
import json
import sys

from ..base import DockerError
from ..cli import Flags, write_stdout
from ..gotemplate import render
from ..procs import reconcile
from ..store import Store
from ..views import image_inspect_view, inspect_view


def cmd_inspect(argv, kind=None):
    f = Flags([("-f|--format", "format", True, False), ("-s|--size", "size", False, False),
               ("--type", "type", True, False)], argv, "inspect")
    if not f.args:
        raise DockerError('"docker inspect" requires at least 1 argument.', 1)
    kind = kind or f.get("type")
    fmt = f.get("format")
    tmpl = fmt or None
    found, errors = [], []
    with Store() as store:
        reconcile(store)
        for ref in f.args:
            c = store.find(ref) if kind in (None, "container") else None
            if c is not None:
                found.append(inspect_view(c, store))
                continue
            im = store.image(ref) if kind in (None, "image") else None
            if im is not None:
                found.append(image_inspect_view(im))
                continue
            errors.append(ref)
    if tmpl is None:
        write_stdout(json.dumps(found, indent=4, ensure_ascii=False) + "\n")
    else:
        for obj in found:
            write_stdout(render(tmpl, obj) + "\n")
    for ref in errors:
        what = {"container": "container", "image": "image"}.get(kind, "object")
        sys.stderr.write("Error: No such %s: %s\n" % (what, ref))
    return 1 if errors else 0
