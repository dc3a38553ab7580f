# -*- coding: utf-8 -*-
"""The drift check's outputs: the short table printed, ``drift.json`` and ``summary.md``.

Runs on the control node (``bin/fleet-drift``). Values arrive already masked by the hosts (secrets
read ``(secret)`` / ``changed``); :func:`write_report` still passes every text through the one
secret rule with the known secret values, as a last guard.
"""
from __future__ import absolute_import, division, print_function

import json
import os

from ansible.module_utils.base import secrets as secret_rule

EXIT_MEANING = {0: "no drift", 2: "drift found", 3: "a host unreachable or a probe failed"}
COLUMNS = (("host", "host"), ("class", "class"), ("area", "area"), ("item", "item"), ("expected", "expected"),
           ("actual", "actual"), ("since", "since"))


_CONTROL = dict((c, "\\x%02x" % c) for c in list(range(0x20)) + list(range(0x7f, 0xa0)))
_CONTROL.update({0x0a: "\\n", 0x0d: "\\r", 0x09: "\\t"})


def esc(value):
    """A value as one line of plain text: newlines shown as ``\\n``, every other control character (ESC and
    the terminal sequences it starts, OSC 52 included) as ``\\xNN``, so a value read from a host can neither
    add a line to the summary nor drive the operator's terminal."""
    return str(value).translate(_CONTROL)


def _cell(value, width=48):
    text = esc(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def table(findings, columns=COLUMNS):
    """Fixed-width text table of findings (one line each), or a one-line "no findings"."""
    if not findings:
        return ["no findings"]
    rows = [[_cell(f.get(k, "")) for k, _ in columns] for f in findings]
    heads = [h for _, h in columns]
    widths = [max(len(x) for x in col) for col in zip(heads, *rows)]

    def fmt(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return [fmt(heads), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]


def host_lines(hosts):
    return ["%s: %s" % (esc(h), esc(hosts[h])) for h in sorted(hosts)]


def summary_md(report):
    """What a person reads first: the verdict, what changed since the last run, then the details."""
    code = report["exit_code"]
    out = ["# Drift check %s" % esc(report["run"]), ""]
    verdict = {0: "**No drift**: the fleet is what the repository declares.",
               2: "**Drift found**: %d open finding(s)." % len(report["findings"]),
               3: "**Incomplete**: a host was unreachable or a probe failed; the other hosts are reported below."}
    out += [verdict[code], "", "Exit code %d (%s). Inventory: %s." % (code, EXIT_MEANING[code], esc(report["inventory"])), ""]
    out += ["## Hosts", ""] + ["- " + line for line in host_lines(report["hosts"])] + [""]
    new = [f for f in report["findings"] if f.get("new")]
    out += ["## Since the previous run (%s)" % esc(report.get("previous_run") or "none"), ""]
    if not new and not report["resolved"]:
        out.append("Nothing changed.")
    for f in new:
        out.append("- new: %s %s %s: expected %s, actual %s" % tuple(
            esc(f.get(k, "")) for k in ("host", "area", "item", "expected", "actual")))
    for f in report["resolved"]:
        out.append("- resolved: %s %s %s (since %s)" % tuple(
            esc(f.get(k, "?")) for k in ("host", "area", "item", "since")))
    out.append("")
    if report["findings"]:
        out += ["## Open findings", "", "| " + " | ".join(h for _, h in COLUMNS) + " |",
                "|" + "---|" * len(COLUMNS)]
        out += ["| " + " | ".join(_cell(f.get(k, ""), 80).replace("|", "\\|") for k, _ in COLUMNS) + " |"
                for f in report["findings"]]
        out.append("")
    if report["accepted"]:
        out += ["## Accepted (declared in the inventory, not counted)", ""]
        out += ["- %s %s %s: %s (%s)" % tuple(esc(f.get(k, "")) for k in ("host", "area", "item", "actual", "accepted"))
                for f in report["accepted"]]
        out.append("")
    n = report.get("notification") or {}
    out += ["## Notification", "", esc(n.get("text", "not configured")), ""]
    if report.get("pruned"):
        out += ["Retention removed %d older run(s)." % len(report["pruned"]), ""]
    return "\n".join(out)


def write_report(run_dir, report, secrets=()):
    """Write drift.json and summary.md into ``run_dir`` (secret values masked as a last guard)."""
    # the known secret values and anything shaped like a secret (a token echoed in a value or an error)
    report = secret_rule.redact(report, list(secrets), collect=False)
    with open(os.path.join(run_dir, "drift.json"), "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2, sort_keys=True)
        handle.write("\n")
    text = secret_rule.redact_text(summary_md(report), list(secrets))
    with open(os.path.join(run_dir, "summary.md"), "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    return report
