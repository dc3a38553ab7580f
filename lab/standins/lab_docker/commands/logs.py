"""docker logs: the container's json-file log as docker's reader streams it (lab_docker/logfile.py)."""
import os
import re
import time

from ..base import DockerError
from ..cli import Flags
from ..logfile import LogOutput, LogRecords, log_complete_end, log_forward, log_lines_tail
from ..procs import reconcile
from ..store import Store
from ..timefmt import parse_time_ns


def _log_time_arg(value, flag_name):
    """docker logs --since/--until: RFC3339 (date, or date and time), unix seconds, or a Go duration
    relative to now (10m, 1h30m, 45s)."""
    v = value.strip()
    if re.fullmatch(r"\d+(\.\d+)?", v):
        secs, _, frac = v.partition(".")
        return int(secs) * 10 ** 9 + int(frac[:9].ljust(9, "0") or 0)
    m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?", v)
    if v and m and any(m.groups()):
        h, mi, se = (float(x or 0) for x in m.groups())
        return time.time_ns() - int((h * 3600 + mi * 60 + se) * 10 ** 9)
    try:
        if re.fullmatch(r"\d{4}-\d\d-\d\d", v):
            v += "T00:00:00Z"
        elif re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?", v):
            v += "Z"
        return parse_time_ns(v)
    except ValueError:
        raise DockerError('invalid value for "%s": %s' % (flag_name, value), 1) from None


def cmd_logs(argv):
    """docker logs: the container's stdout records on stdout, its stderr records on stderr, in log order.

    ``-t`` prefixes every record with its own time (RFC3339Nano, nine digits); ``--tail N`` keeps the last N
    records of both streams together; ``--since``/``--until`` select by record time; ``-f`` follows both
    streams until the container stops. A record without a newline (a partial message) is written as is."""
    f = Flags([("-f|--follow", "follow", False, False), ("-t|--timestamps", "ts", False, False),
               ("-n|--tail", "tail", True, False), ("--details", "details", False, False),
               ("--since", "since", True, False), ("--until", "until", True, False)], argv, "logs")
    if len(f.args) != 1:
        raise DockerError('"docker logs" requires exactly 1 argument.', 1)
    tail = f.get("tail", "all")
    if tail not in ("all", "-1") and not re.fullmatch(r"\d+", str(tail)):
        raise DockerError('invalid value for "tail": %s' % tail, 1)
    since = _log_time_arg(f.get("since"), "since") if f.get("since") else None
    until = _log_time_arg(f.get("until"), "until") if f.get("until") else None
    with Store() as store:
        reconcile(store)
        c = store.get(f.args[0])
        path = store.log_path(c["Name"])
        name = c["Name"]
    out = LogOutput(f.get("ts"))
    decoder = LogRecords(path)

    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return 0
    with fh:
        if tail not in ("all", "-1"):
            pos = log_complete_end(fh)
            for rec in log_lines_tail(fh, pos, int(tail), decoder.decode):
                if (since is None or rec[0] >= since) and (until is None or rec[0] <= until):
                    out.record(rec)
        else:
            pos, ended = log_forward(fh, 0, decoder, since, until, out)
            if ended:
                out.flush()
                return 0
        out.flush()
        if not f.get("follow"):
            return 0
        decoder.plain_now = True
        while True:
            pos, ended = log_forward(fh, pos, decoder, since, until, out)
            out.flush()
            if ended:
                return 0
            if not os.path.exists(path):
                return 0
            with Store() as store:
                reconcile(store)
                c = store.find(name)
                running = bool(c and c["State"]["Running"])
            if not running:
                # whatever the engine wrote before it stopped, then the end
                log_forward(fh, pos, decoder, since, until, out)
                out.flush()
                return 0
            if until is not None and time.time_ns() > until:
                return 0
            time.sleep(0.2)
