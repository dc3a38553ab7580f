"""The engine process: parse the arguments, boot, serve (the head) or idle (a worker), until SIGTERM."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

from . import knobs
from .api import HTTPServer, make_handler
from .arguments import parse_args
from .boot import boot, print_fatal
from .engine import Engine
from .errors import EngramFatal, Fatal
from .output import log_main, raw_err, say
from .pacing import PHASE, boot_pace_scale
from .rendezvous import RankStates, start_rendezvous_server, worker_report_loop
from .run import Run
from .server_args import server_args_line
from .serving import start_periodic, uvicorn_started, warmup


def on_sigterm(run: Run) -> None:
    log_main("Received sigterm=15, shutting down.")
    if run.head:
        log_main("INFO:     Shutting down")
        log_main("INFO:     Finished server process [1]")
    os._exit(0)


def main(argv: list | None = None) -> int:
    knobs.load_knob_file()
    pace_scale = boot_pace_scale()
    build = knobs.build()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    run = Run(args, build, pace_scale)
    head = run.head
    signal.signal(signal.SIGTERM, lambda _signum, _frame: on_sigterm(run))
    t_start = time.monotonic()
    log_main(server_args_line(run))
    engine = Engine(run) if head else None
    httpd = None
    try:
        if head:
            # bound now so /health answers 503 while the engine boots
            try:
                httpd = HTTPServer((args.host, args.port), make_handler(engine))
            except OSError as exc:
                raise Fatal(f"[Errno {exc.errno}] error while attempting to bind on address "
                            f"('{args.host}', {args.port}): {exc.strerror}") from None
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
            log_main("Using default HuggingFace chat template with detected content format: string")
        run.pace(PHASE["tokenizer"])
        state = boot(run, t_start)
    except EngramFatal as exc:
        raw_err(f"Engram retrieval failed: {exc.detail} (errno={exc.errno})\n")
        return 134  # abort()
    except Fatal as exc:
        print_fatal(run, exc)
        return 1
    except OSError as exc:
        print_fatal(run, exc)
        return 1
    if not head:
        if args.dist_init_addr:
            threading.Thread(target=worker_report_loop, args=(args.dist_init_addr, args.rank, state["packed"]),
                             daemon=True).start()
        # SGLang's dummy health server on the other nodes
        try:
            dummy = HTTPServer((args.host, args.port), make_handler(None))
            threading.Thread(target=dummy.serve_forever, daemon=True).start()
            uvicorn_started(args.port)
        except OSError as exc:
            log_main(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                     f"('{args.host}', {args.port}): {exc.strerror}")
        start_periodic(run, state)
        while True:
            time.sleep(3600)
    ranks = RankStates(state["packed"])
    if args.dist_init_addr:
        start_rendezvous_server(args.dist_init_addr, ranks)
    engine.state = state
    engine.ranks = ranks
    uvicorn_started(args.port)
    warmup(run)
    engine.ready.set()
    say(f"Ready: API on port {args.port}")
    start_periodic(run, state)
    while True:
        time.sleep(3600)
