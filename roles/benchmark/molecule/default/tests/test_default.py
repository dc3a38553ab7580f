"""benchmark: the raw output of every measured request is on the worker that generated the load."""
import json


def test_raw_output_on_the_worker_only(host):
    raw = host.file("/tmp/dsv41-bench/raw.json")
    if host.backend.get_hostname() != "spark2":
        assert not raw.exists  # never the head, only the first worker
        return
    data = json.loads(raw.content_string)
    text = json.dumps(data)
    assert "sk-lab" not in text  # the API key never lands in the raw output
    assert '"completion_tokens"' in text
