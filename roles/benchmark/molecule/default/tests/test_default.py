"""benchmark: the raw output of every measured request is on the worker that generated the load."""
import json

import pytest

RAW = "/tmp/dsv41-bench/raw.json"
LOAD_HOST = "spark2"  # the first worker (groups['workers'] | first in converge.yml)


def test_no_raw_output_where_no_load_was_generated(host):
    if host.backend.get_hostname() == LOAD_HOST:
        pytest.skip("the load host is checked by test_raw_output_on_the_load_host")
    assert not host.file(RAW).exists  # never the head, never the other worker


def test_raw_output_on_the_load_host(host):
    if host.backend.get_hostname() != LOAD_HOST:
        pytest.skip("only the first worker generates the load")
    data = json.loads(host.file(RAW).content_string)
    text = json.dumps(data)
    assert "sk-lab" not in text  # the API key never lands in the raw output
    assert '"completion_tokens"' in text
