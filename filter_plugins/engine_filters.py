"""Filters of the engine role: the per-rank autotune table and the boot-log tails of a failed start.

Unit-tested in tests/unit/filters/test_engine_filters.py.
"""


def dsv41_autotune_rows(hosts, hostvars):
    """One row per host of the play from its ``engine_autotune`` (autotune_status) result."""
    rows = []
    for host in hosts:
        a = hostvars[host]["engine_autotune"]
        rows.append({"host": host, "rank": hostvars[host]["dsv41_rank"], "verdict": a["verdict"],
                     "armed": a["armed"], "reused": a["reused_count"], "tuned": a["tuned_count"],
                     "disagree": a["disagreements"], "files": len(a["cache_files"]),
                     "sidecars": len([f for f in a["cache_files"] if f.get("sidecar")])})
    return rows


def dsv41_boot_tails(results, hostvars):
    """The text of a looped engine_boot_log (one rank an item): a header per rank naming its container,
    then the tail of its latest boot, or the module's message when the log could not be read."""
    parts = []
    for r in results or []:
        host = r["item"]
        text = r["content"] if "content" in r else r.get("msg", "")
        parts.append("--- %s (%s) latest boot, last lines:\n%s\n"
                     % (host, hostvars[host]["preflight_container_name"], text))
    return "".join(parts)


class FilterModule:
    """Engine filters."""

    def filters(self):
        return {
            "dsv41_autotune_rows": dsv41_autotune_rows,
            "dsv41_boot_tails": dsv41_boot_tails,
        }
