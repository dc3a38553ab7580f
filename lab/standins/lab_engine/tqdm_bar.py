"""tqdm's progress bar, drawn as the real bar draws it (the CUDA-graph capture's ``Capturing batches``)."""
from __future__ import annotations


BAR_WIDTH = 10
BAR_PARTS = " ▏▎▍▌▋▊▉"


def _interval(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def tqdm_line(desc: str, n: int, total: int, elapsed: float) -> str:
    """One tqdm redraw as the real bar prints it (no leading carriage return)."""
    frac = n / total if total else 1.0
    filled = frac * BAR_WIDTH
    full = int(filled)
    part = BAR_PARTS[int((filled - full) * 8)] if full < BAR_WIDTH else ""
    bar = ("█" * full + (part if part.strip() else "")).ljust(BAR_WIDTH)
    if n == 0:
        rate, remaining = "?it/s", "?"
    else:
        per = elapsed / n
        rate = f"{per:5.2f}s/it" if per >= 1 else f"{1 / per if per > 0 else 0:5.2f}it/s"
        remaining = _interval(per * (total - n))
    return f"{desc}: {frac * 100:3.0f}%|{bar}| {n}/{total} [{_interval(elapsed)}<{remaining}, {rate}]"
