"""The graded code, JSON and math tasks: graders on right and wrong answers, code run only inside bubblewrap (what it
can and cannot reach), the module entry point, and the experiment schema's graded_tasks check."""
import json
import os
import shutil

import pytest

from ansible.module_utils.experiment import schema as es
from ansible.module_utils.experiment import graded_tasks as g
from ansible.module_utils.base import isolated_python as ip
from modrun import run_module
import graded_answers

needs_bwrap = pytest.mark.skipif(not shutil.which("bwrap") or not os.path.exists(ip.PYTHON),
                                 reason="bubblewrap and /usr/bin/python3 are part of the lab image and `make apt`")

RIGHT = {
    "math-odd-sum": "The first n odd numbers sum to n^2.\n\n**2,500**",
    "math-dice-even": "Odd only if both are odd: 1/4.\n\\boxed{3/4}",
    "json-invoice": '```json\n{"number": "2025-0412", "seller": "Northwind Tools", "lines": [{"item": "tamper", '
                    '"quantity": 4, "unit_price": 18.5}, {"item": "jug", "quantity": 2, "unit_price": 12}, '
                    '{"item": "grinder", "quantity": 1, "unit_price": 240}], "total": 338}\n```',
    "json-host": '{"name": "spark1", "ranks": 1, "gpus": ["GB10"]}',
    "code-gcd": "Here it is:\n```python\ndef gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n```\nDone.",
    "code-palindrome": "```py\nimport re\ndef is_palindrome(text):\n    s = re.sub(r'[^0-9a-z]', '', text.lower())\n"
                       "    return s == s[::-1]\n```",
}


def fake_run(program):
    """A stand-in runner for the graders' own logic (the isolation itself is tested below)."""
    return (0, "graded: asserts passed\n") if "return a\n" in program or "s[::-1]" in program else (1, "AssertionError")


def test_right_answers_in_the_shapes_models_write_them_pass():
    answered = dict((k, [v]) for k, v in RIGHT.items())
    assert g.failures(answered, fake_run) == []


@pytest.mark.parametrize("task, answer, why", [
    ("math-odd-sum", "so the total is\n2499", "final answer 2499, expected 2500"),
    ("math-odd-sum", "I am not sure.\n", "no number on the last line"),
    ("math-dice-even", "0.75", None),                        # the same value written as a decimal
    ("math-dice-even", "1/2", "final answer 1/2, expected 3/4"),
    ("json-invoice", "Sure! {\"number\": 1}", "not JSON"),
    ("json-invoice", "[1, 2]", "a JSON list, not an object"),
    ("json-host", '{"name": "spark1", "ranks": "1", "gpus": ["GB10"]}', "key 'ranks' is '1', not the asked type"),
    ("json-host", '{"name": "spark1", "ranks": true, "gpus": ["GB10"]}', "key 'ranks' is True, not the asked type"),
    ("json-host", '{"name": "spark2", "ranks": 1, "gpus": ["GB10"]}', "key 'name' is 'spark2', expected 'spark1'"),
    ("json-invoice", RIGHT["json-invoice"].replace('"total": 338', '"total": 270.5'), "key 'total' is 270.5, expected 338.0"),
])
def test_wrong_answers_name_the_task_and_what_was_wrong(task, answer, why):
    out = g.failures({task: [answer]}, fake_run, [g.BY_ID[task]["kind"]])
    mine = [f for f in out if f.startswith("graded_tasks: %s " % task)]
    if why is None:
        assert mine == []
    else:
        assert len(mine) == 1 and ("(%s): %s" % (g.BY_ID[task]["kind"], why)) in mine[0], mine
        assert "; answer: '" in mine[0]


def test_an_unanswered_task_and_each_distinct_wrong_answer_are_named():
    out = g.failures({"math-odd-sum": ["2500", "2501"]}, fake_run, ["math"])
    assert out == ["graded_tasks: math-odd-sum (math): final answer 2501, expected 2500; answer: '2501'",
                   "graded_tasks: math-dice-even (math): no answer was collected"]
    with pytest.raises(g.GradedError, match="unknown kind"):
        g.tasks(["poetry"])


def test_the_prompt_set_is_decode_bench_s_format_and_answers_come_from_the_graded_workload():
    assert [p["id"] for p in g.prompts(["json"])] == ["json-invoice", "json-host"]
    assert all(p["messages"][0]["role"] == "user" for p in g.prompts())
    results = [{"workload": "prose", "answers": {"x": ["no"]}},
               {"workload": "graded", "answers": {"code-gcd": ["a", "b"]}}]
    assert g.answers(results) == {"code-gcd": ["a", "b"]}


@needs_bwrap
def test_code_runs_isolated_from_the_host_its_network_and_its_time():
    rc, out = ip.run("print(6 * 7)")
    assert (rc, out) == (0, "42\n")
    rc, out = ip.run("import os\nprint(' '.join(sorted(os.listdir('/'))))\nprint(os.path.exists('/etc/passwd'), "
                     "os.path.exists('/root'), os.path.exists('/home'))")
    top, reach = out.splitlines()
    assert {"usr", "tmp", "dev"} <= set(top.split()) <= {"bin", "dev", "lib", "lib32", "lib64", "libx32", "sbin",
                                                          "tmp", "usr"}, top
    assert reach == "False False False", out
    rc, out = ip.run("open('/usr/bin/x', 'w')")
    assert rc == 1 and "Read-only file system" in out
    rc, out = ip.run("import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)")
    assert rc == 1 and ("Network is unreachable" in out or "Connection refused" in out)
    rc, out = ip.run("import os, time\nos.system('sleep 30 &')\nwhile True: pass", timeout=2)
    assert rc == -9 and "killed after 2 s" in out


@needs_bwrap
def test_a_grader_s_code_checks_run_through_the_isolation():
    task = g.BY_ID["code-gcd"]
    assert g.grade_code(task, RIGHT["code-gcd"], ip.run) is None
    why = g.grade_code(task, "```python\ndef gcd(a, b):\n    return a\n```", ip.run)
    assert why.startswith("its code failed its asserts (exit 1") and "AssertionError" in why


def test_without_bwrap_nothing_runs_and_the_module_says_why(monkeypatch):
    monkeypatch.setattr(ip, "which_bwrap", lambda path=None: None)
    with pytest.raises(ip.IsolationError, match="bwrap is not installed on this host"):
        ip.run("print(1)")
    results = [{"workload": "graded", "answers": {"code-gcd": [RIGHT["code-gcd"]]}}]
    res = run_module(graded_answers.main, {"results": results, "kinds": ["code"], "host_label": "spark1"})
    assert res["failed"] and res["msg"].startswith("spark1: graded code tasks not run: bwrap is not installed")


@needs_bwrap
def test_module_grades_the_graded_workload_and_reports_each_task():
    results = [{"workload": "graded", "answers": dict((k, [v]) for k, v in RIGHT.items())}]
    res = run_module(graded_answers.main, {"results": results, "host_label": "spark1"})
    assert res["changed"] is False and res["failures"] == [] and res["msg"] == "spark1: graded tasks 6 of 6 passed"
    assert [t["id"] for t in res["graded"]] == [t["id"] for t in g.TASKS] and all(t["passed"] for t in res["graded"])
    wrong = dict(results[0]["answers"], **{"code-palindrome": ["```python\ndef is_palindrome(t):\n    return t == t[::-1]\n```"]})
    res = run_module(graded_answers.main, {"results": [{"workload": "graded", "answers": wrong}], "kinds": ["code"]})
    assert res["failures"] and res["failures"][0].startswith("graded_tasks: code-palindrome (code): its code failed")
    assert [t["id"] for t in res["graded"]] == ["code-gcd", "code-palindrome"]


def test_module_refuses_a_timeout_out_of_range():
    res = run_module(graded_answers.main, {"results": [], "timeout": 0, "host_label": "spark1"})
    assert res["failed"] and "timeout=0 refused" in res["msg"]


def test_the_schema_takes_graded_tasks_with_known_kinds_only():
    base = {"schema_version": 1, "name": "t", "stage": "C", "description": "d",
            "benchmark": {"workloads": ["prose"], "concurrency": [1], "repetitions": 5, "warmups": 1, "max_tokens": 32},
            "acceptance": {"metric": "aggregate_tok_s", "rule": "separation"},
            "arms": [{"name": "a", "description": "d", "settings": {"DSV41_FOLDED_FENCE": "1"}}]}
    ok = dict(base, correctness=[{"graded_tasks": {"kinds": ["code", "math"]}}])
    es.validate(json.loads(json.dumps(ok)), "t.yml")
    bad = dict(base, correctness=[{"graded_tasks": {"kinds": ["poetry"]}}])
    with pytest.raises(es.DefinitionError, match=r"graded_tasks\.kinds\[0\].*'poetry' is not one of code, json, math"):
        es.validate(bad, "t.yml")
