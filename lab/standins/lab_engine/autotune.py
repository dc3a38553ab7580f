"""The FlashInfer autotune cache of one rank: the stock engine's two passes, and the retention adapter's reuse
of a cache tuned for the same launch."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time

from . import knobs
from .adapters import autotune_keep_armed
from .arguments import run_entrypoint_args
from .constants import AUTOTUNE_ROOT, DISAGREE, FINGERPRINT_PREFIXES
from .errors import Fatal
from .output import say
from .pacing import PHASE
from .paths import host_path


def autotune_paths(args) -> tuple:
    key = f"block={args.dspark_block_size};mrr={args.max_running_requests};" \
          f"chunk={args.chunked_prefill_size};tp={args.tp_size}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    cdir = f"{AUTOTUNE_ROOT}/{digest}"
    cfile = f"{cdir}/rank_tp{args.rank}_pp0_dp0.json"
    return cdir, cfile


def launch_fingerprint(argv: list) -> str:
    lines = ["argv:" + "\x1f".join(argv)]
    for k in sorted(os.environ):
        if k.startswith(FINGERPRINT_PREFIXES):
            lines.append(f"{k}={os.environ[k]}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def write_atomic(path: str, data: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(data)
    os.replace(tmp, path)


def drift_symbol() -> str:
    drift = knobs.text("LAB_ENGINE_DRIFT").strip()
    drift_file = knobs.text("LAB_ENGINE_DRIFT_FILE")
    if not drift and os.path.isfile(drift_file):
        with open(drift_file, encoding="utf-8") as fh:
            words = fh.read().split()
        drift = words[0] if words else ""
    return drift


class Autotune:
    """The two autotune passes of one boot (target graphs, draft graphs) on this rank's cache file."""

    def __init__(self, run, mounts: dict):
        self.run = run
        self.args = args = run.args
        cdir, self.cfile = autotune_paths(args)
        self.short = f"{os.path.basename(cdir)}/{os.path.basename(self.cfile)}"
        self.host_file = host_path(self.cfile, mounts)
        self.keep = autotune_keep_armed()
        self.existed = os.path.exists(self.host_file)
        self.valid = False
        self.seconds = 0.0
        if self.keep:
            argv = sys.argv[1:]
            if argv[:1] == ["run"]:   # the image's entrypoint: the server's argv is built from the env
                argv = run_entrypoint_args(argv[1:])
            self.fp = launch_fingerprint(argv)
            self.sidecar = self.host_file + ".launch"
            if self.existed and os.path.exists(self.sidecar):
                with open(self.sidecar, encoding="utf-8") as fh:
                    self.valid = fh.read().strip() == self.fp

    def arm(self) -> None:
        if not self.keep:
            return
        drift = drift_symbol()
        if drift:
            raise Fatal(f"DSV41_AUTOTUNE_KEEP: {drift} is gone; engine drifted")
        say("[autotune_keep] armed")

    def _tune(self, pass_name: str) -> None:
        t0 = time.monotonic()
        self.run.log(f"Running FlashInfer autotune with cache: {self.cfile}")
        self.run.pace(PHASE[f"autotune_{pass_name}"])
        payload = {"lab": True, "rank": self.args.rank, "pass": pass_name, "tuned_at": time.time(),
                   "tactics": {f"moe_gemm_m{m}": (self.args.rank * 31 + m) % 11 for m in (1, 2, 4, 8, 16)}}
        write_atomic(self.host_file, json.dumps(payload, indent=1, sort_keys=True) + "\n")
        self.run.log("FlashInfer autotune completed.")
        self.seconds += time.monotonic() - t0

    def run_pass(self, pass_name: str) -> None:
        if self.keep:
            if self.valid:
                say(f"[autotune_keep] reused {self.short}")
            else:
                self._tune(pass_name)
                write_atomic(self.sidecar, self.fp + "\n")
                say(f"[autotune_keep] tuned and saved {self.short}")
        else:
            if self.existed and self.args.rank == 0:
                self.run.log(DISAGREE)
            self._tune(pass_name)
