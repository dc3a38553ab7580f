"""docker ps (docker container ls)."""
import re

from ..base import DockerError
from ..cli import Flags, write_stdout
from ..gotemplate import render_list
from ..procs import reconcile
from ..store import Store
from ..timefmt import now_utc
from ..views import PS_DEFAULT, PS_HEADER, created_key, ps_ctx


def _match_filters(c, filters):
    by = {}
    for f in filters:
        k, _, v = f.partition("=")
        by.setdefault(k, []).append(v)
    for k, vals in by.items():
        if k == "name":
            ok = any(re.search(v, c["Name"]) or re.search(v, "/" + c["Name"]) for v in vals)
        elif k == "label":
            labels = c["Config"]["Labels"] or {}
            ok = any((v.partition("=")[0] in labels) and
                     ("=" not in v or labels[v.partition("=")[0]] == v.partition("=")[2]) for v in vals)
        elif k == "status":
            ok = c["State"]["Status"] in vals
        elif k == "id":
            ok = any(c["Id"].startswith(v) for v in vals)
        elif k == "ancestor":
            ok = any(c["Image"] == v or c["Image"] == v + ":latest" or c["ImageId"].startswith(v) for v in vals)
        elif k == "network":
            ok = c["HostConfig"].get("NetworkMode") in vals
        else:
            raise DockerError("Error response from daemon: invalid filter '%s'" % k)
        if not ok:
            return False
    return True


def cmd_ps(argv):
    f = Flags([("-a|--all", "all", False, False), ("-q|--quiet", "quiet", False, False),
               ("--no-trunc", "notrunc", False, False), ("-f|--filter", "filter", True, True),
               ("--format", "format", True, False), ("-s|--size", "size", False, False),
               ("-n|--last", "last", True, False), ("-l|--latest", "latest", False, False)], argv, "ps")
    trunc = not f.get("notrunc")
    now = now_utc()
    with Store() as store:
        reconcile(store)
        cs = sorted(store.containers, key=created_key, reverse=True)
    filters = f.get("filter", [])
    if not f.get("all") and not any(x.startswith("status=") for x in filters):
        cs = [c for c in cs if c["State"]["Running"]]
    cs = [c for c in cs if _match_filters(c, filters)]
    if f.get("latest"):
        cs = cs[:1]
    elif f.get("last"):
        cs = cs[: int(f.get("last"))]
    fmt = "{{.ID}}" if f.get("quiet") else (f.get("format") or PS_DEFAULT)
    write_stdout(render_list(fmt, [ps_ctx(c, trunc, now) for c in cs], PS_HEADER))
    return 0
