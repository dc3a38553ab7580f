# -*- coding: utf-8 -*-
"""The drift check's notifier: a configured command or webhook, called when the set of findings changes.

Runs on the control node (``bin/fleet-drift``). The payload is the report's summary (findings are
already masked); the token (from the vault) goes only into the command's environment
(``DRIFT_NOTIFY_TOKEN``) or the webhook's ``Authorization: Bearer`` header, never into the payload,
the record or an error text. A failure is returned, never raised: the run reports it.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import subprocess

from ansible.module_utils.base import secrets

TIMEOUT = 30  # seconds a notifier may take; a hanging one is a reported failure, never a hung check


def payload(report):
    fleet = report.get("fleet") or "?"
    return {"fleet": fleet, "run": report["run"], "exit_code": report["exit_code"], "inventory": report["inventory"],
            "hosts": report["hosts"], "findings": report["findings"], "resolved": report["resolved"],
            "summary": "fleet %s: %d open finding(s), %d new, %d resolved" % (
                fleet, len(report["findings"]), sum(1 for f in report["findings"] if f.get("new")),
                len(report["resolved"]))}


def _clean(text, token):
    """One line of a notifier's output for the record: the token and every secret-shaped value masked
    first, then cut to its last 300 characters (a cut before masking could leave half a token)."""
    text = secrets.redact_text(" ".join(str(text).split()), [token] if token else [])
    return text if len(text) <= 300 else "..." + text[-300:]


def send_command(argv, body, token="", timeout=TIMEOUT):
    env = dict(os.environ)
    if token:
        env["DRIFT_NOTIFY_TOKEN"] = token
    try:
        res = subprocess.run([str(a) for a in argv], input=body, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, _clean("%s: %s" % (argv[0], exc), token)
    if res.returncode != 0:
        return False, _clean("%s exited %d: %s" % (argv[0], res.returncode,
                                                   (res.stderr or res.stdout or b"").decode("utf-8", "replace")), token)
    return True, "%s exited 0" % argv[0]


def send_webhook(url, body, token="", timeout=TIMEOUT):
    from urllib import error, request
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer %s" % token
    req = request.Request(url, data=body, headers=headers, method="POST")
    try:
        with request.urlopen(req, timeout=timeout) as resp:
            return True, "%s answered HTTP %d" % (url, resp.status)
    except error.HTTPError as exc:
        return False, _clean("%s answered HTTP %d" % (url, exc.code), token)
    except (error.URLError, OSError, ValueError) as exc:
        return False, _clean("%s: %s" % (url, getattr(exc, "reason", exc)), token)


def notify(config, report, needed):
    """Call the configured notifier when ``needed``; -> {configured, sent, ok, how, text}."""
    command, webhook, token = config.get("notify_command") or [], config.get("notify_webhook") or "", \
        config.get("notify_token") or ""
    if isinstance(command, str):
        command = [command]
    out = {"configured": bool(command or webhook), "sent": False, "ok": True, "how": None}
    if not out["configured"]:
        out["text"] = "not configured (drift_notify_command / drift_notify_webhook)"
        return out
    if not needed:
        out["text"] = "not sent: the set of findings is unchanged since the last notification"
        return out
    body = json.dumps(payload(report), sort_keys=True).encode("utf-8")
    results = []
    if command:
        results.append(("command",) + send_command(command, body, token))
    if webhook:
        results.append(("webhook",) + send_webhook(webhook, body, token))
    out.update(sent=True, ok=all(r[1] for r in results), how=[r[0] for r in results])
    out["text"] = "; ".join("%s %s: %s" % (how, "sent" if ok else "FAILED", text) for how, ok, text in results)
    return out
