"""One engine process's settings, fixed at start-up and passed to the code that needs them."""
from __future__ import annotations

from . import pacing
from .output import OUT, stamp


class Run:
    """The parsed arguments, the build whose formats the process prints, whether it is the head, and the boot's
    pacing; writes the scheduler's logging records, whose prefix names the rank."""

    def __init__(self, args, build: str, pace_scale: float):
        self.args = args
        self.build = build                      # "new" or "old" (LAB_ENGINE_BUILD)
        self.head = args.role == "head" and args.rank == 0
        self.pace_scale = pace_scale
        # the scheduler's prefix: EP as well as TP when expert parallelism is on
        self.tag = f" TP{args.rank} EP{args.rank}" if args.ep_size > 1 else f" TP{args.rank}"

    def log(self, msg: str) -> None:
        """A scheduler logging record: stderr, ``[ts TPr EPr] `` prefix."""
        OUT.emit(2, f"[{stamp()}{self.tag}] {msg}\n")

    def pace(self, real_seconds: float) -> None:
        """Sleep this phase's share of the lab boot (real_seconds is its length on the real fleet)."""
        pacing.pace(self.pace_scale, real_seconds)
