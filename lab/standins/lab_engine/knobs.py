"""The lab knobs: every ``LAB_*`` environment variable the engine stand-in reads, with its default and meaning,
and the only place that reads them (the other modules ask ``text``, ``on``, ``number`` or ``fault``).

Any ``LAB_*`` key may also be set in a host-side file, ``/etc/dsv41-lab/engine.env`` (``KEY=VALUE`` lines, ``#``
comments; path: ``LAB_ENGINE_ENV_FILE``), so tests can turn them on without changing the launcher; the
environment wins over the file. Knobs are read when they are used (the file is merged into the environment at
start), except ``LAB_NVIDIA_STATE_DIR``, read once at import.

The engine's own settings (``DSV41_*``, ``SGLANG_*``, ``DSPARK_*``, ``API_KEY``, ...) are not lab knobs: the
modules that model them read them, with ``flag`` and ``env_float`` below for the on/off and number forms.
"""
from __future__ import annotations

import os
from typing import NamedTuple

KNOB_FILE = "/etc/dsv41-lab/engine.env"


class Knob(NamedTuple):
    name: str
    default: object     # what an unset (or, for numbers, empty or unparsable) variable reads as
    meaning: str


KNOBS = (
    Knob("LAB_ENGINE_ENV_FILE", KNOB_FILE, "path of the host-side knob file (see above)"),
    Knob("LAB_ENGINE_BUILD", "new",
         "``old``: an older engine build's formats (``server_args=ServerArgs(...)``, ``DSv4`` spelling, Engram "
         "lines with ``cache_budget=`` and no ``packed=``, the older load/capture/decode wording; see OLD BUILD "
         "in the package docstring). Anything else: the new build"),
    Knob("LAB_ENGINE_BOOT_SECONDS", 0.0,
         "spread the whole boot (marker to ``Ready``) over about n seconds, in the proportions of a real ~767 s "
         "boot (load_weight ~616 s); wins over LAB_ENGINE_FAST. Unset or 0: about 2 s (the lab's normal pacing)"),
    Knob("LAB_ENGINE_FAST", False, "1: no boot pacing at all (unit tests)"),
    Knob("LAB_ENGINE_SPEED", 1.0, "divide every request-path sleep by f (tests use a big factor)"),
    Knob("LAB_ENGINE_LOG_REQUESTS", False,
         "1: echo each chat request into the log as ``--log-requests`` does (``[ts] Receive: "
         "obj=ChatCompletionRequest(...)``, one line, repr-quoted)"),
    Knob("LAB_ENGINE_DRIFT", "", "with the retention adapter armed: its hook symbol is \"gone\" -> boot fails"),
    Knob("LAB_ENGINE_DRIFT_FILE", "/etc/dsv41-lab/engine_drift",
         "first word = the drifted symbol, same effect as LAB_ENGINE_DRIFT (which wins)"),
    Knob("LAB_ENGINE_FAULT", "",
         "<f>[,<f>]: failures the experiment stages must catch (comma or space separated; each acts only when "
         "the switch it is about took effect, so the baseline and the restored fleet stay healthy):\n"
         "fold_race: folded fence armed: greedy answers differ on repeat and under concurrency (the race the "
         "fence should close is still there)\n"
         "nonfinite: wo_a_w8 armed: ``Detected errors during sampling! NaN in the logits.`` on rank 0 per request "
         "and the answer degenerates into ``!`` tokens\n"
         "prefetch_mismatch: prefetch CHECK armed: the periodic CHECK line reports [2, 0]\n"
         "oom_at_boot: any adapter other than autotune_keep armed: the target-graph capture dies of "
         "``torch.OutOfMemoryError: CUDA out of memory`` (exit 1)\n"
         "g4_not_taken: wo_a_w8 armed, lines printed, but the profile trace shows no fp8 wo_a kernel (the "
         "small-row path never taken)\n"
         "sampler_shift: draft_tau (folded) or block_verify armed: sampled answers draw the first third of the "
         "vocabulary twice as often (a shifted distribution)\n"
         "mixed_greedy: block_verify armed: a greedy request served while a sampled one runs commits other "
         "tokens (mixed batches break greedy answers)\n"
         "tau_untempered: draft_tau armed on a folded proposal: speculative acceptance and its residual use the "
         "untempered draft distribution while the proposal was drawn at temperature T * tau, so committed tokens "
         "drift from the distribution the logprobs report (the proposal_distribution check's case)\n"
         "cap_dead_rows: verify_cap armed: a step commits its dead verify rows too (the draft's unverified "
         "guesses), so greedy answers change and more tokens are committed per step than without the cap (the "
         "capped_block check's case)\n"
         "rank_length_mismatch: the last worker boots with block size 3 whatever it is given (4 when given 3): "
         "a rank that disagrees on the speculative length\n"
         "bridge_draft_dropped: wo_a_w8 with DROP in bridge mode releases the draft's bf16 wo_a too and never "
         "says it kept it (the line the bridge-mode DROP is judged by)\n"
         "answer_drift: any experimental adapter armed: the greedy answer to one prompt in four commits other "
         "words than the baseline's (the quality check's case)\n"
         "graded_wrong: any experimental adapter armed: every answer to a graded code, JSON or math task is "
         "subtly wrong (the graded_tasks check's case)\n"
         "needle_miss: any experimental adapter armed: a needle question whose prompt is longer than "
         "LAB_ENGINE_NEEDLE_REACH tokens is answered without it\n"
         "drm_fallback: engram_drm armed (DSV41_ENGRAM_DRM_NODE set, the ported adapter in the image) with a "
         "cache: the DRM allocation fails and the layer falls back to anonymous memory (the line the DRM stage "
         "must catch)\n"
         "mxfp4_fallback: EP_SIZE 1: the last rank's expert GEMMs leave the MXFP4 path (its MoE line says "
         "quant=bf16, dequantized weights), as a kernel set without the 768-wide slice would; the other ranks "
         "stay on MXFP4 (stage I's EP1 case)"),
    Knob("LAB_ENGINE_NEEDLE_REACH", 50000.0,
         "tokens of prompt within which a needle is still found under the needle_miss fault"),
    Knob("LAB_ENGINE_SMALL_ROW_KERNEL", False,
         "1: the engine has the small-row kernel (as the canary's kernel module gives it; an image whose "
         "wo_a_w8.py carries the G=4 dispatch has it without the knob). Without it, as on today's fleet image, "
         "wo_a_w8 arms its einsum bridge and says so; with DROP it keeps the draft's wo_a on bf16 and says that "
         "too (SPEC section 3)"),
    Knob("LAB_ENGINE_RANK_EXTRA_GIB", "",
         "a,b,c: each rank's extra free memory before load in GiB (unset: 0, 0.38, 0.21: the head has the "
         "least), e.g. a worker with the least"),
    Knob("LAB_ENGINE_STATS_SECONDS", None,
         "period of the prefetch CHECK line in the lab (unset: DSV41_STATS_SECONDS, else 60), divided by "
         "LAB_ENGINE_SPEED"),
    Knob("LAB_ENGINE_STEP_MS_PER_ROW", 4.0,
         "what each verify row past block size 3 adds to a speculative step (ms); set high, a longer block loses "
         "to k=3 on committed tokens per second of step time"),
    Knob("LAB_ENGINE_DECODE_LOG_STEPS", 20.0,
         "rank 0 logs a ``Decode batch`` line every n speculative steps of each running request, with the "
         "batch's size at that moment, besides the line each request logs as it leaves; 0: only those"),
    Knob("LAB_ENGINE_STREAM_ERROR_EVERY", 0.0,
         "every n-th chat request (counted from 1 since the boot) fails after its stream started: about half its "
         "tokens, then ``data: {\"error\": {\"message\": ..., \"type\": \"ServiceUnavailableError\", \"param\": "
         "null, \"code\": 503}}`` and ``data: [DONE]`` (no finish chunk, no usage); not streamed: HTTP 503 with "
         "the error object. 0: off; a request this and LAB_ENGINE_ABORT_EVERY would both hit gets the error"),
    Knob("LAB_ENGINE_ABORT_EVERY", 0.0,
         "every n-th chat request is aborted gracefully after about half its tokens: a chunk with "
         "``finish_reason: \"abort\"``, then the usage chunk (tokens so far) and ``[DONE]``; not streamed: 200 "
         "with ``finish_reason: \"abort\"`` and usage. 0: off"),
    Knob("LAB_ENGINE_NO_LOGPROBS", False,
         "1: a build that ignores the request's ``logprobs`` and ``top_logprobs``: no ``logprobs`` in the "
         "message or in any streamed chunk (the answer itself is unchanged)"),
    Knob("LAB_ENGINE_SPEC_USAGE", False,
         "1: a newer build's usage: ``completion_tokens_details`` with the speculative counts "
         "``accepted_prediction_tokens`` (draft tokens committed) and ``rejected_prediction_tokens`` (draft "
         "tokens proposed and refused; lab names)"),
    # set by the docker stand-in for every engine it starts
    Knob("LAB_MOUNTS", "", "JSON {container_dst: host_src}: the container's bind mounts"),
    Knob("LAB_IMAGE_ROOT", None,
         "<dir>: the container image's rootfs. An adapter (autotune_keep and the seven local ones) takes effect "
         "only if its switch is on AND <dir>/sgl-workspace/adapter/<name>.py exists AND that directory's "
         "sitecustomize.py reaches install_<name>(...) in this environment (its finder inserted: DSV41_SOURCE "
         "set; the call's gates hold); otherwise the switch is silently ignored. Unset: the switch alone decides "
         "(tests)"),
    Knob("LAB_NVIDIA_STATE_DIR", "/var/lib/lab-nvidia",
         "the lab nvidia-smi's state directory (clock lock, thermal knob), which the step time follows"),
)
_BY_NAME = {k.name: k for k in KNOBS}
_OFF = ("", "0", "false", "False", "off")


def load_knob_file() -> None:
    """LAB_* keys of the host-side knob file, unless the environment already sets them."""
    path = text("LAB_ENGINE_ENV_FILE")
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return
    for line in lines:
        line = line.strip()
        if line.startswith("export "):
            line = line[7:].strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if key.startswith("LAB_") and key not in os.environ:
            os.environ[key] = value


def flag(name: str) -> bool:
    return os.environ.get(name, "0").strip() not in _OFF


def env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


def text(name: str):
    """Knob NAME as set, else its default (a name not in KNOBS is a KeyError: one list, no stray knobs)."""
    return os.environ.get(name, _BY_NAME[name].default)


def on(name: str) -> bool:
    """An on/off knob: set to anything but "", 0, false or off."""
    if name not in _BY_NAME:
        raise KeyError(name)
    return flag(name)


def number(name: str, default: float | None = None) -> float:
    """A number knob (unset, empty or unparsable: DEFAULT, else its default in KNOBS)."""
    return env_float(name, _BY_NAME[name].default if default is None else default)


def build() -> str:
    """LAB_ENGINE_BUILD: "old" or "new"."""
    return "old" if text("LAB_ENGINE_BUILD").strip().lower() == "old" else "new"


def faults() -> set:
    """LAB_ENGINE_FAULT as a set of fault names (comma or space separated)."""
    return {f for f in text("LAB_ENGINE_FAULT").replace(",", " ").split() if f}


def fault(name: str) -> bool:
    """Fault NAME is set; each fault acts only where the switch it concerns took effect (callers check)."""
    return name in faults()
