"""The lab GPU's clocks as the engine's step time sees them (the lab nvidia-smi's lock and thermal model)."""
from __future__ import annotations

import json
import os
import time

# labstate.py (the stand-ins' shared state and GPU model) sits beside this package, in lab/standins in the
# repository and in /usr/local/lib/dsv41-lab on a lab host; the entry file puts that directory on sys.path.
import labstate

from . import knobs

# The lab nvidia-smi's state (lab/standins/nvidia-smi): the GPU's clock lock as the last -lgc/-rgc left it, and
# the lab GPU's clock and heat model (labstate.busy_gpu), which the step time follows.
NVIDIA_STATE_DIR = knobs.text("LAB_NVIDIA_STATE_DIR")
NVIDIA_STATE = os.path.join(NVIDIA_STATE_DIR, "state.json")
FLEET_LOCK = {"min": 0, "max": 2200}    # the fleet's lock: unreadable state reads as locked
STARTED = time.monotonic()              # the GPU is busy from the engine's start (as nvidia-smi counts it)
_CLOCKS = {"at": 0.0, "lock": FLEET_LOCK, "tau": None}


def _read_clocks() -> None:
    """Refresh the lock and the thermal knob at most once a second (every decode step asks for them)."""
    now = time.monotonic()
    if now - _CLOCKS["at"] >= 1.0:
        try:
            with open(NVIDIA_STATE) as handle:
                _CLOCKS["lock"] = json.load(handle).get("locked_clocks")
        except (OSError, ValueError):
            _CLOCKS["lock"] = FLEET_LOCK
        _CLOCKS["tau"] = labstate.thermal_seconds(NVIDIA_STATE_DIR)
        _CLOCKS["at"] = now


def clock_lock() -> dict | None:
    """The GPU's clock lock now ({"min", "max"}; None when unlocked)."""
    _read_clocks()
    return _CLOCKS["lock"]


def clock_step_factor() -> float:
    """Step time relative to the 2200 MHz lock, from the SM clock the lab GPU runs at now: 0.988 at the
    unlocked boost of 2418 MHz (the downstream's cap cost was 0.7-1.5%), in proportion between, so a GPU the
    thermal model has throttled back to 2268 MHz gains only 0.37%."""
    lock = clock_lock()
    sm, _temp, _throttled = labstate.busy_gpu(lock["max"] if lock else None, time.monotonic() - STARTED,
                                              _CLOCKS["tau"])
    return 1.0 - 0.012 * (sm - FLEET_LOCK["max"]) / float(labstate.BOOST_SM - FLEET_LOCK["max"])
