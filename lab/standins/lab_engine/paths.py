"""Container paths: where a path inside the engine's container is on its host (the container's bind mounts)."""
from __future__ import annotations

import json

from . import knobs


def load_mounts() -> dict:
    try:
        mounts = json.loads(knobs.text("LAB_MOUNTS") or "{}")
        return {str(k): str(v) for k, v in mounts.items()} if isinstance(mounts, dict) else {}
    except ValueError:
        return {}


def host_path(container_path: str, mounts: dict | None = None) -> str:
    """Map a container path to the host path through LAB_MOUNTS (longest-prefix match)."""
    mounts = load_mounts() if mounts is None else mounts
    best = None
    for dst in mounts:
        d = dst.rstrip("/") or "/"
        if container_path == d or container_path.startswith(d + "/") or d == "/":
            if best is None or len(d) > len(best[0]):
                best = (d, mounts[dst])
    if best is None:
        return container_path
    d, src = best
    rest = container_path[len(d):] if d != "/" else container_path
    return src.rstrip("/") + rest if rest else src
