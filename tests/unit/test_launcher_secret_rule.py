"""module_utils/secret_rule.py: the one rule for what is secret, and redaction before encoding."""
import json
import os
import re

import pytest

from ansible.module_utils import launcher as L
from ansible.module_utils import launcher_env as E
from ansible.module_utils import secret_rule as S

import fleet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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
    assert S.is_secret_name(name) and L.is_secret(name) and fleet.dsv41_is_secret(name)


@pytest.mark.parametrize("name", NOT_SECRET)
def test_names_that_are_not_secret(name):
    assert not S.is_secret_name(name) and not L.is_secret(name) and not fleet.dsv41_is_secret(name)


def test_no_baseline_setting_but_the_api_key_is_secret():
    with open(os.path.join(ROOT, "lab", "seed", "launcher.env")) as fh:
        env = E.parse_env(fh.read())
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
                if name.endswith((".py", ".yml", ".j2")) and "molecule" not in path and name != "secret_rule.py":
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
    from ansible.module_utils import envfile_adopt as A
    names = [n for n in SECRET + NOT_SECRET if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)
             and E.key_problem(n) is None]
    text = "".join("%s=value-of-%s\n" % (n, n) for n in names)
    adopted = A.adopt_env(text, {"HOME": "/home/mia"})
    assert adopted["secret_keys"] == [n for n in names if S.is_secret_name(n)]
    proposal = A.proposal_yaml(adopted, "here")
    for name in names:
        assert (("value-of-%s" % name) in proposal) != S.is_secret_name(name)
