"""The engine stand-in's fixed answers: needles at any depth, graded tasks, and the faults that break them.
"""
from __future__ import annotations

from engine_standin import CHAT, answer, head_with


def test_needles_are_found_at_any_depth_unless_the_needle_miss_fault_cuts_the_reach(lab):
    """Long-context retrieval as the quality check asks it (module_utils/experiment/quality.py): the stand-in
    answers a needle question with the sentence hidden in its prompt; needle_miss loses it beyond the reach."""
    from ansible.module_utils.experiment import quality as q
    prompts = dict((p["id"], p) for p in q.needle_prompts((30000, 100000)))
    answers = {}
    for name, env in (("ok", {"LAB_ENGINE_FAULT": "needle_miss"}),
                      ("miss", {"DSV41_FOLDED_FENCE": "1", "LAB_ENGINE_FAULT": "needle_miss"})):
        port, proc = head_with(lab, env)
        try:
            for pid, p in prompts.items():
                answers[(name, pid)] = answer(port, {**CHAT, "messages": p["messages"], "max_tokens": 48})
        finally:
            proc.stop()
    for size in (30000, 100000):
        f = q.needle_facts(size)
        assert answers[("ok", f["id"])] == "The pass code for vault %s is %s." % (f["vault"], f["code"])
    assert answers[("miss", "needle-30k")] == answers[("ok", "needle-30k")], "within the reach"
    assert answers[("miss", "needle-100k")].startswith("I found no pass code for vault")


def test_graded_tasks_are_answered_right_unless_graded_wrong_is_set_with_an_adapter_armed(lab):
    """The graded task set as the quality check asks it (module_utils/experiment/graded_tasks.py), graded as the head grades
    it (code run inside bubblewrap): every answer passes; graded_wrong with an adapter armed fails every task."""
    from ansible.module_utils.base import isolated_python
    from ansible.module_utils.experiment import graded_tasks as g
    got = {}
    for name, env in (("ok", {"LAB_ENGINE_FAULT": "graded_wrong"}),
                      ("wrong", {"DSV41_FOLDED_FENCE": "1", "LAB_ENGINE_FAULT": "graded_wrong"})):
        port, proc = head_with(lab, env)
        try:
            got[name] = dict((p["id"], [answer(port, {**CHAT, "messages": p["messages"], "max_tokens": 256})])
                             for p in g.prompts())
        finally:
            proc.stop()
    assert "\n    while b:" in got["ok"]["code-gcd"][0], "the code keeps its lines and indentation"
    assert g.failures(got["ok"], isolated_python.run) == []
    wrong = g.failures(got["wrong"], isolated_python.run)
    assert [w.split(" ")[1] for w in wrong] == [t["id"] for t in g.TASKS], wrong
    assert "graded_tasks: math-odd-sum (math): final answer 2499, expected 2500; answer: " in wrong[0]
    assert any("json-invoice (json): key 'total' is 270.5, expected 338.0" in w for w in wrong)
    assert any("code-palindrome (code): its code failed its asserts (exit 1" in w for w in wrong)


def test_answer_drift_changes_one_greedy_answer_in_four_only_with_an_adapter_armed(lab):
    bodies = [{**CHAT, "messages": [{"role": "user", "content": "Tell me about harbour %d." % i}]} for i in range(8)]
    got = {}
    for name, env in (("base", {}), ("drift", {"DSV41_FOLDED_FENCE": "1", "LAB_ENGINE_FAULT": "answer_drift"}),
                      ("off", {"LAB_ENGINE_FAULT": "answer_drift"})):
        port, proc = head_with(lab, env)
        try:
            got[name] = [answer(port, b) for b in bodies]
        finally:
            proc.stop()
    assert got["off"] == got["base"], "no adapter armed: the fault does nothing"
    changed = [i for i in range(8) if got["drift"][i] != got["base"][i]]
    assert 0 < len(changed) < 8, changed
