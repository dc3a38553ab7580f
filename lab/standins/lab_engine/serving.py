"""After the boot: the server's start lines, the launcher's warm-up request and the periodic lines."""
from __future__ import annotations

import threading
import time

from . import knobs
from .adapters import prefetch_check_on
from .knobs import env_float, fault
from .output import log_main
from .pacing import PHASE


def uvicorn_started(port: int) -> None:
    log_main("INFO:     Started server process [1]")
    log_main("INFO:     Waiting for application startup.")
    log_main("INFO:     Application startup complete.")
    log_main(f"INFO:     Uvicorn running on http://0.0.0.0:{port} (Press CTRL+C to quit)")


def prefetch_check_loop(run) -> None:
    """The prefetch adapter's periodic CHECK line (engine logging, WARNING), every stats period."""
    period = knobs.number("LAB_ENGINE_STATS_SECONDS", env_float("DSV41_STATS_SECONDS", 60.0))
    period = max(period / max(knobs.number("LAB_ENGINE_SPEED"), 1e-6), 0.05)
    counts = "[2, 0]" if fault("prefetch_mismatch") else "[0, 0]"
    while True:
        time.sleep(period)
        run.log(f"DSV41 Engram prefetch CHECK: gathers differing from the synchronous path per layer = {counts}")


def start_periodic(run, state: dict) -> None:
    if prefetch_check_on() and state.get("packed"):
        threading.Thread(target=prefetch_check_loop, args=(run,), daemon=True).start()


def warmup(run) -> None:
    """The launcher's warm-up request, as SGLang logs it."""
    log_main('INFO:     127.0.0.1:41822 - "GET /model_info HTTP/1.1" 200 OK')
    if run.build == "old":
        run.log("Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, "
                "#queue-req: 0")
    else:
        run.log("Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, full token usage: 0.00, "
                "swa token usage: 0.00, #running-req: 0, #queue-req: 0")
    run.pace(PHASE["warmup"])
    log_main('INFO:     127.0.0.1:41830 - "POST /generate HTTP/1.1" 200 OK')
    log_main("The server is fired up and ready to roll!")
