"""docker stats."""
import sys
import time

from ..cli import Flags, write_stdout
from ..gotemplate import render_list
from ..procs import reconcile
from ..store import Store
from ..views import STATS_DEFAULT, STATS_HEADER, created_key, host_mem_total, stats_ctx


def cmd_stats(argv):
    f = Flags([("--no-stream", "nostream", False, False), ("--format", "format", True, False),
               ("-a|--all", "all", False, False), ("--no-trunc", "notrunc", False, False)], argv, "stats")
    trunc = not f.get("notrunc")
    fmt = f.get("format") or STATS_DEFAULT
    mem_total = host_mem_total()
    while True:
        rows = []
        with Store() as store:
            reconcile(store)
            if f.args:
                for ref in f.args:
                    rows.append(stats_ctx(store.get(ref), ref, trunc, mem_total))
            else:
                cs = sorted(store.containers, key=created_key, reverse=True)
                for c in cs:
                    if f.get("all") or c["State"]["Running"]:
                        rows.append(stats_ctx(c, None, trunc, mem_total))
        write_stdout(render_list(fmt, rows, STATS_HEADER))
        sys.stdout.flush()
        if f.get("nostream"):
            return 0
        time.sleep(1)
