# -*- coding: utf-8 -*-
"""The read-only queries of the sandbox's docker stand-in, as text (part of the stand-in program; the
rest of the docker stand-in, what it records and how it asks the head's daemon, is in
``module_utils/launcher/docker.py``).

``inspect`` (``container inspect``, ``image inspect``), ``ps``, ``images``, ``version``, ``info`` and
``--version``: the daemon's answer overlaid with what the sandbox changed (containers it started, removed
or stopped; images it built, pulled, tagged or removed), options and filters read as docker reads them,
``--format`` rendered by ``module_utils/launcher/docker_format.py``. An option, filter or type it does not
know stops the evaluation naming it. Standard library only.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCKER_QUERIES = r'''
# ---- docker: read-only queries ---------------------------------------------------------------
PS_HEADER = {"ID": "CONTAINER ID", "Image": "IMAGE", "Command": "COMMAND", "CreatedAt": "CREATED AT",
             "RunningFor": "CREATED", "Ports": "PORTS", "State": "STATE", "Status": "STATUS", "Size": "SIZE",
             "Names": "NAMES", "Labels": "LABELS", "Mounts": "MOUNTS", "LocalVolumes": "LOCAL VOLUMES",
             "Networks": "NETWORKS",
             "default": "{{.ID}}\t{{.Image}}\t{{.Command}}\t{{.RunningFor}}\t{{.Status}}\t{{.Ports}}\t{{.Names}}"}
IMAGES_HEADER = {"Containers": "CONTAINERS", "CreatedAt": "CREATED AT", "CreatedSince": "CREATED",
                 "Digest": "DIGEST", "ID": "IMAGE ID", "Repository": "REPOSITORY", "SharedSize": "SHARED SIZE",
                 "Size": "SIZE", "Tag": "TAG", "UniqueSize": "UNIQUE SIZE", "VirtualSize": "VIRTUAL SIZE",
                 "default": "{{.Repository}}\t{{.Tag}}\t{{.ID}}\t{{.CreatedSince}}\t{{.Size}}"}
FLEET_IMAGE = {"Architecture": "arm64", "Os": "linux"}
FLEET_VERSION = {"Client": {"Os": "linux", "Arch": "arm64"}, "Server": {"Os": "linux", "Arch": "arm64"}}
FLEET_INFO = {"OSType": "linux", "Architecture": "aarch64"}


def ctn_doc(c):
    running = c["state"] == "running"
    state = {"Status": c["state"], "Running": running, "Paused": False, "Restarting": False, "Dead": False}
    if running:
        state["ExitCode"] = 0
    return {"Id": c["id"], "Name": "/" + c["name"], "State": state,
            "Config": {"Image": c["image"], "Env": c["env"], "Cmd": c["command"]},
            "HostConfig": {"NetworkMode": c["network"]}, "Mounts": c["mounts"]}


def ctn_row(c):
    row = {"ID": c["id"], "Names": c["name"], "Image": c["image"], "State": c["state"],
           "Command": json.dumps(" ".join(c["command"])), "RunningFor": "Less than a second ago",
           "Networks": c["network"], "Ports": "", "Labels": "",
           "Mounts": ",".join(m["Source"] for m in c["mounts"])}
    if c["state"] == "running":
        row["Status"] = "Up Less than a second"
    return row


def on_head():
    return HOST == CONF["head"]


def find_container(name, mine, ans):
    """``(inspect object or None, known, from the daemon)``: ``known`` is false when the answer is assumed."""
    c = mine["ctn"].get(name) or next((c for c in mine["ctn"].values() if len(name) >= 3
                                       and re.match(r"^[0-9a-f]+$", name) and c["id"].startswith(name)), None)
    if c:
        return ctn_doc(c), True, False
    if name in mine["gone"]:
        return None, True, False
    if not on_head():
        ans.assume("%s's containers are not visible from the head: only the sandbox's" % HOST)
        return None, False, False
    status, doc = daemon_json(["container", "inspect", name], "object")
    if status == "down":
        ans.assume("no container assumed on the head: %s" % doc)
        return None, False, False
    ans.daemon()
    if status == "missing":
        return None, True, False
    if doc.get("Name", "").lstrip("/") in mine["stopped"] and isinstance(doc.get("State"), dict):
        doc["State"] = {"Status": "exited", "Running": False}
    return doc, True, True


def find_image(ref, mine, ans):
    """``(inspect object or None, from the daemon)``."""
    if ref in mine["rmi"]:
        return None, False
    if not on_head():
        ans.assume("%s's images answered by the head's daemon" % HOST)
    status, doc = daemon_json(["image", "inspect", ref], "object")
    if status == "ok":
        ans.daemon()
        return doc, True
    if ref in mine["images"]:
        ans.assume("%s exists only in the sandbox (built, pulled or tagged there): an image of this fleet" % ref)
    elif status == "missing":
        ans.daemon()
        return None, False
    else:
        ans.assume("image %s assumed an image of this fleet (arm64, linux): %s" % (ref, doc))
    return dict(FLEET_IMAGE, RepoTags=[ref if ":" in ref.rsplit("/", 1)[-1] else ref + ":latest"]), False


def emit(template, docs):
    """``docs``: ``(object, from the daemon)`` pairs; a missing key of the daemon's object is ``<no value>``."""
    try:
        return "".join(render(template, d, lenient) + "\n" for d, lenient in docs)
    except Unrenderable as exc:
        stop("docker %s: the sandbox cannot render the template %s" % (" ".join(ARGS)[:200], exc))


def q_inspect(sub, rest, ans):
    spec = {"-f": ("format", True), "--format": ("format", True), "--type": ("type", True),
            "-s": ("size", False), "--size": ("size", False)}
    opts, names = options(sub, rest, spec)
    kind = {"container-inspect": "container", "image-inspect": "image"}.get(sub) or opts.get("type")
    if kind not in (None, "container", "image"):
        stop("docker inspect --type %s: the sandbox answers containers and images only" % kind)
    _, mine, _ = sandbox_state()
    found, missing = [], []
    for n in names:
        doc, known, real = None, True, False
        if NAME_OK.match(n) and kind in (None, "container"):
            doc, known, real = find_container(n, mine, ans)
        if doc is None and NAME_OK.match(n) and (kind == "image" or kind is None and (known or ":" in n or "/" in n)):
            doc, real = find_image(n, mine, ans)
        if doc is None:
            missing.append(n)
        else:
            found.append((doc, real))
    if opts.get("format"):
        sys.stdout.write(emit(opts["format"], found))
    else:
        sys.stdout.write(json.dumps([d for d, _ in found], indent=4, ensure_ascii=False) + "\n")
    for n in missing:
        sys.stderr.write("Error: No such %s: %s\n" % (kind or "object", n))
    return 1 if missing else 0


def ps_match(row, filters):
    by = {}
    for f in filters:
        k, _, v = f.partition("=")
        by.setdefault(k, []).append(v)
    for k in by:
        if k not in ("name", "id", "status", "ancestor", "label"):
            stop("docker ps --filter %s=...: a filter the sandbox does not answer" % k)
    for k, vals in by.items():
        if k == "name":
            try:
                ok = any(re.search(v, "/" + n) for v in vals for n in row["Names"].split(","))
            except re.error:
                stop("docker ps --filter name=%s: not a pattern" % vals[0])
        elif k == "id":
            ok = any(row["ID"].startswith(v) for v in vals)
        elif k == "status":
            ok = row.get("State") in vals
        elif k == "ancestor":
            ok = any(row.get("Image") in (v, v + ":latest") for v in vals)
        elif k == "label":
            labels = [x for x in (row.get("Labels") or "").split(",") if x]
            ok = any(v in labels or v in [x.split("=", 1)[0] for x in labels] for v in vals)
        if not ok:
            return False
    return True


def ellipsis(quoted):
    try:
        text = json.loads(quoted)
    except ValueError:
        return quoted
    return json.dumps(text if len(text) <= 20 else text[:19] + "\u2026", ensure_ascii=False)


def q_ps(sub, rest, ans):
    spec = {"-a": ("all", False), "--all": ("all", False), "-q": ("quiet", False), "--quiet": ("quiet", False),
            "--no-trunc": ("notrunc", False), "-f": ("filter", True), "--filter": ("filter", True),
            "--format": ("format", True), "-s": ("size", False), "--size": ("size", False),
            "-n": ("last", True), "--last": ("last", True), "-l": ("latest", False), "--latest": ("latest", False)}
    opts, _ = options(sub, rest, spec)
    filters = opts.get("filter") or []
    ps_match({"Names": "", "ID": ""}, filters)          # a filter it does not answer stops before anything is asked
    _, mine, _ = sandbox_state()
    rows = [ctn_row(c) for c in reversed(list(mine["ctn"].values()))]
    if not on_head():
        ans.assume("%s's containers are not visible from the head: only the sandbox's" % HOST)
    else:
        status, real = daemon_json(["ps", "--all", "--no-trunc", "--format", "{{json .}}"], "lines")
        if status != "ok":
            ans.assume("no container assumed on the head: %s" % real)
            real = []
        else:
            ans.daemon()
        for row in real:
            names = row.get("Names", "").split(",")
            if set(names) & (set(mine["gone"]) | set(mine["ctn"])):
                continue
            if set(names) & set(mine["stopped"]):
                row = dict(row, State="exited")
                row.pop("Status", None)
            rows.append(row)
    every = opts.get("all") or opts.get("latest") or opts.get("last")
    if not every and not any(f.startswith("status=") for f in filters):
        rows = [r for r in rows if r.get("State") == "running"]
    rows = [r for r in rows if ps_match(r, filters)]
    if opts.get("latest") or opts.get("last"):
        rows = rows[:1 if opts.get("latest") else int(opts["last"]) if opts["last"].isdigit() else len(rows)]
    if not opts.get("notrunc"):
        rows = [dict(r, ID=r["ID"][:12], **({"Command": ellipsis(r["Command"])} if "Command" in r else {}))
                for r in rows]
    template = "{{.ID}}" if opts.get("quiet") else opts.get("format") or "table"
    try:
        lines = render_rows(template, rows, PS_HEADER)
    except Unrenderable as exc:
        stop("docker %s: the sandbox cannot render the template %s" % (" ".join(ARGS)[:200], exc))
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


def q_images(sub, rest, ans):
    spec = {"-a": ("all", False), "--all": ("all", False), "-q": ("quiet", False), "--quiet": ("quiet", False),
            "--no-trunc": ("notrunc", False), "-f": ("filter", True), "--filter": ("filter", True),
            "--format": ("format", True)}
    opts, refs = options(sub, rest, spec)
    for f in opts.get("filter") or []:
        if not f.startswith("reference="):
            stop("docker images --filter %s: a filter the sandbox does not answer" % f)
        refs.append(f.split("=", 1)[1])
    _, mine, _ = sandbox_state()
    status, rows = daemon_json(["images", "--no-trunc", "--format", "{{json .}}"] + (["--all"] if opts.get("all")
                                                                                     else []), "lines")
    if status != "ok":
        ans.assume("no image assumed on the head but the sandbox's and those named: %s" % rows)
        rows = [{"Repository": r.rsplit(":", 1)[0] if ":" in r.rsplit("/", 1)[-1] else r, "ID": NO_ID,
                 "Tag": r.rsplit(":", 1)[1] if ":" in r.rsplit("/", 1)[-1] else "latest"} for r in refs]
    else:
        ans.daemon()
    have = set("%s:%s" % (r.get("Repository"), r.get("Tag")) for r in rows)
    for ref in mine["images"]:
        full = ref if ":" in ref.rsplit("/", 1)[-1] else ref + ":latest"
        if full not in have:
            ans.assume("%s exists only in the sandbox (built, pulled or tagged there)" % ref)
            rows.insert(0, {"Repository": full.rsplit(":", 1)[0], "Tag": full.rsplit(":", 1)[1], "ID": NO_ID})
    rows = [r for r in rows if "%s:%s" % (r.get("Repository"), r.get("Tag")) not in
            [x if ":" in x.rsplit("/", 1)[-1] else x + ":latest" for x in mine["rmi"]]]
    if refs:
        def hit(r, ref):
            repo, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", None)
            return fnmatch.fnmatchcase(r.get("Repository", ""), repo) and (tag is None or
                                                                          fnmatch.fnmatchcase(r.get("Tag", ""), tag))
        rows = [r for r in rows if any(hit(r, ref) for ref in refs)]
    if not opts.get("notrunc"):
        rows = [dict(r, ID=r["ID"].split(":", 1)[-1][:12]) if "ID" in r else r for r in rows]
    if opts.get("quiet"):
        ids = []
        for r in rows:
            if r.get("ID") not in ids:
                ids.append(r.get("ID"))
        sys.stdout.write("".join("%s\n" % i for i in ids))
        return 0
    try:
        lines = render_rows(opts.get("format") or "table", rows, IMAGES_HEADER)
    except Unrenderable as exc:
        stop("docker %s: the sandbox cannot render the template %s" % (" ".join(ARGS)[:200], exc))
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


def q_system(sub, rest, ans):
    opts, _ = options(sub, rest, {"-f": ("format", True), "--format": ("format", True)})
    if sub == "--version" or not opts.get("format"):
        status, out, why = ask_daemon(["--version"] if sub == "--version" else [sub])
        if status == "ok":
            ans.daemon()
            sys.stdout.write(out)
            return 0
        ans.assume("%s assumed from the fleet's hosts: %s" % (sub, why))
        sys.stdout.write({"--version": "Docker version (unknown), build (unknown)\n",
                          "version": "Client:\n OS/Arch:           linux/arm64\n\nServer:\n Engine:\n"
                                     "  OS/Arch:          linux/arm64\n",
                          "info": "Server:\n OSType: linux\n Architecture: aarch64\n"}[sub])
        return 0
    status, data = daemon_json([sub, "--format", "{{json .}}"], "data")
    if status == "ok":
        ans.daemon()
    else:
        ans.assume("%s assumed from the fleet's hosts: %s" % (sub, data))
        data = FLEET_VERSION if sub == "version" else FLEET_INFO
    sys.stdout.write(emit(opts["format"], [(data, False)]))
    return 0


'''
