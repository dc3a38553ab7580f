"""What the lab model answers: its vocabularies, the prompt's words and tokens, and the fixed answers to a
needle question and to the graded tasks."""
from __future__ import annotations

import re

from . import knobs
from .adapters import ARM_ADAPTERS, adapter_on
from .knobs import fault


WORDS_PROSE = ("the of and a to in is was that for on with as by at from it be this are which an or have "
               "one had not but what all were when we there can more if will each about how up out them "
               "then she many some so these would other into has two like time could way been now people "
               "rank engram token memory step cache draft verify block").split()
WORDS_CODE = ("def return self if else for in range import from None True False print len list dict "
              "value key result x y i n args kwargs class raise try except with as yield lambda".split())
THINKING_TOKENS = 256


def prompt_text(messages) -> str:
    parts = []
    for m in messages or []:
        c = m.get("content", "") if isinstance(m, dict) else ""
        if isinstance(c, list):
            c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
        parts.append(str(c))
    return "\n".join(parts)


# Long-context retrieval (lab fiction of a model that reads its whole context): a prompt that hides
# "The pass code for vault NAME is DIGITS." in filler and asks "What is the pass code for vault NAME?" is
# answered with that sentence. Fault needle_miss: with an experimental adapter armed, beyond
# LAB_ENGINE_NEEDLE_REACH tokens (default 50000) of prompt the needle is not found (an arm that breaks the
# context envelope, which the report says a short smoke does not validate).
NEEDLE_RE = re.compile(r"The pass code for vault (\w+) is (\d+)\.")
NEEDLE_QUESTION_RE = re.compile(r"What is the pass code for vault (\w+)\?")


def needle_answer(messages, prompt_tokens: int):
    """The words answering a needle question, or None for any other prompt."""
    if not messages:
        return None
    question = NEEDLE_QUESTION_RE.search(prompt_text(messages[-1:]))
    if not question:
        return None
    name = question.group(1)
    found = dict(NEEDLE_RE.findall(prompt_text(messages)))
    reach = int(knobs.number("LAB_ENGINE_NEEDLE_REACH"))
    armed = any(adapter_on(a) for a in ARM_ADAPTERS)
    if name not in found or (fault("needle_miss") and armed and prompt_tokens > reach):
        return f"I found no pass code for vault {name} in the text.".split()
    return f"The pass code for vault {name} is {found[name]}.".split()


# Graded tasks (lab fiction of a model that solves small code, JSON and math tasks): a prompt asking one of the
# graded tasks the quality check uses is answered right, in the shape the prompt asks (a python code block, a
# bare JSON object, reasoning then the final answer on the last line). Fault graded_wrong: with an experimental
# adapter armed, every answer is subtly wrong (an off-by-one sum, a wrong total, code that fails its asserts).
# Tokens keep their line breaks and indentation (a token "\n    return" starts a new, indented line).
GRADED_ANSWERS = (
    ("sum of the first 50 odd positive integers",
     "The first n odd numbers add up to n squared, so the sum is 50 * 50.\n2500",
     "Adding them pairwise from both ends gives 25 pairs.\n2499"),
    ("product of the two numbers is even",
     "The product is odd only when both dice are odd: 1/2 * 1/2 = 1/4. So the product is even with\n3/4",
     "The product is even when either die is even.\n1/2"),
    ("for this invoice",
     '{"number": "2025-0412", "seller": "Northwind Tools", "lines": [{"item": "espresso tamper", "quantity": 4, '
     '"unit_price": 18.5}, {"item": "milk jug", "quantity": 2, "unit_price": 12.0}, {"item": "grinder", '
     '"quantity": 1, "unit_price": 240.0}], "total": 338.0}',
     '{"number": "2025-0412", "seller": "Northwind Tools", "lines": [{"item": "espresso tamper", "quantity": 4, '
     '"unit_price": 18.5}, {"item": "milk jug", "quantity": 2, "unit_price": 12.0}, {"item": "grinder", '
     '"quantity": 1, "unit_price": 240.0}], "total": 270.5}'),
    ("describing a server",
     '{"name": "spark1", "ranks": 1, "gpus": ["GB10"]}',
     '{"name": "spark1", "ranks": "1", "gpus": ["GB10"]}'),
    ("function gcd(a, b)",
     "```python\ndef gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n```",
     "```python\ndef gcd(a, b):\n    while b > 1:\n        a, b = b, a % b\n    return a\n```"),
    ("function is_palindrome(text)",
     "```python\ndef is_palindrome(text):\n    kept = [c.lower() for c in text if c.isalnum()]\n"
     "    return kept == kept[::-1]\n```",
     "```python\ndef is_palindrome(text):\n    return text == text[::-1]\n```"),
)
GRADED_TOKEN_RE = re.compile(r"\n[ \t]*\S+|\S+")


def graded_answer(messages):
    """The tokens answering a graded task, or None for any other prompt."""
    if not messages:
        return None
    asked = prompt_text(messages[-1:])
    for marker, right, wrong in GRADED_ANSWERS:
        if marker in asked:
            armed = any(adapter_on(a) for a in ARM_ADAPTERS)
            return GRADED_TOKEN_RE.findall(wrong if fault("graded_wrong") and armed else right)
    return None


def count_prompt_tokens(messages) -> int:
    total = 3
    for m in messages or []:
        text = prompt_text([m])
        total += 4 + (len(text.split()) * 4 + 2) // 3
    return total
