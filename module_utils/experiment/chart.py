# -*- coding: utf-8 -*-
"""The chart of an experiment record (control node only: needs matplotlib from requirements.txt).

One panel per workload x concurrency; in each, every condition (the baseline, then each timed arm)
shows each measured repetition as a dot, its median as a bar and its min..max range as a line, so a
reader sees at a glance whether the arm's cloud of points clears the baseline's (the winning rule).
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.experiment import stats as st

__metaclass__ = type


class ChartError(RuntimeError):
    """The chart cannot be drawn (matplotlib missing on the control node's interpreter)."""


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")           # no display on a control node
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ChartError("the chart needs matplotlib on the control node (pinned in requirements.txt; run "
                         "the task with ansible_python_interpreter={{ ansible_playbook_python }}): %s" % exc)
    return plt


def draw(path, title, conditions, order, metric="aggregate_tok_s", verdicts=None, subtitle=None):
    """Write a PNG at ``path``. ``conditions``: name -> {"results": [decode_bench results]};
    ``order``: condition names left to right (baseline first)."""
    plt = _pyplot()
    keys = sorted(set((r["workload"], int(r["concurrency"]))
                      for name in order for r in (conditions.get(name, {}).get("results") or [])))
    if not keys:
        raise ChartError("no measured condition to draw")
    outcome = {}
    for v in verdicts or []:
        for c in v.get("comparisons", []):
            outcome[(v["arm"], c["workload"], c["concurrency"])] = (c["outcome"], c["gain"])
    cols = min(len(keys), 3)
    rows = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    colours = ["#4d4d4d", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"]
    for n, key in enumerate(keys):
        ax = axes[n // cols][n % cols]
        names = []
        for x, name in enumerate(order):
            res = [r for r in conditions.get(name, {}).get("results") or []
                   if (r["workload"], int(r["concurrency"])) == key]
            if not res:
                continue
            try:
                vals = st.metric_values(res[0], metric)
            except st.StatsError:                      # a condition without the figure: named, not drawn
                names.append((x, "%s\nunmeasured" % name))
                continue
            d = st.describe(vals)
            colour = colours[x % len(colours)]
            spread = [x - 0.12 + 0.24 * i / max(1, len(vals) - 1) for i in range(len(vals))]
            ax.scatter(spread, vals, s=14, color=colour, alpha=0.8, zorder=3)
            ax.hlines(d["median"], x - 0.25, x + 0.25, color=colour, linewidth=2.5, zorder=4)
            ax.vlines(x, d["min"], d["max"], color=colour, linewidth=1, zorder=2)
            label = name
            if (name, key[0], key[1]) in outcome:
                what, gain = outcome[(name, key[0], key[1])]
                label = "%s\n%+.1f%% %s" % (name, 100 * gain, what.replace("_", " "))
            names.append((x, label))
        ax.set_xticks([x for x, _ in names])
        ax.set_xticklabels([label for _, label in names], fontsize=8)
        ax.set_xlim(-0.6, len(order) - 0.4)
        ax.set_title("%s C%d" % key, fontsize=10)
        ax.set_ylabel(metric.replace("_tok_s", " tok/s").replace("_", " "), fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    for n in range(len(keys), rows * cols):
        axes[n // cols][n % cols].axis("off")
    fig.suptitle(title + ("\n" + subtitle if subtitle else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
