"""Rendezvous (a lab detail): workers report their packed state to the head, and hear from it when a profile
ended."""
from __future__ import annotations

import json
import socket
import socketserver
import threading
import time

from .output import log_main
from .profiler import profile_trace


class RankStates:
    def __init__(self, own_packed: bool):
        self.lock = threading.Lock()
        self.packed = {0: own_packed}
        # how many /stop_profile calls the head has served; each worker writes its own trace when the
        # count it reads in the rendezvous reply grows (SGLang's profiler runs on every TP rank)
        self.profiles_done = 0

    def set(self, rank: int, packed: bool) -> None:
        with self.lock:
            self.packed[rank] = packed

    def all_packed(self) -> bool:
        with self.lock:
            return all(self.packed.values())


def start_rendezvous_server(addr: str, states: RankStates) -> None:
    try:
        port = int(addr.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            try:
                msg = json.loads(self.rfile.readline(4096).decode() or "{}")
                states.set(int(msg["rank"]), bool(msg["packed"]))
                self.wfile.write((json.dumps({"profiles_done": states.profiles_done}) + "\n").encode())
            except (ValueError, KeyError, TypeError, OSError):
                pass

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
        daemon_threads = True

    try:
        srv = Server(("0.0.0.0", port), Handler)
    except OSError as exc:
        log_main(f"WARNING: rendezvous port {port} unavailable ({exc}); using this rank's state only (lab)")
        return
    threading.Thread(target=srv.serve_forever, daemon=True).start()


def worker_report_loop(addr: str, rank: int, packed: bool) -> None:
    try:
        host, port = addr.rsplit(":", 1)
        port = int(port)
    except ValueError:
        return
    msg = (json.dumps({"rank": rank, "packed": packed}) + "\n").encode()
    seen = None  # profiles the head had served when this worker first heard from it
    while True:
        try:
            with socket.create_connection((host, port), timeout=2) as s:
                s.sendall(msg)
                s.shutdown(socket.SHUT_WR)
                reply = json.loads(s.makefile().readline(4096) or "{}")
            done = int(reply.get("profiles_done", 0))
            if seen is not None and done > seen:
                profile_trace(rank, packed)
            seen = done
        except (OSError, ValueError, TypeError, AttributeError):
            pass
        time.sleep(2)
