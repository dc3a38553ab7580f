import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest  # noqa: E402


def pytest_configure(config):
    # The test's tier (tests/run_lab_suites.py TIERS). Unmarked playbook tests are in the slow tier
    # (`make test-slow`, and `make test-all`, which CI runs), so a new stage's tests cannot stretch `make test`.
    config.addinivalue_line(
        "markers", "smoke: in `make test` (at most 10 minutes warm): a check-mode, refusal or read-only run of a "
                   "playbook, seconds to a minute, that changes nothing on the lab; one or two per playbook")


@pytest.fixture
def fast_engine():
    """The lab engine's request path STAGE_TEST_SPEED times faster for one test (knob files on every host),
    removed after; the test may call it again with more knobs (a fault)."""
    from experiment_lab import STAGE_TEST_SPEED, clear_knobs, knobs
    knobs(LAB_ENGINE_SPEED=STAGE_TEST_SPEED)
    yield knobs
    clear_knobs()


@pytest.fixture(scope="module", autouse=True)
def fresh_lab(request):
    """Every test module starts on a lab in the report's state (labctl reset, seconds). A module may set
    LAB_LAUNCHER_VARIANT (the launcher variant the reset seeds, lab/README.md; the default one is put back
    after the module), STAGES_PASSED = True (its playbooks run with stage_a and stage_b in the stage ledger for
    the running image, labhelpers.STAGE_LEDGER) and define lab_cleanup() for the fault knobs it leaves on the
    hosts, run after the module's last test."""
    from labhelpers import DEFAULT_LAUNCHER, STAGE_LEDGER, install_launcher, lab
    STAGE_LEDGER["on"] = bool(getattr(request.module, "STAGES_PASSED", False))
    variant = getattr(request.module, "LAB_LAUNCHER_VARIANT", None)
    if variant:
        os.environ["DSV41_LAB_LAUNCHER_VARIANT"] = variant
    try:
        lab("reset")
        yield
        cleanup = getattr(request.module, "lab_cleanup", None)
        if cleanup:
            cleanup()
    finally:
        if variant:  # the next module finds the lab's default launcher again
            os.environ.pop("DSV41_LAB_LAUNCHER_VARIANT", None)
            install_launcher(DEFAULT_LAUNCHER)
