"""Views: what inspect / ps / stats / images print."""
import json
import os

from .base import DEFAULT_PATH, HOST_ARCH
from .sizes import bytes_size, human_size
from .store import NONE, image_labels
from .timefmt import ZERO_TIME, go_time_string, human_duration, parse_time

# hashlib is imported where used (inspect): every docker call on a lab host is a fresh Python, and ps prints no
# hash.


def inspect_view(c, store):
    """The container as docker inspect prints it."""
    import hashlib
    st = c["State"]
    net = c["HostConfig"].get("NetworkMode", "bridge")
    if net == "host":
        nets = {"host": {"IPAMConfig": None, "Links": None, "Aliases": None, "NetworkID": "lab-host",
                         "Gateway": "", "IPAddress": "", "IPPrefixLen": 0, "MacAddress": ""}}
    else:
        ip = "172.17.0.%d" % (2 + int(c["Id"][:2], 16) % 200)
        nets = {net: {"IPAMConfig": None, "Links": None, "Aliases": None, "NetworkID": "lab-" + net,
                      "Gateway": "172.17.0.1", "IPAddress": ip, "IPPrefixLen": 16,
                      "MacAddress": "02:42:ac:11:00:%02x" % (int(c["Id"][:2], 16))}}
    ports = {}
    for p in c["Lab"].get("ports", []):
        ports["%d/%s" % (p["PrivatePort"], p.get("Type", "tcp"))] = [
            {"HostIp": p.get("IP", "0.0.0.0"), "HostPort": str(p["PublicPort"])}]
    cmd = c["Config"]["Cmd"] or []
    ep = c["Config"].get("Entrypoint") or []
    full = list(ep) + list(cmd)
    return {
        "Id": c["Id"],
        "Created": c["Created"],
        "Path": full[0] if full else "",
        "Args": full[1:],
        "State": {"Status": st["Status"], "Running": st["Running"], "Paused": st["Paused"],
                  "Restarting": False, "OOMKilled": False, "Dead": False, "Pid": st["Pid"],
                  "ExitCode": st["ExitCode"], "Error": "", "StartedAt": st["StartedAt"],
                  "FinishedAt": st["FinishedAt"]},
        "Image": c["ImageId"],
        "ResolvConfPath": "/var/lib/docker/containers/%s/resolv.conf" % c["Id"],
        "HostnamePath": "/var/lib/docker/containers/%s/hostname" % c["Id"],
        "HostsPath": "/var/lib/docker/containers/%s/hosts" % c["Id"],
        "LogPath": str(store.log_path(c["Name"])),
        "Name": "/" + c["Name"],
        "RestartCount": 0,
        "Driver": "overlay2",
        "Platform": "linux",
        "MountLabel": "",
        "ProcessLabel": "",
        "AppArmorProfile": "",
        "ExecIDs": None,
        "HostConfig": c["HostConfig"],
        "Mounts": [dict({"Type": m["Type"], "Source": m["Source"], "Destination": m["Destination"],
                         "Mode": m.get("Mode", ""), "RW": m.get("RW", True),
                         "Propagation": m.get("Propagation", "rprivate")},
                        **({"Name": m["Name"], "Driver": "local"} if m["Type"] == "volume" else {}))
                   for m in c["Mounts"]],
        "Config": {"Hostname": c["Config"].get("Hostname", c["Id"][:12]), "Domainname": "", "User": "",
                   "AttachStdin": False, "AttachStdout": False, "AttachStderr": False,
                   "Tty": False, "OpenStdin": False, "StdinOnce": False,
                   "Env": c["Config"]["Env"], "Cmd": c["Config"]["Cmd"] or None,
                   "Image": c["Config"]["Image"], "Volumes": None,
                   "WorkingDir": c["Config"].get("WorkingDir", ""),
                   "Entrypoint": c["Config"].get("Entrypoint"), "OnBuild": None,
                   "Labels": c["Config"]["Labels"]},
        "NetworkSettings": {"Bridge": "", "SandboxID": hashlib.sha256(c["Id"].encode()).hexdigest(),
                            "Ports": ports, "Networks": nets},
    }


def image_inspect_view(im):
    import hashlib
    return {
        "Id": im["Id"],
        "RepoTags": [] if im["Repository"] == NONE else ["%s:%s" % (im["Repository"], im["Tag"])],
        "RepoDigests": im["RepoDigests"], "Parent": "", "Comment": "", "Created": im["Created"],
        "DockerVersion": "", "Author": "", "Architecture": im.get("Architecture") or HOST_ARCH, "Os": "linux",
        "Size": im["Size"], "Config": {"Env": ["PATH=" + DEFAULT_PATH], "Labels": image_labels(im)},
        "RootFS": {"Type": "layers", "Layers": ["sha256:" + hashlib.sha256(im["Id"].encode()).hexdigest()]},
        "Metadata": {"LastTagTime": ZERO_TIME},
    }


def status_string(c, now):
    st = c["State"]
    if st["Status"] in ("running", "paused"):
        started = parse_time(st["StartedAt"]) or now
        s = "Up " + human_duration((now - started).total_seconds())
        return s + " (Paused)" if st["Paused"] else s
    if st["Status"] == "exited":
        fin = parse_time(st["FinishedAt"]) or now
        return "Exited (%d) %s ago" % (st["ExitCode"], human_duration((now - fin).total_seconds()))
    return st["Status"].capitalize()


def _ellipsis(s, n):
    return s if len(s) <= n else s[: n - 1] + "…"


def ps_ctx(c, trunc, now):
    """docker's ContainerContext."""
    cmd = " ".join(list(c["Config"].get("Entrypoint") or []) + list(c["Config"]["Cmd"] or []))
    if trunc:
        cmd = _ellipsis(cmd, 20)
    created = parse_time(c["Created"]) or now
    labels = c["Config"]["Labels"] or {}
    mounts = []
    for m in c["Mounts"]:
        name = m.get("Name") or m["Source"]
        mounts.append(_ellipsis(name, 15) if trunc else name)
    ports = ", ".join("%s:%d->%d/%s" % (p.get("IP", "0.0.0.0"), p["PublicPort"], p["PrivatePort"],
                                        p.get("Type", "tcp")) for p in c["Lab"].get("ports", []))
    fields = {
        "ID": c["Id"][:12] if trunc else c["Id"],
        "Image": c["Image"],
        "Command": json.dumps(cmd, ensure_ascii=False),
        "CreatedAt": go_time_string(created),
        "RunningFor": human_duration((now - created).total_seconds()) + " ago",
        "Ports": ports,
        "State": c["State"]["Status"],
        "Status": status_string(c, now),
        "Size": "0B",
        "Names": c["Name"],
        "Labels": ",".join("%s=%s" % (k, labels[k]) for k in sorted(labels)),
        "Mounts": ",".join(mounts),
        "LocalVolumes": str(sum(1 for m in c["Mounts"] if m["Type"] == "volume")),
        "Networks": c["HostConfig"].get("NetworkMode", "bridge"),
    }
    return fields


PS_HEADER = {"ID": "CONTAINER ID", "Image": "IMAGE", "Command": "COMMAND", "CreatedAt": "CREATED AT",
             "RunningFor": "CREATED", "Ports": "PORTS", "State": "STATE", "Status": "STATUS", "Size": "SIZE",
             "Names": "NAMES", "Labels": "LABELS", "Mounts": "MOUNTS", "LocalVolumes": "LOCAL VOLUMES",
             "Networks": "NETWORKS"}
PS_DEFAULT = "table {{.ID}}\t{{.Image}}\t{{.Command}}\t{{.RunningFor}}\t{{.Status}}\t{{.Ports}}\t{{.Names}}"


def host_mem_total():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(119.7 * 1024 ** 3)


def _proc_rss(pgid):
    """RSS of the engine process group (supervisor + engine), for engine containers."""
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                parts = f.read().rsplit(")", 1)[1].split()
            if int(parts[2]) == pgid:
                total += int(parts[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    return total


def stats_ctx(c, given, trunc, mem_total):
    """docker's statsContext (running containers have figures, others zeros)."""
    s = c["Lab"].get("stats") or {}
    running = c["State"]["Running"] and not c["State"]["Paused"]
    if c["Lab"].get("engine") and c["Lab"].get("pgid") and not s:
        s = {"cpu_percent": 100.0, "mem_bytes": _proc_rss(c["Lab"]["pgid"]), "pids": 2}
    cpu = float(s.get("cpu_percent", 0.0)) if running else 0.0
    mem = int(s.get("mem_bytes", 0)) if c["State"]["Running"] else 0
    pids = int(s.get("pids", 1)) if c["State"]["Running"] else 0
    host = c["HostConfig"].get("NetworkMode") == "host"
    rx, tx = (0, 0) if host else (int(s.get("net_rx", 0)), int(s.get("net_tx", 0)))
    fields = {
        "Container": given or (c["Id"][:12] if trunc else c["Id"]),
        "Name": c["Name"],
        "ID": c["Id"][:12] if trunc else c["Id"],
        "CPUPerc": "%.2f%%" % cpu,
        "MemUsage": "%s / %s" % (bytes_size(mem), bytes_size(mem_total)),
        "MemPerc": "%.2f%%" % (100.0 * mem / mem_total if mem_total else 0.0),
        "NetIO": "%s / %s" % (human_size(rx), human_size(tx)),
        "BlockIO": "%s / %s" % (human_size(int(s.get("blk_read", 0))), human_size(int(s.get("blk_write", 0)))),
        "PIDs": "%d" % pids,
    }
    return fields


STATS_HEADER = {"Container": "CONTAINER", "Name": "NAME", "ID": "CONTAINER ID", "CPUPerc": "CPU %",
                "MemUsage": "MEM USAGE / LIMIT", "MemPerc": "MEM %", "NetIO": "NET I/O", "BlockIO": "BLOCK I/O",
                "PIDs": "PIDS"}
STATS_DEFAULT = "table {{.ID}}\t{{.Name}}\t{{.CPUPerc}}\t{{.MemUsage}}\t{{.MemPerc}}\t{{.NetIO}}\t{{.BlockIO}}\t{{.PIDs}}"


def image_ctx(im, trunc, now, containers):
    created = parse_time(im["Created"]) or now
    iid = im["Id"][7:19] if trunc else im["Id"]
    digest = im["RepoDigests"][0].split("@", 1)[1] if im.get("RepoDigests") else "<none>"
    fields = {
        "Containers": "N/A", "CreatedAt": go_time_string(created),
        "CreatedSince": human_duration((now - created).total_seconds()) + " ago",
        "Digest": digest, "ID": iid, "Repository": im["Repository"], "SharedSize": "N/A",
        "Size": human_size(im["Size"]), "Tag": im["Tag"], "UniqueSize": "N/A",
        "VirtualSize": human_size(im["Size"]),
    }
    return fields


IMAGES_HEADER = {"Containers": "CONTAINERS", "CreatedAt": "CREATED AT", "CreatedSince": "CREATED",
                 "Digest": "DIGEST", "ID": "IMAGE ID", "Repository": "REPOSITORY", "SharedSize": "SHARED SIZE",
                 "Size": "SIZE", "Tag": "TAG", "UniqueSize": "UNIQUE SIZE", "VirtualSize": "VIRTUAL SIZE"}
IMAGES_DEFAULT = "table {{.Repository}}\t{{.Tag}}\t{{.ID}}\t{{.CreatedSince}}\t{{.Size}}"


def created_key(c):
    return c["Created"]
