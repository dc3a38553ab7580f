"""Time helpers: docker prints RFC3339Nano in inspect and go-units durations in ps."""
import datetime as _dt
import re
import time

ZERO_TIME = "0001-01-01T00:00:00Z"


def now_utc():
    return _dt.datetime.now(_dt.timezone.utc)


def rfc3339(t):
    """RFC3339Nano as docker prints it: 2026-09-24T02:51:10.123456789Z."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + "%06d000Z" % t.microsecond


def parse_time(s):
    """Parse RFC3339 with up to nanoseconds; the zero time gives None."""
    if not s or s.startswith("0001-01-01"):
        return None
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", s)
    if not m:
        raise ValueError("bad timestamp %r" % s)
    base = _dt.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
    frac = (m.group(2) or "0")[:6].ljust(6, "0")
    tz = _dt.timezone.utc
    if m.group(3) != "Z":
        sign = 1 if m.group(3)[0] == "+" else -1
        hh, mm = m.group(3)[1:].split(":")
        tz = _dt.timezone(sign * _dt.timedelta(hours=int(hh), minutes=int(mm)))
    return base.replace(microsecond=int(frac), tzinfo=tz)


def rfc3339_ns(ns):
    """RFC3339Nano with all nine digits, as ``docker logs --timestamps`` prints them."""
    secs, frac = divmod(int(ns), 10 ** 9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + ".%09dZ" % frac


def rfc3339_ns_trimmed(ns):
    """Go's time.RFC3339Nano (trailing zeros of the fraction dropped), as the json-file driver stores it."""
    full = rfc3339_ns(ns)
    head, frac = full[:-1].split(".")
    frac = frac.rstrip("0")
    return head + ("." + frac if frac else "") + "Z"


def parse_time_ns(s):
    """RFC3339 with up to nine fraction digits -> integer nanoseconds since the epoch (UTC)."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", s)
    if not m:
        raise ValueError("bad timestamp %r" % s)
    base = _dt.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=_dt.timezone.utc)
    secs = int(base.timestamp())
    if m.group(3) != "Z":
        sign = 1 if m.group(3)[0] == "+" else -1
        hh, mm = m.group(3)[1:].split(":")
        secs -= sign * (int(hh) * 3600 + int(mm) * 60)
    return secs * 10 ** 9 + int((m.group(2) or "0")[:9].ljust(9, "0"))


def human_duration(seconds):
    """go-units HumanDuration, as used by docker ps (``Up 3 days``, ``2 hours ago``)."""
    s = int(seconds)
    if s < 1:
        return "Less than a second"
    if s == 1:
        return "1 second"
    if s < 60:
        return "%d seconds" % s
    minutes = s // 60
    if minutes == 1:
        return "About a minute"
    if minutes < 60:
        return "%d minutes" % minutes
    hours = int(round(seconds / 3600.0))
    if hours == 1:
        return "About an hour"
    if hours < 48:
        return "%d hours" % hours
    if hours < 24 * 7 * 2:
        return "%d days" % (hours // 24)
    if hours < 24 * 30 * 2:
        return "%d weeks" % (hours // 24 // 7)
    if hours < 24 * 365 * 2:
        return "%d months" % (hours // 24 // 30)
    return "%d years" % (int(seconds / 3600) // 24 // 365)


def go_time_string(t):
    """Go's time.Time.String() in UTC, as docker ps CreatedAt: 2026-09-20 08:12:33 +0000 UTC."""
    return t.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")
