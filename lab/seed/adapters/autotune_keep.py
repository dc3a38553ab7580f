# -*- coding: utf-8 -*-
"""FlashInfer autotune cache retention (DSV41_AUTOTUNE_KEEP). LAB STAND-IN of the real adapter.

Downstream retention adapter (pinned revision 4d8f4c0868ed3b394688b65d88cd99a82c237642; not yet
deployed on TP3: stage B adds it to ``adapter/`` and registers it in ``sitecustomize.py``).

The stock engine discards the per-rank autotune caches when the ranks disagree and tunes from
scratch on every boot. This adapter wraps ``flashinfer_autotune_context``: the cache file named by
``flashinfer_autotune_cache_path`` (``~/.cache/sglang/flashinfer/autotune/<flashinfer>/<sm>/<hash>/
rank_tp{r}_pp0_dp0.json``) is reused when its ``.launch`` sidecar matches this launch (sha256 of the
argv and the DSV41_/SGLANG_/DSPARK_/FLASHINFER_ environment), else tuned and saved with a new
sidecar. Engine symbols it needs: ``_autotune_cache_digest``, ``flashinfer_autotune_context``,
``flashinfer_autotune_cache_path``; a missing one fails the boot ("... is gone; engine drifted").
"""
import hashlib
import os
import sys

PREFIXES = ("DSV41_", "SGLANG_", "DSPARK_", "FLASHINFER_")
REQUIRED = ("_autotune_cache_digest", "flashinfer_autotune_context", "flashinfer_autotune_cache_path")
_PATCHED = False


def launch_fingerprint(argv=None, environ=None):
    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ if environ is None else environ
    lines = ["argv:" + "\x1f".join(argv)]
    lines += ["%s=%s" % (k, environ[k]) for k in sorted(environ) if k.startswith(PREFIXES)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _sidecar_matches(cache_file, fingerprint):
    try:
        with open(cache_file + ".launch", encoding="utf-8") as fh:
            return os.path.isfile(cache_file) and fh.read().strip() == fingerprint
    except OSError:
        return False


def install():
    global _PATCHED
    if _PATCHED:
        return
    from sglang.srt.layers import flashinfer_utils as fu  # noqa: WPS433

    for name in REQUIRED:
        if not hasattr(fu, name):
            raise RuntimeError("DSV41_AUTOTUNE_KEEP: %s is gone; engine drifted" % name)
    original_context = fu.flashinfer_autotune_context
    fingerprint = launch_fingerprint()

    def flashinfer_autotune_context(*args, **kwargs):
        path = fu.flashinfer_autotune_cache_path(fu._autotune_cache_digest(*args, **kwargs))
        if _sidecar_matches(path, fingerprint):
            # directory name and file only, as the downstream adapter prints it
            print("[autotune_keep] reused %s" % "/".join(path.split("/")[-2:]), flush=True)
            return fu.load_autotune_cache(path)
        ctx = original_context(*args, keep_existing=True, **kwargs)
        ctx.on_saved(lambda saved: _write_sidecar(saved, fingerprint))
        return ctx

    fu.flashinfer_autotune_context = flashinfer_autotune_context
    print("[autotune_keep] armed", flush=True)
    _PATCHED = True


def _write_sidecar(cache_file, fingerprint):
    tmp = "%s.launch.tmp%d" % (cache_file, os.getpid())
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(fingerprint + "\n")
    os.replace(tmp, cache_file + ".launch")
    print("[autotune_keep] tuned and saved %s" % cache_file, flush=True)
