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


CONTAINERS = {"spark1": ("dsv41-head", 0), "spark2": ("dsv41-worker", 1), "spark3": ("dsv41-worker", 2)}


def test_every_rank_wrote_its_own_trace_of_the_profiled_window(host):
    """The step profile asked every rank to profile (through the head) and each wrote a trace named by its rank
    inside its own container; only the load host holds the profiled prompts."""
    name = host.backend.get_hostname()
    container, rank = CONTAINERS[name]
    listing = host.check_output("docker exec %s ls /tmp" % container)
    assert any(f.endswith("-TP-%d.trace.json" % rank) for f in listing.split()), listing
    assert host.file("/tmp/dsv41-bench/profile-prose.json").exists == (name == LOAD_HOST)
