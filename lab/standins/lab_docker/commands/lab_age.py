"""Lab knob: age a container (days of periodic engine lines in its log): ``docker __lab-age NAME --mb N
[--days D] [--rank R]`` (lab/README.md, "Lab knobs")."""
import os
import random
import re
import signal
import time

from ..base import AGE, DockerError
from ..cli import Flags, write_stdout
from ..logfile import LogRecords, log_complete_end
from ..procs import reconcile, signal_group
from ..store import Store
from ..timefmt import parse_time, parse_time_ns, rfc3339_ns

AGE_MB_PER_DAY = 27.0           # what a real head logs a day, idle or serving (periodic decode and Engram lines)
AGE_SCAN_BYTES = 4 << 20        # the end of the log read to learn the boot's formats and counters
AGE_BLOCK = 8 << 20             # records are built into blocks of this size, each written at once
AGE_MIN_STEP = 3000             # ns between periods at the least (a period's records are 1 us apart)
_AGE_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP(\d+)( EP\d+)?\] ")
_AGE_PERIODIC = re.compile(r"\] Engram layer=\d+ lookups=(\d+) hit_rate=([\d.]+)% reads=\d+ cache=([\d.]+)GiB\((\d+)-way\)"
                           r"( scales=[\d.]+GiB)? threads=\d+(?: packed=(True|False))?")
_AGE_EXACT = re.compile(r"\] Exact \w+ Engram layer=\d+ rank=\d+ rows=\[\d+,\d+\) (?:cache=([\d.]+)GiB \(\d+ slots, "
                        r"(\d+)-way[^)]*\) scales=[\d.]+GiB io_threads=\d+ packed=(True|False)|cache_budget=([\d.]+)GiB "
                        r"ways=(\d+) io_threads=\d+)")
_AGE_POOL = re.compile(r"\] DSV4 pool sizes: full=(\d+), swa=(\d+)|\] DSv4 pool sizes: full=(\d+), swa=(\d+)")
_AGE_BLOCK_SIZE = re.compile(r"'speculative_dspark_block_size': (\d+)|speculative_dspark_block_size=(\d+)")


def age_profile(path):
    """What the end of a container log says about its boot: the last record's time, the rank and prefix,
    the build (new or old formats), packed, the row cache, the lookups counter, the pool sizes."""
    prof = {"last_ns": None, "rank": None, "ep": True, "build": None, "packed": None, "cache": 0.0, "ways": 4,
            "hit": 0.0, "lookups": 0, "full": 491520, "swa": 13312, "block": 3}
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return prof
    with fh:
        end = log_complete_end(fh)
        start = max(0, end - AGE_SCAN_BYTES)
        fh.seek(start)
        data = fh.read(end - start)
    if start:
        data = data[data.find(b"\n") + 1:]
    decoder = LogRecords(path)
    records = [rec for line in data.split(b"\n")[:-1] for rec in decoder.decode(line)]
    if records:
        prof["last_ns"] = max(rec[0] for rec in records[-64:])
    seen = set()
    for rec in reversed(records):
        text = rec[2].decode("utf-8", "replace")
        m = _AGE_PREFIX.match(text)
        if m and "rank" not in seen:
            seen.add("rank")
            prof["rank"], prof["ep"] = int(m.group(1)), bool(m.group(2))
        m = _AGE_PERIODIC.search(text)
        if m and "periodic" not in seen:
            seen.update(("periodic", "cache"))
            prof["lookups"], prof["hit"] = int(m.group(1)), float(m.group(2)) / 100.0
            prof["cache"], prof["ways"] = float(m.group(3)), int(m.group(4))
            prof["build"] = prof["build"] or ("new" if m.group(5) else "old")
            if m.group(6) and prof["packed"] is None:
                prof["packed"] = m.group(6)
        m = _AGE_EXACT.search(text)
        if m and "exact" not in seen:
            seen.add("exact")
            if m.group(3):
                prof["packed"] = prof["packed"] or m.group(3)
                prof["build"] = prof["build"] or "new"
                if "cache" not in seen:
                    prof["cache"], prof["ways"] = float(m.group(1)), int(m.group(2))
            else:
                prof["build"] = prof["build"] or "old"
                if "cache" not in seen:
                    prof["cache"], prof["ways"] = float(m.group(4)), int(m.group(5))
        if "Decode batch" in text and prof["build"] is None:
            prof["build"] = "old" if "Decode batch. " in text else "new"
        m = _AGE_POOL.search(text)
        if m and "pool" not in seen:
            seen.add("pool")
            prof["full"], prof["swa"] = int(m.group(1) or m.group(3)), int(m.group(2) or m.group(4))
        m = _AGE_BLOCK_SIZE.search(text)
        if m and "block" not in seen:
            seen.add("block")
            prof["block"] = int(m.group(1) or m.group(2))
        if "server_args=" in text and prof["build"] is None:
            prof["build"] = "old" if "server_args=ServerArgs(" in text else "new"
    if prof["build"] is None:
        prof["build"] = "new"
    if prof["cache"] > 0:
        # days on, the row cache has long reached its steady hit rate (the engine's model: 2 layers' cache)
        total = prof["cache"] * 2
        prof["hit"] = 0.30 * min(total, 0.5) / 0.5 + (0.02 if prof["ways"] >= 16 else 0.0)
    return prof


def _age_requests(prof, count=97, seed=0):
    """Per request (a decode report): (tokens looked up, the decode line's text after its prefix)."""
    rnd = random.Random(seed)
    full, swa, k = max(1, prof["full"]), max(1, prof["swa"]), max(1, prof["block"])
    out = []
    for _ in range(count):
        used = rnd.randint(180, 6400)
        accept = rnd.uniform(2.4, min(3.6, k + 1.0))
        rate = rnd.uniform(28.0, 41.0)
        if prof["build"] == "old":
            line = ("Decode batch. #running-req: 1, #token: %d, token usage: %.2f, cuda graph: True, "
                    "gen throughput (token/s): %.2f, #queue-req: 0" % (used, used / full, rate))
        else:
            s = min(used, swa)
            line = ("Decode batch, #running-req: 1, #full token: %d, full token usage: %.2f, #swa token: %d, "
                    "swa token usage: %.2f, accept len: %.2f, accept rate: %.2f, cuda graph: True, "
                    "gen throughput (token/s): %.2f, #queue-req: 0"
                    % (used, used / full, s, s / swa, accept, max(0.0, accept - 1) / k, rate))
        out.append((used, line))
    return out


def age_records(prof, start_ns, step_ns, groups, seed=0, limit=None):
    """The aged log, as json-file text in blocks (bytes, periods in it): per period one decode report (rank 0
    only) and the two Engram layers' periodic lines, each a stderr logging record with the rank's prefix,
    stamped at the period's time (the records of one period a microsecond apart). At most `groups` periods,
    and no more once `limit` bytes are made."""
    rank = prof["rank"] or 0
    tag = " TP%d EP%d" % (rank, rank) if prof["ep"] else " TP%d" % rank
    if prof["build"] == "old":
        engram = ("Engram layer=%%d lookups=%%d hit_rate=%.1f%%%% reads=%%d cache=%.1fGiB(%d-way) threads=96"
                  % (prof["hit"] * 100, prof["cache"], prof["ways"]))
    else:
        engram = ("Engram layer=%%d lookups=%%d hit_rate=%.1f%%%% reads=%%d cache=%.1fGiB(%d-way) scales=0.0GiB "
                  "threads=96%s" % (prof["hit"] * 100, prof["cache"], prof["ways"],
                                    " packed=%s" % prof["packed"] if prof["packed"] else ""))
    # one template per period: the records' texts, prefixes and times filled in by one % (the times with their
    # fraction as Go's RFC3339Nano trims it: no trailing zeros, no fraction at all on a whole second)
    head, tail = '{"log":"[%s' + tag + '] ', '\\n","stream":"stderr","time":"%s%sZ"}\n'
    engrams = head + engram.replace("%d", "1", 1) + tail + head + engram.replace("%d", "14", 1) + tail
    period = head + "%s" + tail + engrams if rank == 0 else engrams
    requests = _age_requests(prof, seed=seed)
    nreq = len(requests)
    lookups = prof["lookups"]
    keep = 1.0 - prof["hit"]
    limit = float("inf") if limit is None else limit
    parts, size, total, done = [], 0, 0, 0
    last_sec, day, iso = None, "", ""
    for i in range(groups):
        sec, frac = divmod(start_ns + i * step_ns, 10 ** 9)
        if frac > 10 ** 9 - 3000:          # the period's records would cross a second: start it on the next one
            frac = 0
            sec += 1
        if sec != last_sec:
            last_sec = sec
            tm = time.gmtime(sec)
            day, iso = time.strftime("%Y-%m-%d %H:%M:%S", tm), time.strftime("%Y-%m-%dT%H:%M:%S", tm)
        t0 = ("%09d" % frac).rstrip("0")
        t0 = "." + t0 if t0 else ""
        t1 = "." + ("%09d" % (frac + 1000)).rstrip("0")
        used, decode = requests[i % nreq]
        lookups += used
        reads = round(lookups * keep)
        if rank == 0:
            t2 = "." + ("%09d" % (frac + 2000)).rstrip("0")
            text = period % (day, decode, iso, t0, day, lookups, reads, iso, t1, day, lookups, reads, iso, t2)
        else:
            text = period % (day, lookups, reads, iso, t0, day, lookups, reads, iso, t1)
        parts.append(text)
        size += len(text)
        done += 1
        if size >= AGE_BLOCK or total + size >= limit:
            total += size
            yield "".join(parts).encode(), done
            parts, size, done = [], 0, 0
            if total >= limit:
                return
    if parts:
        yield "".join(parts).encode(), done


def lab_age(argv):
    """__lab-age NAME --mb N [--days D] [--rank R]: append N MB (10^6 bytes) of the periodic lines a serving
    engine logs (rank 0: decode reports and the Engram lines; workers: the Engram lines) to the container's
    json-file log, in the formats of the boot the log ends with (new or old build, packed, row cache, prefix;
    the rank: --rank, else the log's own prefixes, NODE_RANK, or 0 for a name ending in "head").

    Times: spread over D days (default N/27, a real head's 27 MB a day) from just after the log's last record.
    They are never later than now, so the aged lines come before anything the engine writes afterwards: when
    the log leaves less than D days between its last record and now (an engine booted minutes ago), the
    lines are spread over the time there is (denser than real; the bytes and formats are the same), and when
    even that is too short for the periods to be AGE_MIN_STEP apart it waits until they fit. A running engine
    is stopped (SIGSTOP to its process group, as docker pause) while the lines are appended
    and continued after, so none of its records lands among them; the store's lock is held throughout.
    State.StartedAt never moves; an exited container's FinishedAt moves to just after the aged lines when
    they go past it (it ran that long). Allowed on an engine container that has run (running, paused or
    exited); one never started has no boot to age."""
    f = Flags([("--mb", "mb", True, False), ("--days", "days", True, False), ("--rank", "rank", True, False)],
              argv, AGE)
    if len(f.args) != 1 or not f.get("mb"):
        raise DockerError("usage: docker %s NAME --mb N [--days D] [--rank R]" % AGE, 1)
    try:
        mb = float(f.get("mb"))
        days = float(f.get("days")) if f.get("days") else mb / AGE_MB_PER_DAY
        rank = int(f.get("rank")) if f.get("rank") is not None else None
    except ValueError:
        raise DockerError("%s: --mb, --days and --rank take numbers" % AGE, 1) from None
    if mb <= 0 or days <= 0:
        raise DockerError("%s: --mb and --days must be positive" % AGE, 1)
    with Store() as store:
        reconcile(store)
        c = store.get(f.args[0])
        st = c["State"]
        if not c["Lab"].get("engine"):
            raise DockerError("%s: %s is not an engine container (no engine log to age)" % (AGE, c["Name"]))
        if st["Status"] not in ("running", "paused", "exited") or parse_time(st["StartedAt"]) is None:
            raise DockerError("%s: %s has never run: no boot to age" % (AGE, c["Name"]))
        pgid = c["Lab"].get("pgid") if st["Running"] and not st["Paused"] else 0
        path = store.log_path(c["Name"])
        if pgid:
            signal_group(pgid, signal.SIGSTOP)
        try:
            now = time.time_ns()
            prof = age_profile(path)
            if rank is not None:
                prof["rank"] = rank
            elif prof["rank"] is None:
                env = dict(e.partition("=")[::2] for e in c["Config"]["Env"])
                if env.get("NODE_RANK", "").strip().isdigit():
                    prof["rank"] = int(env["NODE_RANK"])
                elif c["Name"].endswith("head"):
                    prof["rank"] = 0
                else:
                    raise DockerError("%s: cannot tell %s's rank from its log or env; pass --rank" % (AGE, c["Name"]))
            started = parse_time_ns(st["StartedAt"])
            first = max(prof["last_ns"] or started, started) + 1000
            end = now - 10 ** 6
            if first >= end + 60 * 10 ** 9:
                raise DockerError("%s: %s's log ends after now: no time left to age it" % (AGE, c["Name"]))
            # periods: as many as N MB takes, estimated from a sample taken halfway (the counters' digits grow)
            limit = mb * 1e6
            mid = dict(prof)
            for _ in range(2):
                sample = sum(len(b) for b, _ in age_records(mid, first, 1234567891, 256)) / 256.0
                mid["lookups"] = prof["lookups"] + int(limit / sample / 2 * 3300)
            est = max(1.0, limit / sample)
            need = (int(est * 1.03) + 2) * AGE_MIN_STEP
            if end - first < need:
                # a boot moments ago: nothing is written meanwhile (the engine is held, or not running), so wait
                # until the periods fit, AGE_MIN_STEP apart, between the last record and now
                wait = (need - (end - first)) / 1e9
                if wait > 60:
                    raise DockerError("%s: %s's log ends after now: no time left to age it" % (AGE, c["Name"]))
                time.sleep(wait + 0.002)
                end = time.time_ns() - 10 ** 6
            room = end - first - 3000
            want = int(days * 86400 * 10 ** 9)
            # D days from the last record when they fit before now; else compressed into the time there is
            step = want // max(1, round(est)) if want <= room else room // (int(est * 1.03) + 1)
            if step < AGE_MIN_STEP:
                raise DockerError("%s: not enough time before now for %d periods" % (AGE, est))
            groups = min(int(est * 1.1) + 1, room // step + 1)
            written = done = 0
            fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o664)
            try:
                for block, n in age_records(prof, first, step, groups, seed=int(c["Id"][:8], 16), limit=limit):
                    view = memoryview(block)
                    while view:
                        view = view[os.write(fd, view):]
                    written += len(block)
                    done += n
            finally:
                os.close(fd)
            per = 3 if (prof["rank"] or 0) == 0 else 2
            last = first + step * (done - 1) + 1000 * (per - 1)
            if st["Status"] == "exited" and (st["FinishedAt"].startswith("0001-")
                                             or parse_time_ns(st["FinishedAt"]) < last):
                st["FinishedAt"] = rfc3339_ns(last + 10 ** 6)
        finally:
            if pgid:
                signal_group(pgid, signal.SIGCONT)
    write_stdout("%s: +%.1f MB, %d records (rank %d, %s build%s) from %s to %s\n"
                 % (c["Name"], written / 1e6, done * per, prof["rank"] or 0, prof["build"],
                    ", packed=%s" % prof["packed"] if prof["packed"] else "", rfc3339_ns(first), rfc3339_ns(last)))
    return 0
