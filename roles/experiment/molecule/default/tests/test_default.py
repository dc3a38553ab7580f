"""experiment: after a run the fleet is back on its baseline and serving; nothing stays on the worker."""


def test_fence_not_left_on_and_engine_serving(host):
    name = host.backend.get_hostname()
    if name == "spark1":
        env = host.file("/home/mia/dsv41-3x-spark/.env").content_string
        assert "DSV41_FOLDED_FENCE=1" not in env  # the arm's setting was restored away
        assert host.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8888/health").stdout == "200"
    container = "dsv41-head" if name == "spark1" else "dsv41-worker"
    assert host.run("docker inspect --format '{{.State.Status}}' %s" % container).stdout.strip() == "running"


def test_no_working_directory_left_on_the_worker(host):
    assert not host.file("/tmp/dsv41-experiment").exists
