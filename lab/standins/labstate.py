"""State files of the lab stand-ins (docker, nvidia-smi): one way to lock, read and replace them; and the lab
GPU's clock and heat model, which nvidia-smi reports and the engine's step time follows.

A stand-in keeps its state as JSON files in one directory, changed only under an exclusive flock on
``<dir>/.lock`` and replaced atomically (write a temporary file, fsync, rename), so a reader never sees
half a file and two commands never interleave their changes. Lab only; the product never imports it.
"""
import contextlib
import fcntl
import json
import math
import os
from pathlib import Path

LOCK_NAME = ".lock"


@contextlib.contextmanager
def locked(directory):
    """Hold the directory's exclusive lock for the block. Raises PermissionError when the caller may
    not open the lock file (the stand-in turns that into its own tool's message)."""
    with open(Path(directory) / LOCK_NAME, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_json(path, default):
    """The JSON in ``path``, or ``default`` when there is no such file (a broken file raises ValueError)."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return default


def write_json(path, data, mode=0o644):
    """Replace ``path`` with ``data`` atomically (call it under :func:`locked`)."""
    path = Path(path)
    tmp = path.parent / (".%s.%d.tmp" % (path.name, os.getpid()))
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=1)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.chmod(tmp, mode)
    except PermissionError:       # a file made by another user in a group-writable directory
        pass
    os.replace(tmp, path)


# --- the lab GPU's clock and heat (one model for the nvidia-smi stand-in and the engine's step time) -------
# Lab fiction, for the shape of a sustained clocks A/B. A busy GB10 runs at BOOST_SM unlocked, at the lock's
# maximum locked. The thermal model is on only with its knob (thermal_seconds): the GPU then heats from idle
# towards a steady temperature with that time constant of the engine's life; under the lock's 2200 MHz it
# settles at 71 C, at boost it would settle at 86 C, and above THERMAL_SLOWDOWN_C the driver takes boost back
# (SM at THROTTLED_SM, reason sw_thermal_slowdown). Without the knob a busy GPU reads 71 C at once.
BOOST_SM = 2418
THROTTLED_SM = 2268
IDLE_C, LOCKED_STEADY_C, BOOST_STEADY_C, THERMAL_SLOWDOWN_C = 42.0, 71.0, 86.0, 83.0


def thermal_seconds(state_dir):
    """The thermal model's time constant: LAB_NVIDIA_THERMAL_SECONDS from the environment, else
    ``<state_dir>/thermal-seconds`` (a host-side knob a test writes, since samplers run with the login's
    environment). None without either: no thermal model."""
    raw = os.environ.get("LAB_NVIDIA_THERMAL_SECONDS", "")
    if not raw:
        try:
            raw = (Path(state_dir) / "thermal-seconds").read_text().strip()
        except OSError:
            raw = ""
    try:
        return float(raw) if raw else None
    except ValueError:
        return None


def busy_gpu(lock_max, busy_seconds, tau):
    """(SM MHz, temperature C, throttled) of a GPU that has been busy for ``busy_seconds`` under a lock whose
    maximum is ``lock_max`` (None: unlocked), with the thermal time constant ``tau`` (None: no model)."""
    sm = min(BOOST_SM, lock_max) if lock_max else BOOST_SM
    if tau is None:
        return sm, LOCKED_STEADY_C, False
    steady = LOCKED_STEADY_C if sm < BOOST_SM else BOOST_STEADY_C
    temp = IDLE_C + (steady - IDLE_C) * (1.0 - math.exp(-busy_seconds / max(tau, 0.001)))
    throttled = temp > THERMAL_SLOWDOWN_C
    return (THROTTLED_SM if throttled else sm), temp, throttled
