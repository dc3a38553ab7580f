import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest  # noqa: E402


@pytest.fixture
def fast_engine():
    """The lab engine's request path 40x faster for one test (knob files on every host), removed after;
    the test may call it again with more knobs (a fault)."""
    from experiment_lab import clear_knobs, knobs
    knobs(LAB_ENGINE_SPEED=40)
    yield knobs
    clear_knobs()
