"""Filters of the preflight role: the refusal of a run on part of the fleet.

Unit-tested in tests/unit/test_preflight_filters.py.
"""


def dsv41_partial_fleet_refusal(covered, left_out, hostvars, scope, head, limit="", whole_only_reason=""):
    """The message refusing a run that covers ``covered`` and leaves out ``left_out`` (rank hosts).

    ``scope`` ``whole_only``: the playbook never runs on a subset; otherwise the operator may opt in
    with allow_partial_fleet (and an engine restart, which goes through the launcher on ``head``, is
    then refused).
    """
    out = ", ".join("%s (rank %s)" % (h, hostvars[h]["dsv41_rank"]) for h in left_out)
    text = ("Refusing to run on part of the fleet; nothing was changed on any host. This run covers %s%s and "
            "leaves out %s. " % (", ".join(covered), " (--limit %s)" % limit if limit else "", out))
    if scope == "whole_only":
        return text + ("This playbook cannot run on a subset of the ranks, even with -e allow_partial_fleet=true: "
                       "%s. Run it without --limit." % (whole_only_reason or "every step reaches every rank"))
    return text + ("This playbook acts on the whole fleet: the engine restart goes through the launcher on %s and "
                   "restarts every rank, and a rank left out skips its own checks. Run it without --limit, or add "
                   "-e allow_partial_fleet=true to act on %s only (an engine restart is then refused: the launcher "
                   "cannot restart a subset of the ranks)." % (head, ", ".join(covered)))


class FilterModule:
    """Preflight filters."""

    def filters(self):
        return {"dsv41_partial_fleet_refusal": dsv41_partial_fleet_refusal}
