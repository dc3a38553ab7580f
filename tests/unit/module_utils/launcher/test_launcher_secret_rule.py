"""module_utils/base/secrets.py: the one rule for what is secret, and redaction before encoding."""
import json
import os
import re

import pytest

from ansible.module_utils.envfile import parse, render
from ansible.module_utils.launcher import values
from ansible.module_utils.launcher import env as E
from ansible.module_utils.base import secrets as S

import fleet_filters as fleet

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

SECRET = ["hf_token", "HF_TOKEN", "OPENAI_APIKEY", "DB_PASSWORD2", "GITHUB_PAT", "API_KEY", "apiKey", "x-api-key",
          "aws_secret_access_key", "SECRET_KEY_BASE", "HUGGING_FACE_HUB_TOKEN", "db_passwd", "MYSQL_PWD",
          "GOOGLE_APPLICATION_CREDENTIALS", "ssh_passphrase", "Authorization", "SESSION_COOKIE", "sshKeys",
          "PRIVATE_KEY", "Gitlab_Pat", "NPM_AUTHTOKEN", "MY_SECRET", "db.password", "REGISTRY_CREDENTIAL"]
NOT_SECRET = ["MAX_TOTAL_TOKENS", "completion_tokens", "prompt_tokens", "total_tokens", "DSV41_AUTOTUNE_KEEP",
              "TOKENIZER_PATH", "PATH", "PWD", "OLDPWD", "KEYBOARD_LAYOUT", "MODEL_PATH", "DSPARK_SPS_TABLE",
              "WORKER_HOSTS", "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "PATTERN", "SPATIAL", "COMPAT",
              "DSV41_CACHE_WAYS", "max_tokens", "SECRETARY", "PASSAGE"]


@pytest.mark.parametrize("name", SECRET)
def test_secret_names(name):
    assert S.is_secret_name(name) and values.is_secret(name) and fleet.dsv41_is_secret(name)


@pytest.mark.parametrize("name", NOT_SECRET)
def test_names_that_are_not_secret(name):
    assert not S.is_secret_name(name) and not values.is_secret(name) and not fleet.dsv41_is_secret(name)


def test_no_baseline_setting_but_the_api_key_is_secret():
    with open(os.path.join(ROOT, "lab", "seed", "launcher.env")) as fh:
        env = parse.parse_env(fh.read())
    assert [k for k in env if S.is_secret_name(k)] == ["API_KEY"]


def test_one_rule_only():
    """No other secret-name rule is left in the code the fleet runs (the three old rules disagreed)."""
    # the shapes the old rules had: a regex alternation, a tuple of words, a pattern variable
    pattern = re.compile(r"PASSWORD\||\|PASSWD|[\"']PASSWORD[\"']|secret_pattern|SECRET_WORDS|search\(_secret")
    offenders = []
    for top in ("library", "module_utils", "filter_plugins", "roles", "playbooks"):
        for d, _dirs, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                path = os.path.join(d, name)
                if (name.endswith((".py", ".yml", ".j2")) and "molecule" not in path
                        and os.path.relpath(path, ROOT) != os.path.join("module_utils", "base", "secrets.py")):
                    with open(path) as fh:
                        if pattern.search(fh.read()):
                            offenders.append(os.path.relpath(path, ROOT))
    assert offenders == []


def test_redact_masks_secret_names_and_their_values_everywhere():
    data = {"Config": {"Env": ["hf_token=hf_abcdef123", "GITHUB_PAT=ghp_xyz789", "MODEL_PATH=/srv/x", "EMPTY_TOKEN="]},
            "nested": [{"DB_PASSWORD2": "p@ss\"w\\rd"}, {"note": "hf_abcdef123 was used with p@ss\"w\\rd"}],
            "count": {"completion_tokens": 60, "api_key": None, "secret_flag": True},
            "hf_abcdef123": "a secret used as a key"}
    out = S.redact(data, ["sk-api-KEY-42"])
    assert out["Config"]["Env"] == ["hf_token=***", "GITHUB_PAT=***", "MODEL_PATH=/srv/x", "EMPTY_TOKEN="]
    assert out["nested"] == [{"DB_PASSWORD2": "***"}, {"note": "*** was used with ***"}]
    assert out["count"] == {"completion_tokens": 60, "api_key": None, "secret_flag": True}
    assert "***" in out and data["nested"][0]["DB_PASSWORD2"] == "p@ss\"w\\rd"       # input untouched
    text = json.dumps(out)
    for secret in ("hf_abcdef123", "ghp_xyz789", "p@ss", "sk-api-KEY-42"):
        assert secret not in text


def test_redact_before_encoding_catches_quotes_and_backslashes():
    key = 'sk-"quoted\\back'
    data = {"echo": "Bearer " + key, "events": [{"text": "key=" + key}], "double": json.dumps({"k": key})}
    encoded = json.dumps(data)
    assert key not in encoded                      # why redacting the JSON text is not enough
    safe = json.dumps(S.redact(data, [key]))
    assert key not in safe and json.dumps(key)[1:-1] not in safe and "quoted" not in safe
    assert json.loads(safe)["echo"] == "Bearer ***" and json.loads(safe)["double"] == '{"k": "***"}'


def test_redact_text_longest_first_and_short_values_only_by_name():
    assert S.redact_text("abc-long abc-longer", ["abc-long", "abc-longer"]) == "*** ***"
    assert S.redact_text("x=ab", ["ab"]) == "x=ab"                            # too short to search for
    assert S.redact({"PAT": "ab", "other": "ab"}) == {"PAT": "***", "other": "ab"}


def test_mask_mapping_keeps_unset_values():
    assert S.mask_mapping({"API_KEY": "sk-1", "hf_token": "", "GITHUB_PAT": None, "X": "1"}) == \
        {"API_KEY": "***", "hf_token": "", "GITHUB_PAT": None, "X": "1"}


def test_adoption_moves_exactly_the_secret_names_to_the_vault():
    """Adoption decides what is secret with the one rule: every secret name's value goes to the vault file."""
    from ansible.module_utils.envfile import adopt as A
    names = [n for n in SECRET + NOT_SECRET if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)
             and render.key_problem(n) is None]
    # one of each name up to case: secret keys differing only in case are refused (their own test)
    names = [n for i, n in enumerate(names) if n.lower() not in [m.lower() for m in names[:i]]]
    text = "".join("%s=value-of-%s\n" % (n, n) for n in names)
    adopted = A.adopt_env(text, {"HOME": "/home/mia"})
    assert adopted["secret_keys"] == [n for n in names if S.is_secret_name(n)]
    proposal = A.proposal_yaml(adopted, "here")
    for name in names:
        assert (("value-of-%s" % name) in proposal) != S.is_secret_name(name)


# --------------------------------------------------------------------------- secrets by shape

# (name that says nothing, secret-shaped value, the secret part that must never show)
SHAPED = [
    ("OPENAI_AUTH", "sk-proj-4f9aQ2xLmN8bV7cT1zR5", "sk-proj-4f9aQ2xLmN8bV7cT1zR5"),
    ("ANTHROPIC", "sk-ant-api03-Zq8WvT5yR2uI0oP9", "sk-ant-api03-Zq8WvT5yR2uI0oP9"),
    ("GH_AUTH", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("GH_FINE", "github_pat_11ABCDEFG0abcdefghijkl_mnopq", "github_pat_11ABCDEFG0abcdefghijkl_mnopq"),
    ("HF_TOKENS", "hf_AbCdEfGhIjKlMnOpQrStUv", "hf_AbCdEfGhIjKlMnOpQrStUv"),
    ("SLACK", "xoxb-123456789012-abcdefGHIJ", "xoxb-123456789012-abcdefGHIJ"),
    ("AWS_ID", "AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("SESSION", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dBjftJeZ4CVPmB92K27uhbUJU1p1r", "dBjftJeZ4CVPmB92K27uhbUJU1p1r"),
    ("NOTIFY_HEADER", "Authorization: Bearer 9f8e7d6c5b4a39281706", "9f8e7d6c5b4a39281706"),
    ("DATABASE_URL", "postgres://admin:pw@db:5432/fleet", ":pw@"),
    ("REDIS_URL", "redis://:s3cr3tpass@cache:6379/0", "s3cr3tpass"),
    ("DEPLOY", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
     "b3BlbnNzaC1rZXktdjEAAAAA"),
]
NOT_SHAPED = ["task-sk-lab-runner-0000000000", "basic arithmetic is fine", "MAX_TOTAL_TOKENS=750000",
              "http://spark1:8888/health", "/home/mia/dsv41-3x-spark/engram", "dsv41-sglang:tp3",
              "token throughput 17.3 tok/s", "Bearer of news"]


@pytest.mark.parametrize("name,value,part", SHAPED, ids=[s[0] for s in SHAPED])
def test_a_secret_shaped_value_is_masked_whatever_its_name(name, value, part):
    assert not S.is_secret_name(name) or name in ("OPENAI_AUTH", "GH_AUTH")     # AUTH is a secret word too
    assert S.is_secret_value(value) and S.is_secret(name, value)
    assert part not in S.redact_text("%s=%s and again: %s" % (name, value, value), [])
    assert part not in json.dumps(S.redact({"settings": {name: value}, "log": ["x " + value]}))
    assert part not in json.dumps(S.mask_mapping({name: value}))
    if len(part.strip(":@")) >= S.MIN_SECRET_CHARS:     # hidden in other documents too (a 2-character one only by shape)
        assert any(part in v or v in value for v in S.secret_values({name: value}))
    # the .env diff and listing (--diff, run records)
    assert part not in "\n".join(E.env_changes({name: "old"}, {name: value}))
    assert part not in E.env_listing({name: value})


@pytest.mark.parametrize("text", NOT_SHAPED)
def test_ordinary_fleet_text_is_left_alone(text):
    assert not S.is_secret_value(text) and S.redact_text(text, []) == text


def test_a_url_keeps_its_scheme_user_and_host():
    assert S.redact_text("postgres://admin:pw@db:5432/fleet", []) == "postgres://admin:***@db:5432/fleet"


def test_redaction_comes_before_any_cut():
    token = "hf_" + "A1b2C3d4E5" * 3
    long_text = "x" * 190 + " " + token + " " + "y" * 50
    for cut in (S.clip(long_text, 200), S.clip_tail(long_text, 60)):
        assert token not in cut and token[:10] not in cut and token[-10:] not in cut


def test_the_notifier_masks_before_it_keeps_the_last_300_characters():
    from ansible.module_utils.drift import notify as N
    token = "9f8e7d6c5b4a3928170655443322110099887766"
    echoed = "curl: (22) rejected header Authorization: Bearer " + token + " " + "z" * 285
    kept = N._clean(echoed, "")             # the notifier's own token unknown here: caught by its shape
    assert token not in kept and token[:8] not in kept and token[-8:] not in kept and len(kept) <= 303
    assert token not in N._clean("Bearer " + token, token)


def test_a_rule_message_never_quotes_a_secret_shaped_value():
    from ansible.module_utils.launcher import values as V
    assert V.shown("HF_TOKENS", "hf_AbCdEfGhIjKlMnOpQrStUv") == "HF_TOKENS='***'"
    assert V.shown("DATABASE_URL", "postgres://admin:pw55word@db") == "DATABASE_URL='postgres://admin:***@db'"
    assert V.shown("MAX_TOTAL_TOKENS", "750000") == "MAX_TOTAL_TOKENS='750000'"
    assert V.is_secret("HF_TOKENS", "hf_AbCdEfGhIjKlMnOpQrStUv") and not V.is_secret("HF_TOKENS", "4")
