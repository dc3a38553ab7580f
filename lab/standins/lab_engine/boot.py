"""The boot of one rank, marker to the last boot line, as the real engine logs it (see the package docstring),
and the boot's fatal errors."""
from __future__ import annotations

import os
import time

from . import knobs
from .adapters import ARM_ADAPTERS, adapter_on, tau_value, wo_a_bridge
from .autotune import Autotune
from .caches import cache_slots, drm_ordinary_bytes, layer_budget_line, layer_budgets
from .checkpoint import check_shard, engram_rows
from .constants import (BYTES_PER_FULL_TOKEN, CONTEXT_LEN, ENGRAM_LAYERS, FOLDED_AUTO_MIN, MAX_PREFILL_TOKENS, MIB,
                        PAGE_SIZE, TOTAL_BYTES, WO_A_COPY_MIB, WO_A_DROP_KEPT, WO_A_WEIGHTS)
from .errors import Fatal, OutOfMemory
from .knobs import env_float, fault, flag
from .memory import memory_model, pool_line
from .moe import moe_line, padding_line
from .output import gib, log_main, raw_err, say
from .pacing import PHASE
from .paths import host_path, load_mounts
from .tqdm_bar import tqdm_line


def print_load_adapters(phase: str) -> None:
    """What the adapters print while the weights load (print(): stdout)."""
    if phase == "target" and adapter_on("wo_a_w8"):
        say(f"[wo_a_w8] fp8 twins for {WO_A_WEIGHTS} wo_a weights, 0 left on bf16")
        if wo_a_bridge():
            say("[wo_a_w8] einsum bridge armed: fp8 twin for verify/draft rows, gemv left at M=1")
        if flag("DSV41_WO_A_W8_MID") or flag("DSV41_WO_A_W8_DROP"):
            say("[wo_a_w8] mid path armed: 9..192 rows from the fp8 twin")
        if flag("DSV41_WO_A_W8_DROP"):
            released = WO_A_WEIGHTS - WO_A_DROP_KEPT
            say(f"[wo_a_w8] released the bf16 copy of {released} wo_a weights ({released * WO_A_COPY_MIB} MB); "
                f"{WO_A_DROP_KEPT} kept (dequantized copy not bit-identical)")
            if wo_a_bridge() and not fault("bridge_draft_dropped"):
                say("[wo_a_w8] draft wo_a left on bf16 (this engine's draft does not use the shared dispatch)")
    if phase == "draft" and adapter_on("draft_head_fp8"):
        say("[draft_head_fp8] armed")
        say("[draft_head_fp8] fp8 twin of the draft LM head (43136, 5120)")


def print_verify_adapters() -> None:
    if adapter_on("draft_tau"):
        say(f"[draft_tau] draft temperature x{tau_value():g}")
    if adapter_on("block_verify"):
        say("[block_verify] armed: block verification for sampled DSpark rows")
    if adapter_on("verify_cap"):
        say(f"[verify_cap] armed ({os.environ.get('DSV41_VERIFY_CAP', '').strip()}): dead verify rows route "
            "to the anchor's experts")


def drm_lines(rank: int) -> None:
    """The ported DRM cache adapter (``engram_drm``, in the image only where a test builds it in): the last
    Engram layer's budget (DSV41_CACHE_GIB's share, or its own with the per-layer port) backed by the DRM node
    named by DSV41_ENGRAM_DRM_NODE, its keys, metadata and staging in ordinary memory; at a zero budget it
    yields no slots. Fault ``drm_fallback``: the allocation fails and the layer silently takes anonymous
    ordinary memory, the report's hazard that the stage must catch. (Lab wording: the SPEC quotes no DRM line.)"""
    if not adapter_on("engram_drm"):
        return
    node = os.environ.get("DSV41_ENGRAM_DRM_NODE", "").strip()
    layer = ENGRAM_LAYERS[-1]
    share = layer_budgets()[layer]
    if share <= 0:
        what = (f"layer {layer} budget 0" if adapter_on("engram_layer_budget") else "DSV41_CACHE_GIB=0")
        print(f"[engram_drm] {what}: no cache slots; DRM node {node} unused", flush=True)
    elif fault("drm_fallback"):
        print(f"[engram_drm] DRM allocation of {share:.2f} GiB on {node} failed (errno=12) for layer {layer} "
              f"rank {rank}; falling back to anonymous memory", flush=True)
    else:
        print(f"[engram_drm] layer {layer} rank {rank} cache on {node}: {share:.2f} GiB DRM-backed (keys, metadata "
              f"and staging in ordinary memory: {drm_ordinary_bytes() / MIB:.1f} MiB)", flush=True)


def capture_pass(run, pass_name: str, mem: dict, autotune: Autotune) -> float:
    """One CUDA-graph capture with its autotune pass; returns the lab seconds spent capturing."""
    args = run.args
    m = args.max_running_requests
    bs = list(range(1, m + 1))
    begin = mem["capture_target_begin"] if pass_name == "target" else mem["capture_target_end"]
    usage = mem["target_graphs"] if pass_name == "target" else mem["draft_graphs"]
    if run.build == "old":
        what = "cuda graph" if pass_name == "target" else "draft cuda graph"
        run.log(f"Capture {what} begin. This can take up to several minutes. avail mem={gib(begin)} GB")
        run.log(f"Capture {what} bs {bs}")
    else:
        run.log(f"Capture {pass_name} verify CUDA graph begin. backend=full, num_tokens_per_req="
                f"{args.dspark_block_size + 1}, bs={bs}, avail mem={gib(begin)} GB")
    t0 = time.monotonic()
    order = list(reversed(bs))
    step = usage / len(order)

    def desc(i: int) -> str:
        return f"Capturing batches (bs={order[min(i, len(order) - 1)]} avail_mem={gib(begin - step * i)} GB)"

    # tqdm's first draw and a refresh; the logging records that follow land on the same physical line
    raw_err(tqdm_line(desc(0), 0, len(order), 0.0))
    run.pace(PHASE["bar"])
    raw_err("\r" + tqdm_line(desc(0), 0, len(order), time.monotonic() - t0) + "\x1b[A")
    autotune.run_pass(pass_name)
    capture_t0 = time.monotonic()
    for i in range(1, len(order) + 1):
        run.pace(PHASE[f"capture_{pass_name}"] / len(order))
        raw_err("\r" + tqdm_line(desc(i), i, len(order), time.monotonic() - t0))
    raw_err("\n")
    if pass_name == "target" and fault("oom_at_boot") and any(adapter_on(a) for a in ARM_ADAPTERS):
        raise OutOfMemory(f"CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of "
                          f"{gib(TOTAL_BYTES)} GiB of which {max(begin, 0) / MIB:.2f} MiB is free.")
    if pass_name == "target":
        if adapter_on("verify_cap"):
            say(f"[verify_cap] remap captured into the verify graph for M={args.dspark_block_size + 1}")
            say("[verify_cap] confidence present")
        if adapter_on("folded_fence"):
            say("[folded_fence] folded DSpark results cloned off the persistent verify buffers")
    elapsed = time.monotonic() - capture_t0
    end = begin - usage
    if run.build == "old":
        what = "cuda graph" if pass_name == "target" else "draft cuda graph"
        run.log(f"Capture {what} end. Time elapsed: {elapsed:.2f} s. mem usage={gib(usage)} GB. "
                f"avail mem={gib(end)} GB.")
    else:
        run.log(f"Capture {pass_name} verify CUDA graph end. elapsed={elapsed:.2f} s, mem usage={gib(usage)} GB, "
                f"avail mem={gib(end)} GB.")
    return elapsed


def sps_table_line() -> str | None:
    """``DSPARK_SPS_TABLE`` (ragged verify schedule) judged by its effect: the engine reads the table at the
    path it names inside the container (a mount, else the image's own files); a missing table leaves the
    verify-all schedule. None when the variable is unset or empty."""
    path = os.environ.get("DSPARK_SPS_TABLE", "").strip()
    if not path:
        return None
    mounts = load_mounts()
    covered = any(d.rstrip("/") and (path == d.rstrip("/") or path.startswith(d.rstrip("/") + "/")) for d in mounts)
    root = knobs.text("LAB_IMAGE_ROOT")
    where = host_path(path, mounts) if covered else (os.path.join(root, path.lstrip("/")) if root else path)
    if not os.path.isfile(where):
        return f"DSPARK_SPS_TABLE={path} not found; staying on the verify-all schedule"
    return f"DSPARK_SPS_TABLE={path} loaded: ragged verify schedule in use"


def folded_sampling_active(mem: dict) -> bool:
    """Whether the draft proposal of sampled rows is folded into the draft graph (the AUTO decision as
    rank 0 logs it: forced with 2, off with 0, else from the free memory after capture)."""
    mode = os.environ.get("SGLANG_DSPARK_FOLDED_SAMPLING", "").strip()
    if mode == "0":
        return False
    return mode == "2" or mem["after_min"] >= FOLDED_AUTO_MIN


def sampler_path_salt() -> int:
    """0 on the default sampler path; another number for each sampling switch that changes how a sampled
    row is proposed or verified (same distribution, other random stream)."""
    salt = 0
    if os.environ.get("SGLANG_DSPARK_FOLDED_SAMPLING", "").strip() == "2":
        salt ^= 0x1F2E3D4C
    if adapter_on("draft_tau"):
        salt ^= 0x5A6B7C8D
    if adapter_on("block_verify"):
        salt ^= 0x01234567
    return salt


def folded_sampling_line(mem: dict) -> str:
    mode = os.environ.get("SGLANG_DSPARK_FOLDED_SAMPLING", "").strip()
    if mode == "0":
        return "DSpark draft proposal kept eager (reason=SGLANG_DSPARK_FOLDED_SAMPLING=0)"
    if mode == "2":
        return "DSpark draft proposal (greedy + sampling) folded into the draft cuda graph."
    if mem["after_min"] >= FOLDED_AUTO_MIN:
        return "DSpark draft proposal (greedy + sampling) folded into the draft cuda graph."
    return ("DSpark folded sampling disabled: its static buffers need 0.09 GB but only "
            f"{gib(max(mem['after_min'], 0.0))} GB GPU memory is free; sampling batches will take the eager proposal "
            "path. Set SGLANG_DSPARK_FOLDED_SAMPLING=2 to force.")


def boot(run, t_start: float) -> dict:
    args = run.args
    mounts = load_mounts()
    run.pace(PHASE["scheduler_start"])
    run.log("Init torch distributed begin.")
    run.pace(PHASE["dist"])
    if args.rank == 0:
        run.log("sglang is using nccl==2.27.7")
    run.log(f"Init torch distributed ends. mem usage={0.41 + 0.03 * (args.rank % 3):.2f} GB")
    autotune = Autotune(run, mounts)
    autotune.arm()

    mem = memory_model(args.mem_fraction_static, args.max_total_tokens, args.rank, args.max_running_requests,
                       args.tp_size, args.ep_size)
    load_t0 = time.monotonic()
    run.log(f"Load weight begin. avail mem={gib(mem['load_begin'])} GB")
    run.pace(PHASE["load_start"])
    rows = engram_rows(args.model_path, mounts)
    packed_dir = os.environ.get("DSV41_PACKED_DIR", "/engram").rstrip("/") or "/engram"
    offload = os.environ.get("OFFLOAD_MODE", "nvme").strip() or "nvme"
    budgets = layer_budgets()
    ways = int(env_float("DSV41_CACHE_WAYS", 4)) or 4
    if layer_budget_line():
        say(layer_budget_line())
    prefetch = adapter_on("engram_prefetch")
    if prefetch:
        run.log("DSV41 Engram prefetch ARMED: rows fetched on a side stream after the hasher"
                + (" (CHECK mode: old path re-run and compared)"
                   if os.environ.get("DSV41_ENGRAM_PREFETCH_CHECK", "0").strip() == "1" else ""))
    packed_all = True
    for layer in ENGRAM_LAYERS:
        n = rows[layer]
        r, tp = args.rank, args.tp_size
        lo, hi = n * r // tp, n * (r + 1) // tp
        name = f"engram-l{layer}-r{r}of{tp}.bin"
        packed = check_shard(host_path(f"{packed_dir}/{name}", mounts), layer, lo, hi, n)
        packed_all = packed_all and packed
        cache = budgets[layer]
        slots = cache_slots(cache, ways)
        owned = max(1, hi - lo)
        pct = min(100.0, 100.0 * slots / owned)
        if run.build == "old":
            run.log(f"Exact {offload} Engram layer={layer} rank={r} rows=[{lo},{hi}) cache_budget={cache:.1f}GiB "
                    f"ways={ways} io_threads=96")
        else:
            run.log(f"Exact {offload} Engram layer={layer} rank={r} rows=[{lo},{hi}) cache={cache:.1f}GiB "
                    f"({slots} slots, {ways}-way, {pct:.1f}% of owned rows) scales=0.0GiB io_threads=96 "
                    f"packed={packed}")
        run.pace(PHASE["engram_layer"])
    drm_lines(args.rank)
    run.log(moe_line(args))
    if padding_line(args, "target"):
        run.log(padding_line(args, "target"))
    if prefetch and not packed_all:
        run.log("DSV41 Engram prefetch disabled after error: packed Engram shards are required "
                f"(DSV41_PACKED_DIR={packed_dir})")
    run.pace(PHASE["load_target"])
    print_load_adapters("target")
    if run.build == "old":
        run.log(f"Load weight end. type=DeepseekV4ForCausalLM, dtype=torch.bfloat16, "
                f"avail mem={gib(mem['after_target'])} GB, mem usage={gib(mem['target_usage'])} GB.")
    else:
        run.log(f"Load weight end. elapsed={time.monotonic() - load_t0:.2f} s, type=DeepseekV4ForCausalLM, quant=fp8, "
                f"avail mem={gib(mem['after_target'])} GB, mem usage={gib(mem['target_usage'])} GB.")
    draft_t0 = time.monotonic()
    run.log(f"Load weight begin. avail mem={gib(mem['after_target'])} GB")
    run.pace(PHASE["load_draft"])
    if padding_line(args, "draft"):
        run.log(padding_line(args, "draft"))
    print_load_adapters("draft")
    if run.build == "old":
        run.log(f"Load weight end. type=DeepseekV4ForCausalLMNextN, dtype=torch.bfloat16, avail mem="
                f"{gib(mem['after_loads'])} GB, mem usage={gib(mem['draft_usage'])} GB.")
    else:
        run.log(f"Load weight end. elapsed={time.monotonic() - draft_t0:.2f} s, type=DeepseekV4ForCausalLMNextN, "
                f"quant=fp8, avail mem={gib(mem['after_loads'])} GB, mem usage={gib(mem['draft_usage'])} GB.")
    load_seconds = time.monotonic() - load_t0

    kv_t0 = time.monotonic()
    spelling = "DSv4" if run.build == "old" else "DSV4"
    full_token = (f"{gib(mem['full_token'] * BYTES_PER_FULL_TOKEN)} GB" if run.build == "old"
                  else str(mem["full_token"]))
    run.log(f"{spelling} memory calculation: bytes_per_full_token={BYTES_PER_FULL_TOKEN:.2f}, "
            f"available_bytes={gib(mem['available_bytes'])} GB, c128_state_fixed=0.00 GB, "
            f"swa_fixed={gib(mem['swa_fixed'])} GB, full_token={full_token}")
    if mem["full_token"] < PAGE_SIZE:
        raise Fatal("Not enough memory. Please try to increase --mem-fraction-static. "
                    f"(available_bytes={gib(mem['available_bytes'])} GB)")
    run.log(pool_line(run, mem["full_token"], mem))
    if mem["clamped"]:
        run.log(f"\x1b[33mWARNING: max_total_tokens={mem['requested']} is larger than the profiled value "
                f"{mem['full_token']}. Use the profiled value instead.\x1b[0m")
    run.pace(PHASE["kv"])
    run.log(pool_line(run, mem["allocated"], mem))
    run.log(f"KV Cache is allocated. #tokens: {mem['allocated']}, full: {gib(mem['allocated'] * BYTES_PER_FULL_TOKEN)} "
            f"GB, swa: {gib(mem['swa_fixed'])} GB")
    run.log(f"Memory pool end. avail mem={gib(mem['pool_end'])} GB")
    kv_seconds = time.monotonic() - kv_t0
    run.pace(PHASE["workspace"])
    print_verify_adapters()

    graph_seconds = capture_pass(run, "target", mem, autotune)
    graph_seconds += capture_pass(run, "draft", mem, autotune)
    run.pace(PHASE["scheduler_ready"])
    if args.rank == 0:
        if sps_table_line():
            run.log(sps_table_line())
        run.log(folded_sampling_line(mem))
        run.log(f"max_total_num_tokens={mem['allocated']}, chunked_prefill_size={args.chunked_prefill_size}, "
                f"max_prefill_tokens={MAX_PREFILL_TOKENS}, max_running_requests={args.max_running_requests}, "
                f"context_len={CONTEXT_LEN}, available_gpu_mem={gib(mem['after'])} GB")
        if run.build != "old":
            run.log(f"Engine startup timings (s): load_weight={load_seconds:.2f}, "
                    f"kv_cache_allocation={kv_seconds:.2f}, "
                    f"scheduler_e2e={time.monotonic() - t_start:.2f}, cuda_graph={graph_seconds:.2f}, "
                    f"autotune={autotune.seconds:.2f}")
    return {"packed": packed_all, "rows": rows, "mem": mem}


def print_fatal(run, exc: Exception) -> None:
    """A scheduler exception as SGLang logs it (one record: prefix on the first line only)."""
    run.log("Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3015, '
            'in run_scheduler_process\n'
            "    scheduler = Scheduler(\n"
            "                ^^^^^^^^^^\n"
            '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 312, in __init__\n'
            "    self.tp_worker = TpModelWorker(\n"
            "                     ^^^^^^^^^^^^^^\n"
            '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 402, in initialize\n'
            "    self.init_memory_pool(\n"
            f"{getattr(exc, 'kind', 'RuntimeError')}: {exc}")
    log_main("Received sigquit from a child process. It usually means the child failed.")
