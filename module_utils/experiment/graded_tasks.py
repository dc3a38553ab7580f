# -*- coding: utf-8 -*-
"""A small graded task set every arm answers: code that must run and pass its asserts, JSON that must parse and
hold the asked shape and values, math whose final answer is checked (the report's "representative code/JSON/math
tasks"). Greedy answers identical to the baseline's catch an arm that changes answers; these catch an arm whose
answers still look alike but are wrong, and a baseline that was already wrong is reported as such.

Each task is a prompt (decode_bench's prompt file format, workload ``graded``) and a grader. Math and JSON are
graded here; code runs only inside real isolation (``module_utils/base/isolated_python.py``: bubblewrap, nothing of the
host but ``/usr`` read-only, no network, limits on time and memory), through a runner the caller passes. A failure
names the task, what was wrong and the start of the answer. Standard library only.
"""
from __future__ import absolute_import, division, print_function

import json
import re
from fractions import Fraction

__metaclass__ = type

WORKLOAD = "graded"
ANSWER_SHOWN = 160

TASKS = (
    {"id": "math-odd-sum", "kind": "math", "answer": "2500",
     "prompt": "What is the sum of the first 50 odd positive integers? Reason briefly, then give only the final "
               "number on the last line."},
    {"id": "math-dice-even", "kind": "math", "answer": "3/4",
     "prompt": "Two fair six-sided dice are rolled. What is the probability that the product of the two numbers is "
               "even? Reason briefly, then give only the answer as a reduced fraction on the last line."},
    {"id": "json-invoice", "kind": "json",
     "prompt": "Return only a JSON object (no prose, no code fence) for this invoice, with keys number (string), "
               "seller (string), lines (array of objects with item, quantity, unit_price) and total (number): "
               "invoice 2025-0412 from Northwind Tools: 4 espresso tampers at 18.50, 2 milk jugs at 12.00, "
               "1 grinder at 240.00.",
     "schema": {"number": str, "seller": str, "lines": list, "total": (int, float)},
     "values": {"number": "2025-0412", "seller": "Northwind Tools", "total": 338.0}, "lines": 3},
    {"id": "json-host", "kind": "json",
     "prompt": "Return only a JSON object (no prose, no code fence) describing a server with keys name (string), "
               "ranks (integer) and gpus (array of strings): the server is spark1, it holds 1 rank and one GPU "
               "named GB10.",
     "schema": {"name": str, "ranks": int, "gpus": list},
     "values": {"name": "spark1", "ranks": 1, "gpus": ["GB10"]}},
    {"id": "code-gcd", "kind": "code",
     "prompt": "Write a Python function gcd(a, b) that returns the greatest common divisor of two non-negative "
               "integers without importing anything. Return only the code in one python code block.",
     "asserts": ("assert gcd(12, 18) == 6", "assert gcd(0, 5) == 5", "assert gcd(17, 5) == 1",
                 "assert gcd(2 ** 40, 6 ** 10) == 1024")},
    {"id": "code-palindrome", "kind": "code",
     "prompt": "Write a Python function is_palindrome(text) that returns True when text reads the same backwards, "
               "ignoring case and every character that is not a letter or a digit. Return only the code in one "
               "python code block.",
     "asserts": ("assert is_palindrome('A man, a plan, a canal: Panama')", "assert not is_palindrome('spark3')",
                 "assert is_palindrome('')", "assert is_palindrome('No lemon, no melon')")},
)
BY_ID = dict((t["id"], t) for t in TASKS)
KINDS = ("code", "json", "math")


class GradedError(ValueError):
    pass


def tasks(kinds=None):
    """The tasks of ``kinds`` (default every kind), in the set's order; an unknown kind is refused."""
    kinds = list(kinds or KINDS)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise GradedError("graded_tasks: unknown kind(s) %s (known: %s)" % (", ".join(unknown), ", ".join(KINDS)))
    return [t for t in TASKS if t["kind"] in kinds]


def prompts(kinds=None):
    """The graded task set (the tasks of ``kinds``) in decode_bench's prompt file format."""
    return [{"id": t["id"], "messages": [{"role": "user", "content": t["prompt"]}]} for t in tasks(kinds)]


def _shown(answer):
    text = " ".join((answer or "").split())
    return repr(text[:ANSWER_SHOWN] + ("..." if len(text) > ANSWER_SHOWN else ""))


_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?(?:\s*/\s*\d+)?")


def _last_number(answer):
    """The last number or fraction of the answer's last non-empty line (``\\boxed{3/4}`` and ``= 2,500`` too)."""
    lines = [l for l in (answer or "").splitlines() if l.strip()]
    if not lines:
        return None
    found = _NUMBER_RE.findall(lines[-1].replace(",", ""))
    return found[-1].replace(" ", "") if found else None


def grade_math(task, answer):
    got = _last_number(answer)
    if got is None:
        return "no number on the last line"
    try:
        if Fraction(got) != Fraction(task["answer"]):
            return "final answer %s, expected %s" % (got, task["answer"])
    except (ValueError, ZeroDivisionError):
        return "final answer %r is not a number" % got
    return None


def _strip_fence(text):
    m = re.match(r"^\s*```[A-Za-z]*\s*\n(.*?)\n\s*```\s*$", text or "", re.S)
    return m.group(1) if m else (text or "")


def grade_json(task, answer):
    try:
        doc = json.loads(_strip_fence(answer))
    except ValueError as exc:
        return "not JSON (%s)" % exc
    if not isinstance(doc, dict):
        return "a JSON %s, not an object" % type(doc).__name__
    for key, kind in sorted(task["schema"].items()):
        if key not in doc:
            return "key %r missing" % key
        value = doc[key]
        if isinstance(value, bool) or not isinstance(value, kind):
            return "key %r is %r, not the asked type" % (key, value)
    for key, want in sorted(task.get("values", {}).items()):
        got = doc[key]
        same = abs(float(got) - want) < 0.005 if isinstance(want, float) else got == want
        if not same:
            return "key %r is %r, expected %r" % (key, got, want)
    if "lines" in task and len(doc.get("lines") or []) != task["lines"]:
        return "%d invoice line(s), expected %d" % (len(doc.get("lines") or []), task["lines"])
    return None


def extract_code(answer):
    """The first fenced code block of the answer (```python ... ```), else the whole answer."""
    m = re.search(r"```(?:python|py)?[ \t]*\n(.*?)```", answer or "", re.S)
    return m.group(1) if m else (answer or "")


def code_program(task, answer):
    """The program the isolated interpreter runs: the answer's code, then the task's asserts."""
    return extract_code(answer).rstrip() + "\n\n" + "\n".join(task["asserts"]) + "\nprint('graded: asserts passed')\n"


def grade_code(task, answer, run_code):
    """``run_code(program)`` -> (returncode, output) runs the program in isolation (never on the host)."""
    rc, output = run_code(code_program(task, answer))
    if rc != 0 or "graded: asserts passed" not in output:
        tail = " ".join((output or "").strip().splitlines()[-2:])[-200:]
        return "its code failed its asserts (exit %s: %s)" % (rc, tail or "no output")
    return None


def answers(results):
    """{task id: [its distinct answers]} from decode_bench results of the graded workload (``purpose: quality``
    keeps them whole)."""
    out = {}
    for r in results or []:
        if r.get("workload") != WORKLOAD:
            continue
        for pid, texts in sorted((r.get("answers") or {}).items()):
            out.setdefault(pid, []).extend(texts if isinstance(texts, list) else [texts])
    return out


def failures(answered, run_code, kinds=None):
    """``answered``: :func:`answers`. One line per answer graded wrong, or per task not answered: ``graded_tasks: <id> (<kind>): <why>; answer: '...'``."""
    out = []
    for task in tasks(kinds):
        given = answered.get(task["id"]) or []
        if not given:
            out.append("graded_tasks: %s (%s): no answer was collected" % (task["id"], task["kind"]))
        for answer in given:       # greedy: one distinct answer; each distinct one is graded
            if task["kind"] == "math":
                why = grade_math(task, answer)
            elif task["kind"] == "json":
                why = grade_json(task, answer)
            else:
                why = grade_code(task, answer, run_code)
            if why:
                out.append("graded_tasks: %s (%s): %s; answer: %s" % (task["id"], task["kind"], why, _shown(answer)))
    return out
