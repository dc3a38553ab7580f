"""Quality checks (module_utils/experiment/quality.py) through the experiment's correctness filter and directly."""
import pytest

import experiment_filters as filters
from ansible.module_utils.bench import summary as dbs
from ansible.module_utils.experiment import quality as q


def greedy(workload, answers, concurrency=1):
    """A decode_bench result of greedy answers {prompt id: answer text} (the digests as decode_bench keeps them)."""
    import hashlib
    import json
    digests, excerpts = {}, {}
    for pid, text in answers.items():
        d = hashlib.sha256(json.dumps(["", text]).encode("utf-8")).hexdigest()[:16]
        digests[pid], excerpts[pid] = [d], {d: dbs.excerpt(text)}
    return {"workload": workload, "concurrency": concurrency, "settings": {"temperature": 0.0},
            "output_digests": digests, "answer_excerpts": excerpts}


BASE = [greedy("prose", {"prose-1": "The tide rose over the harbour wall.", "prose-2": "Bread needs time."}),
        greedy("code", {"code-1": "def f(x):\n    return x + 1"})]


def test_equal_greedy_answers_pass_and_a_changed_one_is_named_with_both_answers():
    checks = [{"name": "greedy_matches_baseline", "args": {}}]
    conditions = {"baseline": {"results": BASE}}
    same = [greedy("prose", {"prose-1": "The tide rose over the harbour wall.", "prose-2": "Bread needs time."}, 4),
            greedy("code", {"code-1": "def f(x):\n    return x + 1"})]
    assert filters.dsv41_experiment_correctness(checks, same, {}, conditions, "w8") == []
    changed = [greedy("prose", {"prose-1": "The tide rose over the harbour gate.", "prose-2": "Bread needs time."}),
               greedy("code", {"code-1": "def f(x):\n    return x + 1"})]
    assert filters.dsv41_experiment_correctness(checks, changed, {}, conditions, "w8") == [
        "greedy_matches_baseline: prose prompt prose-1: the arm answered 'The tide rose over the harbour gate.' "
        "where the baseline answered 'The tide rose over the harbour wall.'"]
    # the baseline itself is not compared with anything
    assert filters.dsv41_experiment_correctness(checks, changed, {}, conditions, "baseline") == []


def test_a_workload_or_prompt_the_baseline_did_not_answer_is_named_not_skipped():
    arm = BASE + [greedy("json", {"json-1": "{}"}), greedy("prose", {"prose-9": "New."})]
    out = q.greedy_match_failures(arm, BASE)
    assert out == ["greedy_matches_baseline: the baseline has no greedy json answers to compare with",
                   "greedy_matches_baseline: prose prompt prose-9: the baseline did not answer it"]
    assert q.greedy_match_failures([], BASE) == ["greedy_matches_baseline: the arm gave no greedy answer to compare"]
    sampled = dict(BASE[0], settings={"temperature": 0.7})
    assert q.greedy_match_failures([sampled], BASE) == [
        "greedy_matches_baseline: the arm gave no greedy answer to compare"], "sampled answers are never compared"


def test_an_answer_excerpt_is_one_line_without_escapes_and_cut():
    text = "a\nb\x1b[31mred\x07" + "x" * 400
    e = dbs.excerpt(text)
    assert "\n" not in e and "\x1b" not in e and "\x07" not in e and e.startswith("a\\nb[31mred")
    assert len(e) == dbs.EXCERPT_CHARS and e.endswith("\u2026")


def test_needle_prompts_hide_the_code_half_way_in_about_the_asked_tokens():
    prompts = q.needle_prompts((30000, 100000))
    assert [p["id"] for p in prompts] == ["needle-30k", "needle-100k"]
    for p, size in zip(prompts, (30000, 100000)):
        facts = q.needle_facts(size)
        text = p["messages"][0]["content"]
        words = len(text.split())
        assert abs(words * 4 / 3 - size) / size < 0.01, (words, size)
        needle = "The pass code for vault %s is %s." % (facts["vault"], facts["code"])
        at = text.index(needle) / len(text)
        assert 0.45 < at < 0.55 and text.count(facts["code"]) == 1
        assert text.endswith("What is the pass code for vault %s? Answer with one sentence that states it." % facts["vault"])
    assert q.needle_prompts((30000,)) == q.needle_prompts((30000,)), "deterministic: the check recomputes the answer"
    with pytest.raises(q.QualityError, match="500 tokens is not a context size"):
        q.needle_facts(500)


def test_a_missed_needle_fails_naming_the_prompt_its_size_and_the_answer():
    f30, f100 = q.needle_facts(30000), q.needle_facts(100000)
    found = greedy("needles", {"needle-30k": "The pass code for vault %s is %s." % (f30["vault"], f30["code"]),
                               "needle-100k": "I found no pass code for vault %s in the text." % f100["vault"]})
    found["workload"] = "needles"
    checks = [{"name": "long_context_needles", "args": {}}]
    assert filters.dsv41_experiment_correctness(checks, [found], {}, {}, "baseline") == [
        "long_context_needles: needle-100k (about 100,000 tokens, the pass code at 50%% depth): answered 'I found no "
        "pass code for vault %s in the text.'; the text holds 'The pass code for vault %s is %s.'"
        % (f100["vault"], f100["vault"], f100["code"])]
    assert q.needle_failures([found], (30000,)) == []
    assert q.needle_failures([], (30000,)) == ["long_context_needles: no needle prompt was answered (needle-30k)"]


def test_every_shipped_definition_asks_for_the_needles_and_the_exact_ones_for_the_baseline_s_answers():
    """Quality is a check every arm passes: every definition sends the long-context needles and the graded code,
    JSON and math tasks; those whose arms do the baseline's computation (fence, prefetch, clocks, row cache, DRM
    cache) also require its greedy answers."""
    from pathlib import Path
    from ansible.module_utils.experiment import schema as es
    exact = {"stage_c_fence", "stage_e_prefetch", "stage_i_clocks", "stage_i_row_cache", "stage_i_drm"}
    for path in sorted((Path(__file__).resolve().parents[4] / "experiments").glob("stage_*.yml")):
        d = es.load_text(path.read_text(), str(path), path.stem)
        for arm in d["arms"]:
            names = [c["name"] for c in arm["correctness"]]
            assert "long_context_needles" in names and "graded_tasks" in names, (path.name, arm["name"])
            assert ("greedy_matches_baseline" in names) == (path.stem in exact), (path.name, arm["name"])


def test_graded_answers_are_judged_by_their_grader_not_matched_with_the_baseline_s():
    """The graded probe's answers have their known right answers (module_utils/experiment/graded_tasks.py); the baseline's
    record keeps only its timed answers, so matching them would report a baseline with nothing to compare."""
    timed = {"workload": "prose", "concurrency": 1, "settings": {"temperature": 0.0},
             "output_digests": {"p0": ["aa"]}, "answer_excerpts": {"p0": {"aa": "same"}}}
    graded = {"workload": "graded", "concurrency": 1, "settings": {"temperature": 0.0},
              "output_digests": {"math-odd-sum": ["bb"]}, "answer_excerpts": {"math-odd-sum": {"bb": "2500"}}}
    assert q.greedy_match_failures([timed, graded], [timed]) == []
