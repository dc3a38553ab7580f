# -*- coding: utf-8 -*-
"""What a sudo journal line says was run, and whether it changed the GPU clocks (standard library only).

``SYSLOG_IDENTIFIER=sudo``: ``   zurih : TTY=pts/0 ; PWD=/home/zurih ; USER=root ; COMMAND=/usr/bin/nvidia-smi -rgc``
(a refusal puts its reason first: ``zurih : command not allowed ; ...``; nothing ran). Commands are split
as process command lines are (module_utils/host/nvidia_smi.py): through shells, wrappers and interpreters.
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.host.nvidia_smi import SHELLS, program_name, split_command, smi_invocation

__metaclass__ = type
BECOME_MARK = "BECOME-SUCCESS-"
SEPARATORS = (";", "&&", "||", "|", "&")


def parse_sudo(message):
    """A sudo log line -> {user, ran, reason, fields, command}; None for other sudo lines (PAM).

    ``ran`` is False when sudo refused (its reason comes first: ``command not allowed``,
    ``3 incorrect password attempts``, ``a password is required``, ``user NOT in sudoers``).
    """
    if " : " not in message or "COMMAND=" not in message:
        return None
    user, rest = message.split(" : ", 1)
    user = user.strip()
    head, sep, command = rest.partition("COMMAND=")
    if head and not head.rstrip().endswith(";"):
        return None
    parts = [p.strip() for p in head.split(" ; ") if p.strip() and p.strip() != ";"]
    parts = [p.rstrip(";").strip() for p in parts]
    reason = None
    if parts and "=" not in parts[0]:
        reason = parts.pop(0)
    fields = {}
    for p in parts:
        k, _, v = p.partition("=")
        fields[k.strip()] = v.strip()
    return {"user": user, "ran": reason is None, "reason": reason, "fields": fields, "command": command.strip()}


def _clock_value(tok):
    nums = tok.split(",")
    try:
        vals = [int(x) for x in nums]
    except ValueError:
        return None
    if len(vals) == 1:
        return {"min": vals[0], "max": vals[0]}
    if len(vals) == 2:
        return {"min": vals[0], "max": vals[1]}
    return None


def _segments(args):
    """nvidia-smi's arguments split at shell separators; later segments only when they run nvidia-smi."""
    segs, cur = [], []
    for tok in args:
        stripped = tok.rstrip(";&|")
        if tok in SEPARATORS:
            segs.append(cur)
            cur = []
            continue
        if stripped != tok:
            if stripped:
                cur.append(stripped)
            segs.append(cur)
            cur = []
            continue
        cur.append(tok)
    segs.append(cur)
    out = [segs[0]]
    for seg in segs[1:]:
        if seg and program_name(seg[0]) == "nvidia-smi":
            out.append(seg[1:])
    return out


def clock_actions(command):
    """The clock changes a command line makes, in order: [{action: lock|reset|gpu-reset, min, max, text}].

    Finds nvidia-smi directly, under wrappers and interpreters, or in ``sh -c '...'``
    (``module_utils.nvidia_smi.smi_invocation``).
    """
    inv = smi_invocation(split_command(command))
    if inv is None:
        return []
    out = []
    for args in _segments(inv[1]):
        i = 0
        while i < len(args):
            tok = args[i]
            name, eq, val = tok.partition("=")
            if name in ("-lgc", "--lock-gpu-clocks"):
                if not eq:
                    val = args[i + 1] if i + 1 < len(args) else ""
                    i += 1
                clocks = _clock_value(val) or {"min": None, "max": None}
                out.append(dict(clocks, action="lock", text="-lgc %s" % val))
            elif tok in ("-rgc", "--reset-gpu-clocks"):
                out.append({"action": "reset", "min": None, "max": None, "text": "-rgc"})
            elif tok in ("-r", "--gpu-reset"):
                out.append({"action": "gpu-reset", "min": None, "max": None, "text": "-r (GPU reset)"})
            i += 1
    return out


def sudo_kind(command):
    """clock | ansible | shell | other: what a root command line lets us see."""
    if BECOME_MARK in command:
        return "ansible"
    if clock_actions(command):
        return "clock"
    argv = split_command(command)
    if argv and (program_name(argv[0]) in SHELLS | {"su", "sudo", "login"}) and "-c" not in argv[1:]:
        return "shell"
    return "other"
