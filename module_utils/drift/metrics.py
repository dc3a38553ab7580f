# -*- coding: utf-8 -*-
"""The drift check's metrics, for node_exporter's textfile collector (bin/fleet-drift --metrics-dir).

One file per fleet, ``dsv41_drift_<fleet>.prom``, written with prometheus-client's own exposition writer
(``write_to_textfile``: a temporary file in the same directory, then a rename, so the collector never reads a
half-written file). What a dashboard or an alert needs from one run:

- ``dsv41_drift_open_findings{fleet, host, class, area}``: open findings (accepted ones do not count), one
  series per host, class and area that has any, so a resolved finding's series disappears with it;
- ``dsv41_drift_hosts_unreachable{fleet}``, ``dsv41_drift_hosts_checked{fleet}``;
- ``dsv41_drift_last_run_timestamp_seconds{fleet}``, ``dsv41_drift_last_run_duration_seconds{fleet}`` and
  ``dsv41_drift_last_run_exit_code{fleet}`` (0 no drift, 2 drift, 3 unreachable or probe failed, 1 could not run).

prometheus-client is imported only when a file is written: the rest of the drift code (and every module that
runs on a host) never needs it.
"""
import os
import re
from collections import Counter

FILE_PREFIX = "dsv41_drift_"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def file_name(fleet):
    """The metrics file of one fleet (a fleet name that is not a plain word is made one)."""
    return "%s%s.prom" % (FILE_PREFIX, _SAFE.sub("_", str(fleet)) or "default")


def counts(findings):
    """{(host, class, area): n} of the open findings."""
    return Counter((str(f.get("host")), str(f.get("class")), str(f.get("area"))) for f in findings or [])


def registry(fleet, report, started_ts, duration_s):
    """A prometheus-client registry holding one run's metrics (``report``: bin/fleet-drift's report)."""
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    findings = Gauge("dsv41_drift_open_findings", "Open drift findings of the last run (accepted ones not counted)",
                     ["fleet", "host", "class", "area"], registry=reg)
    for (host, cls, area), n in sorted(counts(report.get("findings")).items()):
        findings.labels(fleet, host, cls, area).set(n)
    hosts = report.get("hosts") or {}
    Gauge("dsv41_drift_hosts_unreachable", "Hosts the last run could not reach", ["fleet"],
          registry=reg).labels(fleet).set(sum(1 for state in hosts.values() if state == "UNREACHABLE"))
    Gauge("dsv41_drift_hosts_checked", "Hosts the last run checked", ["fleet"],
          registry=reg).labels(fleet).set(sum(1 for state in hosts.values() if str(state).startswith("checked")))
    Gauge("dsv41_drift_last_run_timestamp_seconds", "Start of the last drift run (Unix time)", ["fleet"],
          registry=reg).labels(fleet).set(started_ts)
    Gauge("dsv41_drift_last_run_duration_seconds", "Duration of the last drift run", ["fleet"],
          registry=reg).labels(fleet).set(duration_s)
    Gauge("dsv41_drift_last_run_exit_code", "Exit code of the last drift run (0 none, 2 drift, 3 unreachable)",
          ["fleet"], registry=reg).labels(fleet).set(report.get("exit_code", 1))
    return reg


def write(directory, fleet, report, started_ts, duration_s):
    """Write ``<directory>/dsv41_drift_<fleet>.prom`` atomically; returns its path. Raises ImportError when
    prometheus-client is not installed and OSError when the directory cannot be written."""
    from prometheus_client import write_to_textfile

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, file_name(fleet))
    write_to_textfile(path, registry(fleet, report, started_ts, duration_s))
    return path
