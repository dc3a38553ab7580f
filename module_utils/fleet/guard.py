# -*- coding: utf-8 -*-
"""The fleet guard's decisions, taken from the run itself (standard library only; PyYAML on the control node).

The preflight role checks the whole fleet and the lab-only rule as tasks, which ``--skip-tags`` can skip and
whose variables ``-e`` can set. This guard holds whatever the tags and the extra variables say; the
``dsv41_guarded`` strategy (strategy_plugins/, the project's default in ansible.cfg) asks it before each
play runs a single task:

* **Whole fleet**: the ranks a run reaches are the ``--limit`` applied to ``dsv41_ranks``, as the inventory
  resolves it. A playbook's scope is what *its own file* declares for the preflight
  (``preflight_fleet_scope``: ``whole`` by default, ``whole_only`` or ``any``), read from the file, so
  ``-e preflight_fleet_scope=any`` changes nothing. ``whole`` lets a subset through only with
  ``-e allow_partial_fleet=true`` (the documented opt-in); ``whole_only`` never.
* **Lab only**: on a control node marked ``DSV41_LAB_ONLY=1``, every host a play reaches must be reached at
  a loopback address (the lab's ssh ports on 127.0.0.1): whatever the inventory calls itself or ``-e`` sets,
  the run then cannot touch a machine elsewhere. A fleet that is not a lab (``dsv41_fleet_is_lab`` unset or
  false: production, the TP4 example, any fleet added later) is refused too, and so is an inventory naming
  itself ``production`` whatever its flag says.
"""
from __future__ import absolute_import, division, print_function

import ipaddress
import os

__metaclass__ = type

SCOPES = ("whole", "whole_only", "any")
RANK_GROUP = "dsv41_ranks"


def playbook_scope(path, depth=0):
    """The fleet scope a playbook file declares for its preflight import (``whole`` when it declares none;
    an unreadable file is ``whole``, the strict one). A playbook that imports another one (the repository
    root's wrappers of playbooks/) declares what the imported one does."""
    try:
        import yaml
        with open(path, encoding="utf-8") as handle:
            plays = yaml.safe_load(handle)
    except Exception:  # noqa: BLE001 - anything unreadable is judged by the strictest scope
        return "whole"
    for play in plays if isinstance(plays, list) else []:
        if not isinstance(play, dict):
            continue
        target = play.get("ansible.builtin.import_playbook") or play.get("import_playbook") or ""
        if not isinstance(target, str) or not target:
            continue
        if os.path.basename(target) == "preflight.yml":
            scope = (play.get("vars") or {}).get("preflight_fleet_scope", "whole")
            return scope if scope in SCOPES else "whole"
        if depth < 4 and "{" not in target:
            return playbook_scope(os.path.join(os.path.dirname(os.path.abspath(path)), target), depth + 1)
    return "whole"


def truthy(value):
    return value is True or str(value).strip().lower() in ("1", "true", "yes", "on")


def partial_refusal(playbook, scope, all_ranks, reached, allow_partial, limit):
    """Why a run that reaches ``reached`` of ``all_ranks`` may not go on, or None."""
    left_out = sorted(set(all_ranks) - set(reached))
    if not left_out or scope == "any":
        return None
    if scope == "whole" and truthy(allow_partial):
        return None
    how = ("it never runs on part of the fleet" if scope == "whole_only" else
           "a subset needs -e allow_partial_fleet=true")
    return ("Fleet guard: %s acts on the whole fleet (%s), and --limit %s leaves out %s. Nothing was run. This "
            "check holds whatever --skip-tags or -e say; run without --limit%s."
            % (os.path.basename(playbook), how, limit or "(none)", ", ".join(left_out),
               "" if scope == "whole_only" else ", or opt in with -e allow_partial_fleet=true"))


def is_loopback(address):
    """True for 127.0.0.0/8, ::1 and ``localhost`` (what the lab's hosts are reached at)."""
    text = str(address or "").strip().strip("[]")
    if text.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def lab_only_refusal(targets, fleets=()):
    """On a lab-only control node: ``targets`` is [(host, connection, address)], ``fleets`` the
    (``dsv41_fleet_name``, ``dsv41_fleet_is_lab``) pairs the play's hosts declare (a host naming no fleet, such
    as the implicit localhost, adds nothing). A fleet that is not a lab or is named production, and a host
    reached anywhere but at a loopback address, are refused, naming them."""
    not_lab = sorted(set(name for name, is_lab in fleets or ()
                         if name and (name == "production" or not truthy(is_lab))))
    if not_lab:
        return ("This control node is lab-only (DSV41_LAB_ONLY=1) and the inventory describes the %s fleet, not a "
                "lab (dsv41_fleet_is_lab true, not named production). Run a fleet's stages only from an operator's "
                "workstation. Nothing was run. (Fleet guard: it holds whatever --skip-tags or -e say.)"
                % ", ".join("'%s'" % n for n in not_lab))
    away = ["%s (%s)" % (host, address) for host, connection, address in targets
            if connection != "local" and not is_loopback(address)]
    if away:
        return ("This control node is lab-only (DSV41_LAB_ONLY=1): %s would be reached outside this machine. "
                "Nothing was run. (Fleet guard: only loopback addresses, the lab's, are reached from here, "
                "whatever --skip-tags or -e say.)" % ", ".join(away))
    return None
