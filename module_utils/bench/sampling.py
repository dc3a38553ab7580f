# -*- coding: utf-8 -*-
"""Sampled-output checks of stage H: does an arm sample from the same distribution as its baseline, and do
greedy requests keep their baseline answers when they share batches with sampled ones.

One subject: comparing the answers of two conditions measured in the same run. Standard library only
(module_utils run on the targets as they are; the chi-square tail is computed here, not by SciPy).

The distribution test (``distribution_failures``): for each workload, at its lowest concurrency, the
answer words of every distinct (prompt, answer) of each condition are pooled (a fixed seed makes the
repetitions of one prompt sample alike, so a repeated answer is counted once, never five times); the ``bins`` words most frequent across both
conditions are kept, the rest pooled into one "other" bin, and Pearson's chi-square test of homogeneity
on that 2 x (bins + 1) table gives a p-value. The arm fails where p < ``alpha`` (default 0.001: words
inside one answer are not independent draws, which inflates chi-square, so the threshold is strict; a
shifted sampler moves the counts by far more than that). The total variation distance between the two
word distributions is reported beside it, as the figure a person reads.
"""
from __future__ import absolute_import, division, print_function

import math

__metaclass__ = type

DEFAULT_ALPHA = 0.001
DEFAULT_BINS = 24
MIN_WORDS = 200          # fewer answer words than this on either side: too few to judge, said so


def _gamma_series(a, x):
    """Regularised lower incomplete gamma P(a, x) by its series (x < a + 1)."""
    term = total = 1.0 / a
    n = a
    for _ in range(1000):
        n += 1.0
        term *= x / n
        total += term
        if abs(term) < abs(total) * 1e-15:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _gamma_fraction(a, x):
    """Regularised upper incomplete gamma Q(a, x) by Lentz's continued fraction (x >= a + 1)."""
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def chi2_sf(stat, df):
    """P(X >= stat) for a chi-square variable with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError("degrees of freedom must be positive, got %r" % (df,))
    if stat <= 0:
        return 1.0
    a, x = df / 2.0, stat / 2.0
    if x < a + 1.0:
        return max(0.0, 1.0 - _gamma_series(a, x))
    return min(1.0, _gamma_fraction(a, x))


def homogeneity(counts_a, counts_b, bins=DEFAULT_BINS):
    """Chi-square test of homogeneity of two word-count mappings: {"chi2", "df", "p", "tvd", "words_a",
    "words_b"}. The ``bins`` most frequent words (pooled) are kept, the rest form one "other" bin; bins
    empty on both sides are dropped."""
    na, nb = sum(counts_a.values()), sum(counts_b.values())
    pooled = {}
    for counts in (counts_a, counts_b):
        for word, n in counts.items():
            pooled[word] = pooled.get(word, 0) + n
    top = sorted(pooled, key=lambda w: (-pooled[w], w))[:bins]
    rows_a = [counts_a.get(w, 0) for w in top]
    rows_b = [counts_b.get(w, 0) for w in top]
    rows_a.append(na - sum(rows_a))
    rows_b.append(nb - sum(rows_b))
    cells = [(a, b) for a, b in zip(rows_a, rows_b) if a + b > 0]
    total = float(na + nb)
    out = {"words_a": na, "words_b": nb, "df": max(len(cells) - 1, 0)}
    if na == 0 or nb == 0 or out["df"] == 0:
        out.update(chi2=0.0, p=1.0, tvd=0.0 if na == nb == 0 else 1.0)
        return out
    chi2 = 0.0
    for a, b in cells:
        col = a + b
        for observed, row in ((a, na), (b, nb)):
            expected = row * col / total
            chi2 += (observed - expected) ** 2 / expected
    words = set(counts_a) | set(counts_b)
    tvd = 0.5 * sum(abs(counts_a.get(w, 0) / float(na) - counts_b.get(w, 0) / float(nb)) for w in words)
    out.update(chi2=round(chi2, 3), p=chi2_sf(chi2, out["df"]), tvd=round(tvd, 4))
    return out


def answer_words(requests):
    """Word counts over the distinct (prompt, answer) pairs of measured requests (decode_bench's raw
    requests: ``prompt`` index and ``text``)."""
    seen = set()
    counts = {}
    for r in requests:
        key = (r.get("prompt"), r.get("text") or "")
        if key in seen:
            continue
        seen.add(key)
        for word in (r.get("text") or "").split():
            counts[word] = counts.get(word, 0) + 1
    return counts


def _by_workload(results):
    """{workload: word counts} from decode_bench results carrying ``answer_word_counts``: the lowest
    concurrency of each workload only, since a fixed seed gives the same answer to a prompt at every
    concurrency and counting it again would only inflate the statistic."""
    chosen = {}
    for r in results or []:
        if r.get("answer_word_counts") is None:
            continue
        w = r.get("workload")
        if w not in chosen or int(r.get("concurrency") or 0) < int(chosen[w].get("concurrency") or 0):
            chosen[w] = r
    # [[word, count], ...] as decode_bench returns them (a mapping is accepted too)
    return dict((w, dict((str(k), int(n)) for k, n in (r["answer_word_counts"].items()
                                                        if isinstance(r["answer_word_counts"], dict)
                                                        else r["answer_word_counts"])))
                for w, r in chosen.items())


def distribution_failures(arm_results, baseline_results, alpha=DEFAULT_ALPHA, bins=DEFAULT_BINS):
    """(failures, figures): the arm's sampled answers against the baseline's, per workload.
    ``figures`` is {workload: homogeneity(...)} for the record."""
    failures, figures = [], {}
    arm, base = _by_workload(arm_results), _by_workload(baseline_results)
    if not base:
        return ["sampled_distribution: the baseline has no sampled answers to compare with"], figures
    for workload in sorted(set(arm) | set(base)):
        a, b = base.get(workload) or {}, arm.get(workload) or {}
        if sum(b.values()) < MIN_WORDS or sum(a.values()) < MIN_WORDS:
            failures.append("sampled_distribution: %s has too few sampled answer words to compare (baseline %d, "
                            "arm %d; at least %d each)" % (workload, sum(a.values()), sum(b.values()), MIN_WORDS))
            continue
        fig = homogeneity(a, b, bins)
        figures[workload] = fig
        if fig["p"] < alpha:
            failures.append("sampled_distribution: %s answers are not sampled like the baseline's: chi-square %.1f "
                            "on %d df, p=%.2g < %g (total variation %.3f)"
                            % (workload, fig["chi2"], fig["df"], fig["p"], alpha, fig["tvd"]))
    return failures, figures


def mixed_greedy_failures(arm_results, baseline_results):
    """Greedy requests sent in batches mixed with sampled ones must give the baseline's greedy answers
    (``greedy_output_digests``: {prompt: [sha256, ...]} of each mixed run)."""
    def digests(results):
        out = {}
        for r in results or []:
            for pid, ds in (r.get("greedy_output_digests") or {}).items():
                out.setdefault((r.get("workload"), pid), set()).update(ds)
        return out
    arm, base = digests(arm_results), digests(baseline_results)
    if not base:
        return ["mixed_batch_greedy: the baseline sent no mixed greedy/sampled batch to compare with"]
    if not arm:
        return ["mixed_batch_greedy: no greedy answer of a mixed batch was collected"]
    out = []
    for key in sorted(set(arm) | set(base), key=lambda k: (str(k[0]), str(k[1]))):
        a, b = arm.get(key, set()), base.get(key, set())
        if a != b:
            out.append("mixed_batch_greedy: %s prompt %s answered greedy %d way(s) in mixed batches, the baseline "
                       "%d way(s), %s" % (key[0], key[1], len(a), len(b),
                                          "not the same answer" if a and b else "one side missing"))
    return out
