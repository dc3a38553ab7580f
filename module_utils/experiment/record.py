# -*- coding: utf-8 -*-
"""The run record of an experiment: record.json, record.md (standard library only).

One subject: what an experiment run leaves for the operator. The verdicts come from
``experiment_stats``; the chart is drawn by ``experiment_chart`` (control node only). Promotion is a
repository change, never a fleet change: a passing arm that the definition allows to promote gets a
unified diff of the launcher baseline file (``inventory/common/launcher_baseline.yml``) for the
operator to review and commit, and an arm with ``on_pass_validation`` whose evidence and quality checks
pass (measured, when timed; a speed win is not needed) gets the proposed ledger entry (validation name,
image digest, this record's path) that later stages can require.
"""
from __future__ import absolute_import, division, print_function

import difflib
import json
import os
import re

from ansible.module_utils.experiment import stats as st
from ansible.module_utils.bench.progress import measured_rounds

__metaclass__ = type

SETTINGS_KEY = "dsv41_launcher_settings:"


def evaluate(definition, conditions, arm_checks):
    """Verdicts of every arm. ``conditions``: name -> {"results": [decode_bench results], ...};
    ``arm_checks``: name -> {"evidence_failures", "correctness_failures", "refused"}."""
    base = conditions.get("baseline", {}).get("results") or []
    out = []
    for arm in definition["arms"]:
        checks = arm_checks.get(arm["name"], {})
        comparisons = []
        note = None
        measured = conditions.get(arm["name"], {}).get("results") or []
        if arm["timed"] and measured and not checks.get("refused"):
            try:
                comparisons = st.compare_conditions(base, measured, arm["acceptance"]["metric"])
            except st.StatsError as exc:
                note = "speed: %s" % exc
        verdict = st.arm_verdict(arm["name"], arm["acceptance"], checks.get("evidence_failures", ()),
                                 checks.get("correctness_failures", ()), comparisons, timed=arm["timed"],
                                 refused=checks.get("refused"))
        if note:
            verdict["reasons"].append(note)
            verdict["verdict"] = "fail"
        verdict["comparisons"] = comparisons
        verdict["metric"] = arm["acceptance"]["metric"]
        out.append(verdict)
    return out


def _quote(value):
    return "null" if value is None else json.dumps(str(value))


def baseline_diff(text, changes, path="inventory/common/launcher_baseline.yml"):
    """Unified diff that sets ``changes`` in the ``dsv41_launcher_settings`` block of ``text``."""
    lines = text.splitlines(True)
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip() == SETTINGS_KEY)
    except StopIteration:
        raise ValueError("%s has no top-level %s block" % (path, SETTINGS_KEY))
    end = start + 1
    while end < len(lines) and (lines[end].startswith("  ") or not lines[end].strip()):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    new = list(lines)
    for key in sorted(changes):
        pat = re.compile(r"^  %s:" % re.escape(key))
        hit = [i for i in range(start + 1, end) if pat.match(new[i])]
        line = "  %s: %s\n" % (key, _quote(changes[key]))
        if changes[key] is None:
            for i in reversed(hit):
                del new[i]
                end -= 1
        elif hit:
            new[hit[0]] = line
        else:
            new.insert(end, line)
            end += 1
    return "".join(difflib.unified_diff(lines, new, "a/" + path, "b/" + path))


def proposals(definition, verdicts, baseline_text, image_digest, record_path):
    """What the operator may commit: one entry per arm that proposes something. Promotion (the baseline
    diff) needs the arm's whole verdict, speed included; its validation (``on_pass_validation``) needs only
    its evidence and quality checks, and a timed arm to have been measured (the report's gates: W8 is
    validated by its checks, k=5 by being measured alone, whatever the speed)."""
    out = []
    by_name = dict((a["name"], a) for a in definition["arms"])
    for v in verdicts:
        arm = by_name[v["arm"]]
        item = {"arm": v["arm"]}
        if v["verdict"] == "pass" and arm["acceptance"].get("promote") and arm["settings"] and arm["timed"]:
            item["inventory_diff"] = baseline_diff(baseline_text, arm["settings"]) if baseline_text else None
        passed = v.get("checks_passed", v["verdict"] == "pass")
        if arm["acceptance"].get("on_pass_validation") and passed:
            item["validation"] = {"name": arm["acceptance"]["on_pass_validation"], "image_digest": image_digest,
                                  "record": record_path}
            if v["verdict"] != "pass":
                item["validation_note"] = ("validated by its checks and measured; not promoted (%s)"
                                           % "; ".join(r for r in v.get("reasons", []) if r.startswith("speed:")))
        if len(item) > 1:
            out.append(item)
    return out


def _fig(d):
    return "%.2f [%.2f..%.2f]" % (d["median"], d["min"], d["max"])


def _cell(result, metric):
    """A condition's median [min..max] of ``metric``, or ``unmeasured`` (the arm's verdict says why)."""
    try:
        return _fig(st.describe(st.metric_values(result, metric)))
    except st.StatsError:
        return "unmeasured"


def table_rows(definition, conditions, verdicts):
    """Side by side: one row per workload x concurrency, the baseline then each timed arm."""
    base = dict(((r["workload"], int(r["concurrency"])), r) for r in conditions.get("baseline", {}).get("results") or [])
    rows = []
    for key in sorted(base):
        metric = verdicts[0]["metric"] if verdicts else "aggregate_tok_s"
        row = {"workload": key[0], "concurrency": key[1], "baseline": _cell(base[key], metric)}
        for v in verdicts:
            cmp_row = [c for c in v.get("comparisons", []) if (c["workload"], c["concurrency"]) == key]
            mine = [r for r in (conditions.get(v["arm"]) or {}).get("results") or []
                    if (r.get("workload"), int(r.get("concurrency") or 0)) == key]
            if cmp_row:
                row[v["arm"]] = "%s (%+.1f%%, %s)" % (_fig(cmp_row[0]["arm"]), 100 * cmp_row[0]["gain"],
                                                      cmp_row[0]["outcome"].replace("_", " "))
            else:       # measured but not compared (the baseline or the arm lacks the figure): its own, or unmeasured
                row[v["arm"]] = _cell(mine[0], metric) if mine else "-"
        rows.append(row)
    return rows


def metric_tables(definition, conditions, order):
    """Figures the definition reports beside its acceptance metric (``report.metrics`` after the first),
    one table per metric and workload: each condition's median [min..max]; no verdict is drawn on them
    (e.g. per-stream rates when more slots are judged on the aggregate)."""
    out = []
    for metric in (definition.get("report") or {}).get("metrics", [])[1:]:
        cells = {}
        for name in order:
            for r in (conditions.get(name) or {}).get("results") or []:
                try:
                    values = st.metric_values(r, metric)
                except st.StatsError:
                    continue   # a failed condition has no figures; its verdict says why
                if values:
                    cells[(r["workload"], int(r["concurrency"]), name)] = _fig(st.describe(values))
        for workload in sorted(set(k[0] for k in cells)):
            out += ["", "## %s: %s, median [min..max] (reported, not judged)" % (workload, metric), "",
                    "| " + " | ".join(["C"] + order) + " |", "|" + "---|" * (len(order) + 1)]
            for c in sorted(set(k[1] for k in cells if k[0] == workload)):
                out.append("| " + " | ".join(["C%d" % c] + [cells.get((workload, c, n), "-") for n in order]) + " |")
    return out


def unfinished_benchmark_lines(entries):
    """record.md lines for the benchmarks an interrupted run left (``decode_bench_follow.leftovers``): each
    one's finished rounds, kept as measured but never judged (a condition is judged on all its repetitions)."""
    out = []
    for e in entries:
        rounds = [r for r in e.get("rounds") or [] if isinstance(r, dict)]
        measured = measured_rounds(rounds)
        out.append("Benchmark **%s** was cut off after %d of %d rounds (%s%s); its measured repetitions, kept "
                   "here and not judged: %s." % (
                       e.get("label") or "?", len(rounds), e.get("plan_rounds") or 0, e.get("state") or "?",
                       ", stopped by the rollback" if e.get("stopped") else "",
                       "; ".join("%s C%s repetition %s of %s: %.1f tok/s (%.1f per stream)" % (
                           r.get("workload"), r.get("concurrency"), r.get("number"), r.get("of"),
                           r.get("aggregate_tok_s") or 0.0, r.get("per_stream_tok_s") or 0.0)
                           for r in measured) or "none"))
    return out + ([""] if out else [])


def markdown(record):
    """record.md: the verdicts, then the side-by-side table per workload (prose and code apart)."""
    d = record["definition"]
    verdicts = record["verdicts"]
    out = ["# %s (stage %s)" % (d["name"], d["stage"]), "", d["description"].strip(), "",
           "Measured on: %s. Window: %s to %s. Rule: an arm wins a condition only when every repetition "
           "beats every baseline repetition (module_utils/experiment/stats.py)." % (
               record.get("measured_on") or "-", record.get("started") or "-", record.get("finished") or "-"), ""]
    if record.get("not_applicable"):
        out += ["**Not applicable**: %s" % record["not_applicable"], ""]
    if record.get("interrupted"):
        at = record["interrupted"]
        out += ["**Interrupted** %sat step %s; finished by playbooks/rollback.yml (the fleet restored to its "
                "snapshot, below). Measured before it stopped: %s; the other conditions were not run." % (
                    "in condition %s " % at["condition"] if at.get("condition") else "", at.get("step") or "unknown",
                    ", ".join(at.get("measured") or []) or "nothing"), ""]
        out += unfinished_benchmark_lines(at.get("unfinished_benchmarks") or [])
    out += ["## Verdicts", ""]
    for v in verdicts:
        out.append("- **%s**: %s%s" % (v["arm"], v["verdict"].upper(),
                                       "; " + "; ".join(v["reasons"]) if v["reasons"] else ""))
    arms = [v["arm"] for v in verdicts]
    untimed = set(a["name"] for a in d.get("arms", []) if a.get("timed") is False)
    timed = [a for a in arms if a not in untimed]   # a validation phase is never timed: no column
    labels = record.get("labels", {})
    rows = table_rows(d, record["conditions"], verdicts)
    metric = verdicts[0]["metric"] if verdicts else "aggregate_tok_s"
    for workload in sorted(set(r["workload"] for r in rows)):
        out += ["", "## %s: %s, median [min..max] over measured repetitions" % (workload, metric), ""]
        head = ["C"] + ["baseline%s" % _label(labels.get("baseline"))] + [
            "%s%s" % (a, _label(labels.get(a))) for a in timed]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in rows:
            if r["workload"] == workload:
                out.append("| " + " | ".join(["C%d" % r["concurrency"], r["baseline"]] + [r[a] for a in timed]) + " |")
    out += metric_tables(d, record["conditions"], ["baseline"] + timed)
    out += condition_table(record["conditions"], ["baseline"] + arms)
    if (d.get("report") or {}).get("accept_length"):
        out += accept_length_table(record["conditions"], ["baseline"] + arms)
    out += expected_table(record.get("estimate"), record["conditions"])
    if "campaign_drift" in record:
        from ansible.module_utils.experiment import campaign
        out += campaign.drift_table(record["campaign_drift"], verdicts_metric(record))
    out += memory_tables(d, record["conditions"], ["baseline"] + arms)
    out += _window_tables(record["conditions"], ["baseline"] + arms)
    out += exposed_table(d, record["conditions"], ["baseline"] + arms)
    out += sampling_table(record["conditions"], ["baseline"] + arms)
    out += verification_table(record["conditions"], ["baseline"] + arms)
    out += wo_a_mode_table(record["conditions"], ["baseline"] + arms)
    from ansible.module_utils.experiment import nodes
    out += nodes.markdown_rows(record["conditions"], ["baseline"] + arms)
    out += ranking_table(d, record["conditions"], ["baseline"] + arms, labels)
    if record.get("images"):
        from ansible.module_utils.adapters import image_report
        out += image_report.markdown_tables(record["images"])
    if record.get("restore"):
        rs = record["restore"]
        out += ["", "## Restore", "", "Fleet equal to the snapshot: **%s**" % ("yes" if rs.get("equal") else "NO")]
        for host, diff in sorted((rs.get("differences") or {}).items()):
            out.append("- %s: %s" % (host, ", ".join(diff)))
    for p in record.get("proposals", []):
        out += ["", "## Proposed for %s (commit it yourself; the fleet was restored)" % p["arm"]]
        if p.get("inventory_diff"):
            out += ["", "```diff", p["inventory_diff"].rstrip("\n"), "```"]
        if p.get("validation"):
            out += ["", "Ledger entry: `%s`" % json.dumps(p["validation"], sort_keys=True)]
            if p.get("validation_note"):
                out += ["", p["validation_note"]]
    if record.get("chart"):
        out += ["", "![chart](%s)" % os.path.basename(record["chart"])]
    return "\n".join(out) + "\n"


def _window_tables(conditions, order):
    from ansible.module_utils.engine_log import engram_cache
    from ansible.module_utils.host import gpu_telemetry
    return engram_cache.cache_table(conditions, order) + gpu_telemetry.telemetry_table(conditions, order)


def _secs(value):
    return "-" if value is None else "%.0f" % value


def _steps(stats):
    """"median [min..max]" of committed tokens per step and of step time, or why there is none."""
    if not stats:
        return "-", "-"
    if stats.get("missing"):
        return "n/a (%s)" % stats["missing"], "-"
    return _fig(stats["committed_tokens_per_step"]), _fig(stats["step_ms"])


def accept_length_table(conditions, order):
    """The report's acceptance beside the baseline's: rank 0's accept length (committed tokens per speculative
    step, from its Decode batch lines) per concurrency, each arm with its difference from the baseline."""
    base = (conditions.get("baseline") or {}).get("decode_steps") or {}
    rows = []
    for name in order:
        steps = (conditions.get(name) or {}).get("decode_steps") or {}
        for key in sorted((k for k in steps if k[:1] == "C" and k[1:].isdigit()), key=lambda k: int(k[1:])):
            mine_steps, base_steps = steps.get(key) or {}, base.get(key) or {}
            if not mine_steps.get("lines"):
                continue
            mine = (mine_steps.get("committed_tokens_per_step") or {}).get("median")
            theirs = ((base_steps.get("committed_tokens_per_step") or {}).get("median")
                      if base_steps.get("lines") else None)
            rows.append("| %s | %s | %s | %s | %s | %d |" % (
                name, key, "-" if mine is None else "%.2f" % mine, "-" if theirs is None else "%.2f" % theirs,
                "-" if name == "baseline" or mine is None or theirs is None else "%+.2f" % (mine - theirs),
                mine_steps.get("lines") or 0))
    if not rows:
        return []
    return ["", "## Acceptance: rank 0's accept length per concurrency, beside the baseline's", "",
            "Committed tokens per speculative step (`accept len` of rank 0's `Decode batch` lines), median.", "",
            "| condition | concurrency | accept length | baseline | difference | lines |", "|---|---|---|---|---|---|"] + rows


def verdicts_metric(record):
    return ((record.get("verdicts") or [{}])[0]).get("metric") or "aggregate_tok_s"


def expected_table(estimate, conditions):
    """The plan's expected seconds per step beside the measured ones (module_utils/experiment/estimate.py)."""
    if not estimate:
        return []
    from ansible.module_utils.experiment import estimate as experiment_estimate
    rows = experiment_estimate.expected_vs_actual(estimate, conditions)
    if not rows:
        return []
    out = ["", "## Expected and actual, seconds per step", "",
           "Expected: the plan's estimate before the run (%s in all, %d boots; boot: %s)." % (
               experiment_estimate.duration(estimate.get("total_s") or 0), estimate.get("boots") or 0,
               (estimate.get("figures") or {}).get("boot_s", "-")), "",
           "| condition | step | expected | actual |", "|---|---|---|---|"]
    for r in rows:
        out.append("| %s | %s | %s | %s |" % (r["name"], r["step"], _secs(r["expected_s"]), _secs(r["actual_s"])))
    return out


def condition_table(conditions, order):
    """Each condition's time per phase and its speculative-step figures (rank 0's Decode batch lines)."""
    rows = []
    for name in order:
        c = conditions.get(name)
        if c is None:
            continue
        t = c.get("timing") or {}
        steps = c.get("decode_steps") or {}
        # every concurrency the condition's lines were counted at (C1, C2, C4 and what its benchmark ran), then all
        for key in sorted((k for k in steps if k[:1] == "C" and k[1:].isdigit()), key=lambda k: int(k[1:])) + ["all"]:
            if key in steps and (key == "all" or (steps[key] or {}).get("lines")):
                tok, ms = _steps(steps[key])
                rows.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    name, _secs(t.get("apply_s")), _secs(t.get("boot_s")), _secs(t.get("benchmark_s")),
                    _secs(t.get("evidence_s")), _secs(t.get("total_s")), key, tok, ms))
        if not steps:
            rows.append("| %s | %s | %s | %s | %s | %s | - | - | - |" % (
                name, _secs(t.get("apply_s")), _secs(t.get("boot_s")), _secs(t.get("benchmark_s")),
                _secs(t.get("evidence_s")), _secs(t.get("total_s"))))
    if not rows:
        return []
    return ["", "## Each condition: seconds per phase, committed tokens per step and step time (ms)", "",
            "Steps from rank 0's `Decode batch` lines of the condition's boot: `accept len` per step, and "
            "`#running-req * accept len / gen throughput` per step; median [min..max].", "",
            "| condition | apply | boot | benchmark | evidence | total | lines | tokens/step | step ms |",
            "|---|---|---|---|---|---|---|---|---|"] + rows


def _g(value):
    return "-" if value is None else "%.2f" % value


def _m(value):
    return "-" if value is None else "%+.1f" % value


def _builds_on(arm, other):
    """The arm's settings include every setting of the other arm (DROP builds on twin-only)."""
    mine = arm.get("settings") or {}
    return all(mine.get(k) == v for k, v in (other.get("settings") or {}).items())


def memory_tables(definition, conditions, order):
    """The memory ledger of every condition per rank, then each arm's differences (MiB) against the
    definition's compare_with conditions, with the reference figures (the report's) beside them."""
    from ansible.module_utils.engine_log import memory_ledger as ml
    led = dict((n, conditions[n].get("memory")) for n in order if n in conditions and conditions[n].get("memory"))
    if not led:
        return []
    out = ["", "## Memory ledger per rank (GiB as the engine prints GB; MemAvailable from /proc/meminfo)", "",
           "| condition | rank | MemAvailable before / after boot | free before load | after target | after draft "
           "| weights | after KV pool | capture low | left for serving | KV pool (requested) | start-up s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in order:
        for host, r in sorted((led.get(name) or {}).items(), key=lambda kv: str(kv[1].get("rank"))):
            kv = "-" if r.get("kv_pool_tokens") is None else "{:,}".format(r["kv_pool_tokens"])
            if r.get("kv_requested_tokens"):
                kv += " ({:,}{})".format(r["kv_requested_tokens"], ", clamped" if r.get("kv_clamped") else "")
            out.append("| %s | %s (%s) | %s / %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                name, host, r.get("rank"), _g(r.get("mem_available_before_gib")), _g(r.get("mem_available_after_gib")),
                _g(r.get("free_before_load_gib")), _g(r.get("after_target_load_gib")), _g(r.get("after_draft_load_gib")),
                _g(r.get("weights_gib")), _g(r.get("after_kv_pool_gib")), _g(r.get("capture_low_gib")),
                _g(r.get("serving_free_gib")), kv, "-" if r.get("startup_s") is None else "%.0f" % r["startup_s"]))
    mem = definition.get("memory") or {}
    refs = mem.get("reference") or []
    rows = []
    for name in order[1:]:
        for vs in mem.get("compare_with") or ["baseline"]:
            if vs == name or name not in led or vs not in led:
                continue
            if vs != "baseline" and not _builds_on(conditions[name], conditions[vs]):
                continue        # draft head against twin-only compares two unrelated changes
            ref = [r for r in refs if r["arm"] == name and r["vs"] == vs]
            ref_text = "; ".join("%+.1f MiB %s%s" % (r["mib"], r.get("what", "weights"),
                                                     " (%s)" % r["why"] if r.get("why") else "") for r in ref) or "-"
            for host, diff in sorted(ml.difference(led[name], led[vs]).items()):
                rows.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    name, vs, host, _m(diff["weights_mib"]), _m(diff["capture_low_mib"]),
                    _m(diff["serving_free_mib"]), "-" if diff["kv_pool_tokens"] is None else "%+d" % diff["kv_pool_tokens"],
                    _m(diff.get("mem_available_after_mib")), _m(ml.cost_mib(diff)), ref_text))
    if rows:
        out += ["", "## Memory differences (MiB, arm minus reference condition; weights negative = saved, "
                "free memory positive = gained)", "",
                "| arm | against | host | weights | capture low | left for serving | KV pool tokens | MemAvailable after "
                "boot | cost (weights + less for serving) | reference |",
                "|---|---|---|---|---|---|---|---|---|---|"] + rows
    return out


def exposed_table(definition, conditions, order):
    """The exposed time each profiled condition showed on every rank's compute stream (profile traces)."""
    exposed = (definition.get("profile") or {}).get("exposed")
    rows = []
    for name in order:
        per = (conditions.get(name) or {}).get("exposed_us") or {}
        if any(v is not None for v in per.values()):
            rows.append("| %s | %s |" % (name, " | ".join("%s %s" % (h, "-" if per[h] is None else "%.1f" % per[h])
                                                          for h in sorted(per))))
    if not exposed or not rows:
        return []
    return ["", "## Exposed %s time on the compute stream (us per profiled step, kernels matching `%s`)"
            % (exposed["name"], exposed["pattern"]), "", "| condition | per rank |", "|---|---|"] + rows


def ranking_table(definition, conditions, order, labels):
    """The report's rank for block sizes: per workload, committed tokens per speculative step divided by
    step time (rank 0's Decode batch lines logged while the workload ran at the ranking concurrency),
    best first. Only when the definition asks (``ranking``)."""
    ranking = definition.get("ranking")
    if not ranking:
        return []
    c = ranking.get("concurrency", 1)
    out = ["", "## Ranking at C%d: committed tokens per step / step time, per workload (rank 0's Decode batch "
           "lines in each workload's measured window)" % c]
    workloads = sorted(set(w for n in order for w in ((conditions.get(n) or {}).get("workload_steps") or {})))
    for w in workloads:
        rows = []
        for name in order:
            st = ((conditions.get(name) or {}).get("workload_steps") or {}).get(w)
            if not st:
                continue
            per, ms = st.get("committed_tokens_per_step"), st.get("step_ms")
            rows.append((st.get("committed_per_s") if st.get("committed_per_s") is not None else -1.0, name, per, ms,
                         st.get("lines"), st.get("missing")))
        rows.sort(key=lambda r: -r[0])
        out += ["", "### %s" % w, "", "| rank | condition | tokens/step | step ms | tokens/step per s | lines |",
                "|---|---|---|---|---|---|"]
        for i, (q, name, per, ms, lines, missing) in enumerate(rows, 1):
            out.append("| %s | %s%s | %s | %s | %s | %s |" % (
                i if q >= 0 else "-", name, _label(labels.get(name)), "-" if not per else "%.2f" % per["median"],
                "-" if not ms else "%.2f" % ms["median"], "%.1f" % q if q >= 0 else (missing or "-"), lines or 0))
    return out


def wo_a_mode_table(conditions, order):
    """Stages D and F: how wo_a_w8 ran in each condition, per rank (einsum bridge on today's image, kernel
    replacement on the canary; DROP's released copies and the draft kept on bf16), from the adapter's lines."""
    rows = []
    for name in order:
        for host, m in sorted(((conditions.get(name) or {}).get("wo_a_modes") or {}).items(),
                              key=lambda kv: kv[1].get("rank", 0)):
            if m.get("armed"):
                rows.append("| %s | %s | %s | %s | %s | %s |" % (
                    name, host, m.get("rank"), m.get("mode"), "yes" if m.get("drop") else "no",
                    "yes" if m.get("draft_kept") else "no"))
    if not rows:
        return []
    return ["", "## wo_a_w8 mode per rank (from the adapter's lines in each boot)", "",
            "| condition | host | rank | mode | DROP released bf16 | draft wo_a kept on bf16 |",
            "|---|---|---|---|---|---|"] + rows


def sampling_table(conditions, order):
    """Stage H: rank 0's folded-sampling decision of each condition's boot, and each arm's sampled answers
    against the baseline's (chi-square test of homogeneity per workload, module_utils/bench/sampling.py)."""
    rows = []
    for name in order:
        c = conditions.get(name) or {}
        folded = c.get("folded_sampling") or {}
        dist = c.get("distribution") or {}
        if not dist and folded.get("folded") is None:
            continue
        figures = "; ".join("%s chi2 %.1f on %d df, p=%.3g, TV %.3f" % (w, f["chi2"], f["df"], f["p"], f["tvd"])
                            for w, f in sorted(dist.items())) or "-"
        rows.append("| %s | %s | %s |" % (name, folded.get("decision") or "not logged", figures))
    if not rows or not any(conditions.get(n, {}).get("distribution") for n in order):
        return []
    return ["", "## Sampling: folded decision (rank 0) and sampled answers against the baseline", "",
            "| condition | folded-sampling decision | answer words vs baseline |", "|---|---|---|"] + rows


def verification_table(conditions, order):
    """The proposal test (randomised PIT of every committed token in the target's reported distribution, per
    workload) and the capped-block probe (rank 0's mean committed tokens per step on the greedy probe) of each
    condition that ran them (module_utils/experiment/verify.py)."""
    rows = []
    for name in order:
        c = conditions.get(name) or {}
        steps = (c.get("capped_probe") or {}).get("steps") or {}
        for workload in sorted(set(c.get("proposal") or {}) | set(steps), key=str):
            f = (c.get("proposal") or {}).get(workload)
            s = steps.get(workload) or {}
            rows.append("| %s | %s | %s | %s | %s | %s |" % (
                name, workload, f["positions"] if f else "-", " ".join(str(n) for n in f["bins"]) if f else "-",
                "chi2 %.1f on %d df, p=%.3g" % (f["chi2"], f["df"], f["p"]) if f else "-",
                "%.3f (%d lines)" % (s["mean_accept_len"], s["lines"]) if s.get("mean_accept_len") is not None
                else (s.get("missing") or "-")))
    if not rows:
        return []
    return ["", "## Speculative verification: proposal test and capped-block probe", "",
            "| condition | workload | sampled positions | PIT bins | uniformity | committed tokens per step (greedy probe, C1) |",
            "|---|---|---|---|---|---|"] + rows


def _label(labels):
    return " (%s)" % ", ".join("%s %s" % (k.replace("_", " "), v) for k, v in sorted(labels.items())) if labels else ""


def write_text(path, text):
    """Atomic write (``.partial``, fsync, rename): a record file is complete or absent."""
    tmp = path + ".partial"
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, path)
