"""Fixtures of the engine stand-in's tests: a lab (checkpoint, shards, mounts, a port) and a booted head.
"""
from __future__ import annotations

import pytest

from engine_standin import Proc, engine_argv, free_port, write_checkpoint


@pytest.fixture()
def lab(tmp_path):
    models = tmp_path / "models"
    write_checkpoint(models / "DeepSeek-V4.1-Flash")
    engram = tmp_path / "engram"
    engram.mkdir()
    cache = tmp_path / "cache"
    cache.mkdir()
    mounts = {"/engram": str(engram), "/srv/models": str(models), "/root/.cache": str(cache)}
    # one port per test: identical boots have identical argv (the retention adapter fingerprints it)
    return {"tmp": tmp_path, "engram": engram, "cache": cache, "mounts": mounts, "port": free_port()}


@pytest.fixture()
def head(lab):
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port), env={"API_KEY": "sk-test-secret", "LAB_ENGINE_SPEED": "200"},
                name="head")
    proc.wait_for(f"Ready: API on port {port}")
    yield {"port": port, "proc": proc}
    assert proc.stop() == 0
