"""Filters of the drift playbook (filter_plugins/drift_filters.py)."""
import json
import os
import stat

import pytest

import drift_filters as drift


def test_env_split_puts_secret_names_and_the_api_key_aside():
    out = drift.dsv41_drift_env_split({"MAX_RUNNING_REQUESTS": 4, "HF_TOKEN": "hf-x", "TOKENIZER": "t", "GONE": None},
                                      "sk-lab-1")
    assert out == {"public": {"MAX_RUNNING_REQUESTS": 4, "TOKENIZER": "t"},
                   "secrets": {"HF_TOKEN": "hf-x", "API_KEY": "sk-lab-1"}}
    assert drift.dsv41_drift_env_split({}, "")["secrets"] == {}


def test_handoff_writes_a_private_file_and_refuses_links(tmp_path):
    path = tmp_path / "settings.json"
    assert drift.dsv41_drift_handoff({"notify_token": "t"}, str(path)) == str(path)
    assert json.loads(path.read_text()) == {"notify_token": "t"} and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(OSError):
        drift.dsv41_drift_handoff({}, str(link))
    with pytest.raises(ValueError, match="not an absolute path"):
        drift.dsv41_drift_handoff({}, "relative.json")
