"""Lab pacing: how long the boot's phases and the request path sleep."""
from __future__ import annotations

import time

from . import knobs

# The real boot's timeline (seconds from the marker; load_weight 616.34 s, Ready at about 767 s). The lab
# sleeps each phase's share of LAB_ENGINE_BOOT_SECONDS (default DEFAULT_BOOT_SECONDS) in these proportions.
REAL_BOOT_SECONDS = 767.0
DEFAULT_BOOT_SECONDS = 2.0
PHASE = {"tokenizer": 2.0, "scheduler_start": 9.0, "dist": 9.0, "load_start": 8.0, "engram_layer": 6.0,
         "load_target": 521.76, "load_draft": 74.58, "kv": 6.68, "workspace": 3.0, "bar": 1.0,
         "autotune_target": 42.0, "capture_target": 13.48, "autotune_draft": 20.0, "capture_draft": 9.5,
         "scheduler_ready": 1.0, "warmup": 33.0}


def boot_pace_scale() -> float:
    """Lab seconds per real boot second, from the knobs (read once, at start: the run keeps it)."""
    boot_seconds = knobs.number("LAB_ENGINE_BOOT_SECONDS")
    if boot_seconds > 0:
        return boot_seconds / REAL_BOOT_SECONDS
    if knobs.on("LAB_ENGINE_FAST"):
        return 0.0
    return DEFAULT_BOOT_SECONDS / REAL_BOOT_SECONDS


def pace(scale: float, real_seconds: float) -> None:
    """Sleep this phase's share of the lab boot (real_seconds is its length on the real fleet)."""
    if scale > 0 and real_seconds > 0:
        time.sleep(real_seconds * scale)


def speed_sleep(seconds: float) -> None:
    factor = knobs.number("LAB_ENGINE_SPEED")
    if factor <= 0:
        factor = 1.0
    if seconds > 0:
        time.sleep(seconds / factor)
