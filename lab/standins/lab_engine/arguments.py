"""The engine's arguments: its command line, or the image's ``run`` entrypoint's environment."""
from __future__ import annotations

import argparse
import os

from .constants import SERVED_MODEL_NAME
from .knobs import fault


# The image's ``run`` entrypoint (``docker run ... IMAGE run``, as the real launchers start it): the engine's
# arguments come from the container's environment. Empty or unset values leave the engine's default.
RUN_ENV_ARGS = (("TP_SIZE", "--tp-size"), ("EP_SIZE", "--ep-size"), ("MODEL_PATH", "--model-path"),
                ("PORT", "--port"), ("MAX_RUNNING_REQUESTS", "--max-running-requests"),
                ("CHUNKED_PREFILL_SIZE", "--chunked-prefill-size"), ("MAX_TOTAL_TOKENS", "--max-total-tokens"),
                ("MEM_FRACTION_STATIC", "--mem-fraction-static"), ("MOE_RUNNER_BACKEND", "--moe-runner-backend"),
                ("DIST_INIT_ADDR", "--dist-init-addr"))


def run_entrypoint_args(rest: list) -> list:
    rank = (os.environ.get("NODE_RANK") or "0").strip()
    argv = ["--role", "head" if rank == "0" else "worker", "--rank", rank]
    for var, flag in RUN_ENV_ARGS:
        value = os.environ.get(var, "").strip()
        if value:
            argv += [flag, value]
    return argv + list(rest)


def parse_args(argv: list):
    if argv and argv[0] == "run":
        argv = run_entrypoint_args(argv[1:])
    p = argparse.ArgumentParser(prog="dsv41_engine", add_help=True)
    p.add_argument("--role", choices=("head", "worker"), default="head")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--tp-size", type=int, default=3)
    p.add_argument("--ep-size", type=int, default=3)
    p.add_argument("--model-path", default="/srv/models/DeepSeek-V4.1-Flash")
    p.add_argument("--port", type=int, default=8888)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--dspark-block-size", type=int, default=None)
    p.add_argument("--max-running-requests", type=int, default=4)
    p.add_argument("--chunked-prefill-size", type=int, default=1024)
    p.add_argument("--max-total-tokens", type=int, default=None)
    p.add_argument("--mem-fraction-static", type=float, default=0.95)
    p.add_argument("--moe-runner-backend", default="auto")
    p.add_argument("--dist-init-addr", default="")
    p.add_argument("--served-model-name", default=SERVED_MODEL_NAME)
    args, _unknown = p.parse_known_args(argv)
    if args.dspark_block_size is None:
        try:
            args.dspark_block_size = int(os.environ.get("DSPARK_BLOCK_SIZE", "3") or 3)
        except ValueError:
            args.dspark_block_size = 3
    if fault("rank_length_mismatch") and args.rank == args.tp_size - 1 and args.rank > 0:
        # the last worker boots on the image default, as a worker whose launch path never received the setting
        args.dspark_block_size = 3 if args.dspark_block_size != 3 else 4
    if args.max_running_requests < 1:
        args.max_running_requests = 1
    return args
