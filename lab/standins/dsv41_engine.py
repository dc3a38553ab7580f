#!/usr/bin/env python3
"""LAB STAND-IN for the DeepSeek-V4.1-Flash SGLang engine (TP3). Not the product; lab hosts only.

Started by the lab ``docker`` stand-in for images ``dsv41-sglang:*`` as
``python3 /usr/local/lib/dsv41-lab/dsv41_engine.py ARGS...`` with env = the container's ``-e``
variables (+ PATH, HOME) + ``LAB_CONTAINER_NAME`` + ``LAB_MOUNTS`` (JSON {container_dst: host_src}).
Python 3.11 stdlib only; it never imports the repository's module_utils (independent re-implementation).
Every figure it prints or serves is LAB OUTPUT, not a fleet measurement.

Arguments (passed by the launcher stand-in ``start.sh``; unknown ones are ignored)::

  --role head|worker --rank R --tp-size T --ep-size E --model-path PATH --port 8888
  --dspark-block-size K --max-running-requests M --chunked-prefill-size C
  --max-total-tokens P --mem-fraction-static F [--moe-runner-backend B] [--dist-init-addr HOST:PORT]
  [--served-model-name NAME]  (default deepseek-v4.1-flash)

Lab knobs: environment variables of the engine process. Any ``LAB_*`` key may also be set in a host-side
file, ``/etc/dsv41-lab/engine.env`` (``KEY=VALUE`` lines, ``#`` comments; path: ``LAB_ENGINE_ENV_FILE``),
so tests can turn them on without changing the launcher; the environment wins over the file.
  LAB_ENGINE_BUILD=new|old  ``old``: an older engine build's formats (``server_args=ServerArgs(...)``,
                           ``DSv4`` spelling, Engram lines with ``cache_budget=`` and no ``packed=``, the
                           older load/capture/decode wording; see OLD BUILD below). Default ``new``.
  LAB_ENGINE_BOOT_SECONDS=<n>  spread the whole boot (marker to ``Ready``) over about n seconds, in the
                           proportions of a real ~767 s boot (load_weight ~616 s); wins over FAST.
                           Unset: about 2 s (the lab's normal pacing).
  LAB_ENGINE_FAST=1        no boot pacing at all (unit tests)
  LAB_ENGINE_SPEED=<f>     divide every request-path sleep by f (tests use a big factor)
  LAB_ENGINE_LOG_REQUESTS=1  echo each chat request into the log as ``--log-requests`` does
                           (``[ts] Receive: obj=ChatCompletionRequest(...)``, one line, repr-quoted)
  LAB_IMAGE_ROOT=<dir>     the container image's rootfs (set by the docker stand-in). An adapter (autotune_keep
                           and the seven local ones) takes effect only if its switch is on AND
                           <dir>/sgl-workspace/adapter/<name>.py exists AND that directory's sitecustomize.py
                           reaches install_<name>(...) in this environment (its finder inserted: DSV41_SOURCE
                           set; the call's gates hold); otherwise the switch is silently ignored.
                           Unset: the switch alone decides (tests).
  LAB_ENGINE_DRIFT=<sym>   with the retention adapter armed: its hook symbol is "gone" -> boot fails
  LAB_ENGINE_DRIFT_FILE    (default /etc/dsv41-lab/engine_drift) first word = <sym>, same effect
  LAB_ENGINE_FAULT=<f>[,<f>]  failures the experiment stages must catch (each acts only when the switch it
                           is about took effect, so the baseline and the restored fleet stay healthy):
                           fold_race   folded fence armed: greedy answers differ on repeat and under concurrency
                                       (the race the fence should close is still there)
                           nonfinite   wo_a_w8 armed: ``Detected errors during sampling! NaN in the logits.`` on
                                       rank 0 per request and the answer degenerates into ``!`` tokens
                           prefetch_mismatch  prefetch CHECK armed: the periodic CHECK line reports [2, 0]
                           oom_at_boot any adapter other than autotune_keep armed: the target-graph capture
                                       dies of ``torch.OutOfMemoryError: CUDA out of memory`` (exit 1)
                           g4_not_taken wo_a_w8 armed, lines printed, but the profile trace shows no fp8 wo_a
                                       kernel (the small-row path never taken)
                           sampler_shift  draft_tau (folded) or block_verify armed: sampled answers draw the
                                       first third of the vocabulary twice as often (a shifted distribution)
                           mixed_greedy block_verify armed: a greedy request served while a sampled one runs
                                       commits other tokens (mixed batches break greedy answers)
                           tau_untempered  draft_tau armed on a folded proposal: speculative acceptance and its
                                       residual use the untempered draft distribution while the proposal was drawn
                                       at temperature T * tau, so committed tokens drift from the distribution the
                                       logprobs report (the proposal_distribution check's case)
                           cap_dead_rows  verify_cap armed: a step commits its dead verify rows too (the draft's
                                       unverified guesses), so greedy answers change and more tokens are committed
                                       per step than without the cap (the capped_block check's case)
                           rank_length_mismatch  the last worker boots with block size 3 whatever it is given (4
                                       when given 3): a rank that disagrees on the speculative length
                           bridge_draft_dropped  wo_a_w8 with DROP in bridge mode releases the draft's bf16 wo_a
                                       too and never says it kept it (the line the bridge-mode DROP is judged by)
                           answer_drift  any experimental adapter armed: the greedy answer to one prompt in
                                       four commits other words than the baseline's (the quality check's case)
                           graded_wrong  any experimental adapter armed: every answer to a graded code, JSON or
                                       math task is subtly wrong (the graded_tasks check's case)
                           needle_miss  any experimental adapter armed: a needle question whose prompt is longer
                                       than LAB_ENGINE_NEEDLE_REACH tokens (default 50000) is answered without it
                           drm_fallback  engram_drm armed (DSV41_ENGRAM_DRM_NODE set, the ported adapter in the
                                       image) with a cache: the DRM allocation fails and the layer falls back
                                       to anonymous memory (the line the DRM stage must catch)
                           mxfp4_fallback  EP_SIZE 1: the last rank's expert GEMMs leave the MXFP4 path (its MoE
                                       line says quant=bf16, dequantized weights), as a kernel set without the
                                       768-wide slice would; the other ranks stay on MXFP4 (stage I's EP1 case)
  LAB_ENGINE_SMALL_ROW_KERNEL=1  the engine has the small-row kernel (as the canary's kernel module gives it; an
                           image whose wo_a_w8.py carries the G=4 dispatch has it without the knob). Without it, as
                           on today's fleet image, wo_a_w8 arms its einsum bridge and says so; with DROP it keeps
                           the draft's wo_a on bf16 and says that too (SPEC section 3)
  LAB_ENGINE_STATS_SECONDS=<s>  period of the prefetch CHECK line in the lab (default DSV41_STATS_SECONDS, else
                           60, divided by LAB_ENGINE_SPEED)
  LAB_ENGINE_STREAM_ERROR_EVERY=<n>  every n-th chat request (counted from 1 since the boot) fails after its
                           stream started: about half its tokens, then ``data: {"error": {"message": ...,
                           "type": "ServiceUnavailableError", "param": null, "code": 503}}`` and ``data: [DONE]``
                           (no finish chunk, no usage); not streamed: HTTP 503 with the error object
  LAB_ENGINE_ABORT_EVERY=<n>  every n-th chat request is aborted gracefully after about half its tokens: a
                           chunk with ``finish_reason: "abort"``, then the usage chunk (tokens so far) and
                           ``[DONE]``; not streamed: 200 with ``finish_reason: "abort"`` and usage
                           (both knobs: 0 or unset is off; a request both would hit gets the error)
  LAB_ENGINE_SPEC_USAGE=1  a newer build's usage: ``completion_tokens_details`` with the speculative counts
                           ``accepted_prediction_tokens`` (draft tokens committed) and
                           ``rejected_prediction_tokens`` (draft tokens proposed and refused; lab names)

Streams (as the real engine): Python logging lines go to STDERR with the prefix
``[YYYY-MM-DD HH:MM:SS TP{r} EP{r}] `` (scheduler) or ``[YYYY-MM-DD HH:MM:SS] `` (main process, before the
scheduler starts); ``print()`` lines (adapters ``[name] ...``, ``Ready: API on port P``) go to STDOUT with no
prefix; tqdm bars and fatal Engram errors go to STDERR with no prefix. Times are UTC. When the engine
switches from one stream to the other it waits (up to 2 s) until the reader has drained the previous pipe,
so the docker stand-in's per-line timestamps keep the order the lines were written in (a lab detail).

Boot of rank r (new build; * = rank 0 only, H = head only; E = stderr, O = stdout):
  E [ts] server_args={'model_path': ..., 'max_total_tokens': P, 'page_size': 256, 'nnodes': T, 'node_rank': r,
        'tp_size': T, 'api_key': '[REDACTED]', 'speculative_algorithm': 'DSPARK',
        'speculative_num_draft_tokens': K+1, 'speculative_dspark_block_size': K, 'ep_size': E, ...}
        (boot marker: repr of a dict of ~500 ServerArgs fields, about 17.1 KB (the real head's: 17,130 bytes),
        nested dicts and lists; over docker's 16 KiB message limit, so its json-file log keeps it as two
        records, the first without a newline, and ``docker logs -t`` stamps the second part inside the line)
  E [ts] Using default HuggingFace chat template with detected content format: string          (H)
  E Init torch distributed begin. / sglang is using nccl==2.27.7 (*) / Init torch distributed ends. mem usage=
  O [autotune_keep] armed                         (retention adapter armed; a drifted symbol fails here)
  E Load weight begin. avail mem=X GB
  E DSV41 Engram prefetch ARMED: rows fetched on a side stream after the hasher[ (CHECK mode: ...)]   (prefetch)
  E Exact {OFFLOAD_MODE} Engram layer=L rank=r rows=[lo,hi) cache=C.CGiB (S slots, W-way, P.P% of owned rows)
        scales=0.0GiB io_threads=96 packed=True|False          (layers 1, 14; OFFLOAD_MODE default nvme)
  O [engram_layer_budget] per-layer Engram cache budgets: layer 1 G GiB, layer 14 G GiB (DSV41_CACHE_GIB not used)
        (the ported per-layer budget adapter, DSV41_CACHE_LAYER_GIB set; lab wording)
  O [engram_drm] layer 14 rank r cache on NODE: G GiB DRM-backed (keys, metadata and staging in ordinary memory:
        M MiB)                       (the ported DRM adapter with DSV41_ENGRAM_DRM_NODE set; lab wording)
  E MoE expert GEMM: backend=B, quant=mxfp4, ep_size=E, experts_per_rank=all|1/T, intermediate_per_rank=768|2304
        (of 2304)                    (every rank; lab wording: the b12x MoE path the fleet runs prints no such
                                      line the SPEC quotes; quant=bf16 on a rank that fell off MXFP4)
  E DSV41 TP padding: attention heads 64->96 (32 per rank), wo_a groups 8->12 (4 per rank), vocab 129280->129408
        (43136 per rank)             (every rank at TP3; lab wording of the local TP3 padding)
  O [wo_a_w8] fp8 twins for 43 wo_a weights, 0 left on bf16 (+ mid path / released lines with MID / DROP)
  E Load weight end. elapsed=S s, type=DeepseekV4ForCausalLM, quant=fp8, avail mem=X GB, mem usage=Y GB.
  E Load weight begin. avail mem=X GB   (draft)
  E DSV41 TP padding (draft): experts 128->129 (43 per rank), vocab 129280->129408 (43136 per rank)   (TP3; lab)
  O [draft_head_fp8] armed / [draft_head_fp8] fp8 twin of the draft LM head (43136, 5120)
  E Load weight end. elapsed=S s, type=DeepseekV4ForCausalLMNextN, quant=fp8, avail mem=X GB, mem usage=Y GB.
  E DSV4 memory calculation: bytes_per_full_token=1670.75, available_bytes=A GB, c128_state_fixed=0.00 GB,
        swa_fixed=W GB, full_token=N
  E DSV4 pool sizes: full=N, swa=.., c4=.., c128=.., c4_state=.., c128_state=0        (profiled)
  E WARNING: max_total_tokens=P is larger than the profiled value N. Use the profiled value instead.
        (yellow; only when P > N)
  E DSV4 pool sizes: full=M, swa=.., ...                                               (allocated: the last)
  E KV Cache is allocated. #tokens: M, full: F GB, swa: W GB
  E Memory pool end. avail mem=X GB
  O [draft_tau] draft temperature xT / [block_verify] armed: ... / [verify_cap] armed (conf:..): ...
  E Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=K+1, bs=[1, .., M], avail mem=X GB
  E Capturing batches (bs=M avail_mem=X GB):   0%|          | 0/M [00:00<?, ?it/s]\\r<redraw>\\x1b[A
        glued (same physical line) to the next logging line of the autotune pass:
  E   [ts TP0 EP0] FlashInfer autotune: per-rank caches disagree, discarding them and tuning from scratch so
        all ranks agree on the tactics.                  (*, stock engine, a cache file existed at boot)
  E   Running FlashInfer autotune with cache: /root/.cache/sglang/flashinfer/autotune/0.6.18/sm121/<hash>/
        rank_tp{r}_pp0_dp0.json          (stock, or the adapter without a matching sidecar)
  E   FlashInfer autotune completed.
  O   [autotune_keep] reused <hash>/rank_tp{r}_pp0_dp0.json | [autotune_keep] tuned and saved <hash>/<file>
  E \\rCapturing batches (bs=.. ):  25%|██▌       | 1/M [..] ... 100%|██████████| M/M [..]     (redraws, newline)
  O [verify_cap] remap captured into the verify graph for M=.. / [verify_cap] confidence present|MISSING
  O [folded_fence] folded DSpark results cloned off the persistent verify buffers
  E Capture target verify CUDA graph end. elapsed=S s, mem usage=U GB, avail mem=X GB.
  E Capture draft verify CUDA graph begin. ... / the same bar + autotune pass / ... end. ...
  E DSPARK_SPS_TABLE=<path> not found; staying on the verify-all schedule   (rank 0; DSPARK_SPS_TABLE set and
                                                  no table at that container path; "loaded: ..." when there is)
  E DSpark draft proposal (greedy only) folded into the draft cuda graph.  or (greedy + sampling) or the AUTO
        "DSpark folded sampling disabled: ..." line                                      (*)
  E max_total_num_tokens=M, chunked_prefill_size=C, max_prefill_tokens=16384, max_running_requests=R,
        context_len=1048576, available_gpu_mem=X GB                                      (*)
  E Engine startup timings (s): load_weight=.., kv_cache_allocation=.., scheduler_e2e=.., cuda_graph=..,
        autotune=..                                                                      (*)
  E [ts] INFO:     Started server process [1] / Waiting for application startup. / Application startup
        complete. / Uvicorn running on http://0.0.0.0:P (Press CTRL+C to quit)
        (every rank: workers run SGLang's dummy health server on the same port)
  E [ts] INFO:     127.0.0.1:N - "GET /model_info HTTP/1.1" 200 OK / Prefill batch, ... / "POST /generate"
        / [ts] The server is fired up and ready to roll!                                 (H)
  O Ready: API on port P                                                                 (H)
Prefetch CHECK (every rank, with DSV41_ENGRAM_PREFETCH=1 and DSV41_ENGRAM_PREFETCH_CHECK=1 in effect, from
  the end of the boot, every stats period): E ``[ts TPr EPr] DSV41 Engram prefetch CHECK: gathers differing
  from the synchronous path per layer = [0, 0]`` (lab: every rank counts as having data for both layers).
Profiling (head): POST /start_profile -> 200 ``Start profiling.``; POST /stop_profile -> 200 and, as SGLang's
  profiler does on every TP rank, a trace ``<SGLANG_TORCH_PROFILER_DIR or /tmp>/<ts>-TP-<r>.trace.json`` on
  each rank's own host (rank 0 at once; a worker within one report period, about 2 s, when the head's
  rendezvous reply tells it a profile ended) whose ``traceEvents`` name the kernels that ran: with wo_a_w8
  in effect ``wo_a_fp8_gemv_g4 (target)`` / ``wo_a_fp8_gemv_g4 (draft)`` (``wo_a_fp8_mid`` with MID), without
  it ``wo_a_bf16_gemv``; each with a stream and a duration: the Engram gather on the compute stream, or on
  a side stream with only a 150 us wait left when the prefetch is in effect on packed shards.
Serving (head, per request): E [ts] Receive: obj=... (LAB_ENGINE_LOG_REQUESTS), E Prefill batch, ...,
  E [ts] INFO:     127.0.0.1:N - "POST /v1/chat/completions HTTP/1.1" 200 OK,
  E Decode batch, #running-req: 1, #full token: N, full token usage: 0.00, #swa token: N, swa token usage: 0.00,
        accept len: 3.08, accept rate: 0.41, cuda graph: True, gen throughput (token/s): 3.12, #queue-req: 0
  E Engram layer=L lookups=N hit_rate=H% reads=N cache=0.0GiB(4-way) scales=0.0GiB threads=96 packed=X (H: the row
        cache filling from 0 after the boot, row_cache_hit_rate; 0.0 without a cache)
SIGTERM: E [ts] Received sigterm=15, shutting down. (head: + INFO:     Shutting down / Finished server process)

Fatal (exit codes as the container would report them):
  Engram shard present but unusable -> E (no prefix) ``Engram retrieval failed: packed Engram shard has no
    header (errno=61)`` (shorter than the 48 header bytes) / ``... has no header (errno=0)`` (bad magic) /
    ``... does not match this rank's range; re-run the pack step (errno=0)`` (layer, lo, hi, N or row bytes
    differ) / ``... is truncated (errno=0)`` (shorter than 4096 + (hi-lo)*264); exit 134 (abort). No file is
    named. A longer file or non-zero header padding is accepted, as the real engine does.
  Other boot errors (no checkpoint index, not enough memory, a drifted adapter symbol, the port taken) ->
    E ``[ts TP.. EP..] Scheduler hit an exception: Traceback (most recent call last):`` + frames +
    ``RuntimeError: <message>`` (e.g. ``RuntimeError: DSV41_AUTOTUNE_KEEP: <sym> is gone; engine drifted``,
    ``RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. ...``), then
    ``[ts] Received sigquit from a child process. It usually means the child failed.``; exit 1.

OLD BUILD (LAB_ENGINE_BUILD=old): marker ``server_args=ServerArgs(model_path='...', ..., api_key='***', ...)``
  (over 16 KiB too: no Engram fields, flat speculative_dspark_* fields, upstream's older switches);
  ``Exact nvme Engram layer=L rank=r rows=[lo,hi) cache_budget=C.CGiB ways=W io_threads=96`` (no packed=) and
  periodic lines without ``scales=``/``packed=``; ``DSv4 memory calculation: ..., full_token=F GB``;
  ``DSv4 pool sizes: full=N, swa=.., c128=..``; ``Load weight end. type=DeepseekV4ForCausalLM,
  dtype=torch.bfloat16, avail mem=X GB, mem usage=Y GB.``; ``Capture cuda graph begin. This can take up to
  several minutes. avail mem=X GB`` + ``Capture cuda graph bs [1, 2, 3, 4]`` + ``Capture cuda graph end. Time
  elapsed: S s. mem usage=U GB. avail mem=X GB.`` (and ``Capture draft cuda graph ...``); ``Decode batch.
  #running-req: 1, #token: N, token usage: 0.00, cuda graph: True, gen throughput (token/s): T, #queue-req: 0``;
  ``Prefill batch. ...``; no ``Engine startup timings``. Everything else as the new build.

Engram: N rows per layer (1, 14) from the checkpoint index + safetensors headers at --model-path; rank r owns
  [N*r//tp, N*(r+1)//tp). Packed shard ``engram-l{L}-r{r}of{tp}.bin`` in DSV41_PACKED_DIR (default /engram):
  missing -> packed=False; header magic/layer/lo/hi/N/264 match and long enough -> packed=True; else fatal.

Memory model (bytes; printed "GB" = bytes / 2**30, as the engine prints; deterministic):
  TOTAL = 120e9 (what the GPU reports); reserve = TOTAL * (1 - F)
  weights: target 94.00 GiB + DSV41_CACHE_GIB GiB (Engram row cache; with the per-layer port, the sum of
           DSV41_CACHE_LAYER_GIB instead, plus the DRM layer's keys/metadata (16 B a slot) and 32 MiB staging in
           ordinary memory) + 96 MiB with EP_SIZE 1 (per-slice MXFP4 scales and metadata of every expert's
           768-wide slice) + 688 MiB (DSV41_WO_A_W8 twins)
           - 1312 MiB (DSV41_WO_A_W8_DROP: 41 bf16 copies of 32 MiB released); draft 2.61 GiB
           + 210.6 MiB (DSV41_DRAFT_HEAD_FP8); SGLANG_DSPARK_FOLDED_SAMPLING=2: 96 MiB static buffers
  Load weight begin (rank r) = KV_BASE + 0.05 * TOTAL + 94.00 GiB + 2.61 GiB + RANK_EXTRA[r]
        (KV_BASE = 1,119,600,000; RANK_EXTRA = 0 / 0.38 / 0.21 GiB: rank 0 has the least free memory;
        LAB_ENGINE_RANK_EXTRA_GIB="a,b,c" sets them, e.g. a worker with the least)
  available_bytes = (the least rank's memory after both loads) - reserve   (the min over ranks: identical
        everywhere); the folded-sampling AUTO decision reads the least rank's memory after capture too
        report settings (F 0.95, no adapters): 1,119,600,000 B = "1.04 GB"
  swa = M * 3328 tokens; swa_fixed = swa * 22400 B (M 4: 0.28 GB); c128_state_fixed = 0
  full_token = floor((available_bytes - swa_fixed) / 1670.75 / 256) * 256        (whole pages of 256)
        report: 491,520. full_token < 256 -> "Not enough memory" (fatal).
  allocated = min(full_token, floor(P / 256) * 256)  (P = --max-total-tokens; unset: full_token)
        report: P 750,000 -> 491,520 (clamped, with the WARNING); P 3,000,000 with room -> 2,999,808 (rounding)
  c4 = allocated // 4, c128 = allocated // 128, c4_state = swa // 4, c128_state = 0
  Memory pool end = after loads - allocated * 1670.75 - swa_fixed; capture begin = that - 1.70 GiB (workspace;
  + 160 MiB with EP_SIZE 1: more, narrower grouped GEMMs);
  target graphs use 0.145 GiB * M, draft graphs 0.03 GiB * M; available_gpu_mem = after the draft graphs.
  Folded sampling (rank 0): unset = AUTO: folded when available_gpu_mem >= 0.75 GB, else the "disabled" line.

Autotune cache ``/root/.cache/sglang/flashinfer/autotune/0.6.18/sm121/<hash>/rank_tp{r}_pp0_dp0.json``
  (<hash> = sha256("block=K;mrr=M;chunk=C;tp=T")[:16]); two passes (target, draft graphs) on the same file.
  Stock: a cache file present at boot -> rank 0 warns "per-rank caches disagree" on each pass; every rank
  retunes and rewrites (content has the rank). Retention adapter armed: sidecar ``<cache>.launch`` = sha256 over
  argv and the sorted DSV41_/SGLANG_/DSPARK_/FLASHINFER_ env; matching at boot -> "reused" (file untouched)
  on both passes, else tune + save on both passes.

HTTP (head; bound right after the marker so /health can answer while booting):
  /health, /health_generate: 503 empty body while booting, 200 empty body once ready (workers: 200).
  /v1/models: the served model name. /v1/chat/completions: ``Authorization: Bearer <API_KEY>`` or
  ``x-api-key``; a bad key -> 401 ``{"error":"Unauthorized"}``; bad JSON -> 400
  ``{"object":"error","message":...,"type":"BadRequestError","param":null,"code":400}``.
  A request the engine refuses before generating (``max_tokens``/``max_completion_tokens`` not a
  non-negative integer, ``temperature`` < 0, ``top_p`` outside (0, 1], ``top_k`` 0 or below -1) -> 400 with the
  same error object; 503 with it (``ServiceUnavailableError``) while booting.
  ``max_completion_tokens`` overrides ``max_tokens``; ``chat_template_kwargs: {"thinking": true}`` puts the
  first 256 tokens in ``reasoning_content`` (usage ``reasoning_tokens``); without it no reasoning is split
  out. Streaming: the role chunk (``{"role":"assistant","content":""}``) is sent together with the first
  text (same write), one SSE message per speculative step, a finish chunk, a usage chunk with
  ``choices: []`` when ``stream_options.include_usage`` (never elsewhere), ``data: [DONE]``.
  Errors after the stream started and aborts: see LAB_ENGINE_STREAM_ERROR_EVERY / LAB_ENGINE_ABORT_EVERY.

Latency model of the chat endpoint (real sleeps, all divided by LAB_ENGINE_SPEED):
  TTFT            = 60 ms + 0.05 ms * prompt_tokens
  step_ms         = base + 4 * (K - 3)                    base 98 if every known rank is packed else 120
                    - 2 if DSV41_VERIFY_CAP (dead rows routed to the anchor's experts)
                    - 4 if DSV41_WO_A_W8, - 2 if DSV41_ENGRAM_PREFETCH (packed only), - 1 if DSV41_DRAFT_HEAD_FP8,
                    + 15 if DSV41_ENGRAM_PREFETCH_CHECK (validation mode), - 3 with EP_SIZE 1 (EP1),
                    - 4 * min(DSV41_CACHE_GIB, 0.5) with a row cache (- 0.5 more at 16 ways, cache only)
                    times 0.988 while the GPU clocks are unlocked (the lab nvidia-smi's state: no 2200 MHz cap)
                    times (1 + 0.12 * (active_requests - 1))   (aggregate improves, per-stream falls)
                    times a +-3% jitter
  committed/step  = 1 + accepted, accepted ~ Binomial(K, a); a = 0.55 prose, 0.70 code-like prompts
                    ('def ' or 'code' in the prompt); sampled rows accept 0.12 less; on sampled rows
                    DSV41_BLOCK_VERIFY adds +0.06 to a and DSV41_DRAFT_TAU +0.03, the latter only while the
                    proposal is folded (it does nothing otherwise). DSV41_VERIFY_CAP keeps the same draws and
                    limits the accepted ones to the step's live rows (fixed N: N; conf:T: each next row stays
                    live with probability 1 - 2T, from a generator of its own), so it only removes acceptances
  Concurrency is capped at --max-running-requests with a semaphore (extra requests queue).
  "Known ranks": workers started with --dist-init-addr report their packed state to the head's rendezvous
  port (a lab detail); without it the head uses its own state.
  ``gen throughput`` of the Decode batch line is the batch's: this request's rate times #running-req.
  Output text: words drawn from a hash of the messages (temperature 0: deterministic; > 0 with a ``seed``:
  deterministic per (messages, seed, sampler path: forced folding, draft temperature and block verification each
  draw another stream from the same distribution); > 0 without one: random). A sampled word follows the target's
  distribution at its position (logits seeded by the messages and the position, the greedy word on top), under
  the request's temperature, then ``top_k``, then ``top_p``; with draft temperature on a folded proposal it is
  committed by speculative sampling from the draft at T * tau (the draft's logits: the target's plus noise).
  ``logprobs: true`` (+ ``top_logprobs: N``) adds ``logprobs.content`` [{token, logprob, bytes, top_logprobs}]
  to the response's choice, and streamed to each chunk with the tokens it carries: the tempered distribution
  before top-k and top-p, as SGLang reports it (a fixed answer: needle, graded task, reports each token certain);
  completion length = min(max tokens, natural), natural = 64 + hash % 961 (+256 with thinking).
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import math
import os
import random
import re
import signal
import socket
import socketserver
import stat
import struct
import sys
import termios
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# labstate.py (the stand-ins' shared state and GPU model) sits next to this file in the repository and in
# /usr/local/lib/dsv41-lab on a lab host.
for _lib in (os.path.dirname(os.path.realpath(__file__)), "/usr/local/lib/dsv41-lab"):
    if os.path.isfile(os.path.join(_lib, "labstate.py")):
        if _lib not in sys.path:
            sys.path.insert(0, _lib)
        break
import labstate  # noqa: E402

MAGIC = 0x31344E4531565344
ROW_BYTES = 264
HEADER_BYTES = 4096
ENGRAM_LAYERS = (1, 14)
BYTES_PER_FULL_TOKEN = 1670.75
PAGE_SIZE = 256
MIB = 2 ** 20
GIB = 2 ** 30
TOTAL_BYTES = 120e9                 # the GPU's total as torch reports it (unified memory)
KV_BASE = 1_119_600_000             # available_bytes of the report state (F 0.95, no adapters): "1.04 GB"
TARGET_WEIGHTS = 94.00 * GIB
DRAFT_WEIGHTS = 2.61 * GIB
RANK_EXTRA = (0.0, 0.38 * GIB, 0.21 * GIB)   # more free memory on ranks 1, 2 than on the head
SWA_TOKENS_PER_REQUEST = 3328
SWA_BYTES_PER_TOKEN = 22400
WORKSPACE = 1.70 * GIB              # allocated between the pool and the first capture
# EP1 (lab figures; the report refuses any bound): every rank holds a 768-wide slice of every expert, whose
# MXFP4 scales and metadata cost a little more than whole experts, and more, narrower grouped GEMMs need more
# workspace
EP1_WEIGHTS_EXTRA = 96 * MIB
EP1_WORKSPACE_EXTRA = 160 * MIB
MOE_INTERMEDIATE = 2304             # every expert's intermediate width (the report)
DRM_SLOT_META_BYTES = 16            # keys and metadata of one DRM-backed cache slot, in ordinary memory
DRM_STAGING = 32 * MIB              # the DRM layer's staging buffer, in ordinary memory
TARGET_GRAPH_PER_BS = 0.145 * GIB
DRAFT_GRAPH_PER_BS = 0.03 * GIB
FOLDED_AUTO_MIN = 0.75 * GIB        # AUTO folds sampling when at least this much is free after capture
FLASHINFER_VERSION = "0.6.18"
AUTOTUNE_ROOT = f"/root/.cache/sglang/flashinfer/autotune/{FLASHINFER_VERSION}/sm121"
IMAGE_ADAPTER_DIR = "sgl-workspace/adapter"  # under LAB_IMAGE_ROOT: the adapters the image was built with
FINGERPRINT_PREFIXES = ("DSV41_", "SGLANG_", "DSPARK_", "FLASHINFER_")
CONTEXT_LEN = 1048576
MAX_PREFILL_TOKENS = 16384
SERVED_MODEL_NAME = "deepseek-v4.1-flash"
KNOB_FILE = "/etc/dsv41-lab/engine.env"
DISAGREE = ("FlashInfer autotune: per-rank caches disagree, discarding them and tuning from scratch so all "
            "ranks agree on the tactics.")
WO_A_WEIGHTS = 43                   # one wo_a per layer
WO_A_DROP_KEPT = 2                  # bf16 copies DROP keeps (dequantized copy not bit-identical)
WO_A_COPY_MIB = 32

# The real boot's timeline (seconds from the marker; load_weight 616.34 s, Ready at about 767 s). The lab
# sleeps each phase's share of LAB_ENGINE_BOOT_SECONDS (default DEFAULT_BOOT_SECONDS) in these proportions.
REAL_BOOT_SECONDS = 767.0
DEFAULT_BOOT_SECONDS = 2.0
PHASE = {"tokenizer": 2.0, "scheduler_start": 9.0, "dist": 9.0, "load_start": 8.0, "engram_layer": 6.0,
         "load_target": 521.76, "load_draft": 74.58, "kv": 6.68, "workspace": 3.0, "bar": 1.0,
         "autotune_target": 42.0, "capture_target": 13.48, "autotune_draft": 20.0, "capture_draft": 9.5,
         "scheduler_ready": 1.0, "warmup": 33.0}

RANK = 0
EP_TAG = True
BUILD = "new"
PACE_SCALE = DEFAULT_BOOT_SECONDS / REAL_BOOT_SECONDS


# The lab nvidia-smi's state (lab/standins/nvidia-smi): the GPU's clock lock as the last -lgc/-rgc left it, and
# the lab GPU's clock and heat model (labstate.busy_gpu), which the step time follows.
NVIDIA_STATE_DIR = os.environ.get("LAB_NVIDIA_STATE_DIR", "/var/lib/lab-nvidia")
NVIDIA_STATE = os.path.join(NVIDIA_STATE_DIR, "state.json")
FLEET_LOCK = {"min": 0, "max": 2200}    # the fleet's lock: unreadable state reads as locked
STARTED = time.monotonic()              # the GPU is busy from the engine's start (as nvidia-smi counts it)
_CLOCKS = {"at": 0.0, "lock": FLEET_LOCK, "tau": None}


def _read_clocks() -> None:
    """Refresh the lock and the thermal knob at most once a second (every decode step asks for them)."""
    now = time.monotonic()
    if now - _CLOCKS["at"] >= 1.0:
        try:
            with open(NVIDIA_STATE) as handle:
                _CLOCKS["lock"] = json.load(handle).get("locked_clocks")
        except (OSError, ValueError):
            _CLOCKS["lock"] = FLEET_LOCK
        _CLOCKS["tau"] = labstate.thermal_seconds(NVIDIA_STATE_DIR)
        _CLOCKS["at"] = now


def clock_lock() -> dict | None:
    """The GPU's clock lock now ({"min", "max"}; None when unlocked)."""
    _read_clocks()
    return _CLOCKS["lock"]


def clock_step_factor() -> float:
    """Step time relative to the 2200 MHz lock, from the SM clock the lab GPU runs at now: 0.988 at the
    unlocked boost of 2418 MHz (the downstream's cap cost was 0.7-1.5%), in proportion between, so a GPU the
    thermal model has throttled back to 2268 MHz gains only 0.37%."""
    lock = clock_lock()
    sm, _temp, _throttled = labstate.busy_gpu(lock["max"] if lock else None, time.monotonic() - STARTED,
                                              _CLOCKS["tau"])
    return 1.0 - 0.012 * (sm - FLEET_LOCK["max"]) / float(labstate.BOOST_SM - FLEET_LOCK["max"])


class Fatal(Exception):
    """A boot error the real engine dies of with a Python traceback (RuntimeError, exit 1)."""
    kind = "RuntimeError"


class OutOfMemory(Fatal):
    """torch's out-of-memory error during a graph capture (the lab's oom_at_boot fault)."""
    kind = "torch.OutOfMemoryError"


class EngramFatal(Exception):
    """A packed shard the engine's C++ reader rejects: one unprefixed stderr line, then abort (exit 134)."""

    def __init__(self, detail: str, errno: int = 0):
        super().__init__(detail)
        self.detail = detail
        self.errno = errno


# --------------------------------------------------------------------------- knobs

def load_knob_file() -> None:
    """LAB_* keys of the host-side knob file, unless the environment already sets them."""
    path = os.environ.get("LAB_ENGINE_ENV_FILE", KNOB_FILE)
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
    return os.environ.get(name, "0").strip() not in ("", "0", "false", "False", "off")


def env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


def configure_pacing() -> None:
    global PACE_SCALE
    boot_seconds = env_float("LAB_ENGINE_BOOT_SECONDS", 0.0)
    if boot_seconds > 0:
        PACE_SCALE = boot_seconds / REAL_BOOT_SECONDS
    elif flag("LAB_ENGINE_FAST"):
        PACE_SCALE = 0.0
    else:
        PACE_SCALE = DEFAULT_BOOT_SECONDS / REAL_BOOT_SECONDS


def pace(real_seconds: float) -> None:
    """Sleep this phase's share of the lab boot (real_seconds is its length on the real fleet)."""
    if PACE_SCALE > 0 and real_seconds > 0:
        time.sleep(real_seconds * PACE_SCALE)


def speed_sleep(seconds: float) -> None:
    factor = env_float("LAB_ENGINE_SPEED", 1.0)
    if factor <= 0:
        factor = 1.0
    if seconds > 0:
        time.sleep(seconds / factor)


# --------------------------------------------------------------------------- output (streams)

class Output:
    """Writes whole lines to fd 1 (print) or fd 2 (logging, tqdm, fatal) in one write() each.

    Switching streams waits until the pipe written before is drained (FIONREAD == 0), so a reader that
    timestamps what it reads (the docker stand-in) sees the lines in the order they were written."""

    def __init__(self):
        self.lock = threading.RLock()  # re-entrant: the SIGTERM handler may interrupt a write
        self.last = None

    @staticmethod
    def _same_file(a: int, b: int) -> bool:
        try:
            sa, sb = os.fstat(a), os.fstat(b)
        except OSError:
            return True
        return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)

    def _drain(self, fd: int, other: int) -> None:
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode) or self._same_file(fd, other):
                return
        except OSError:
            return
        buf = bytearray(4)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                fcntl.ioctl(fd, termios.FIONREAD, buf, True)
            except OSError:
                return
            if int.from_bytes(buf, sys.byteorder) == 0:
                return
            time.sleep(0.001)

    def emit(self, fd: int, text: str) -> None:
        data = text.encode("utf-8", "replace")
        with self.lock:
            if self.last is not None and self.last != fd:
                self._drain(self.last, fd)
            view = memoryview(data)
            while view:
                try:
                    n = os.write(fd, view)
                except InterruptedError:
                    continue
                except OSError:
                    return
                view = view[n:]
            self.last = fd


OUT = Output()


def _stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())


def log(msg: str) -> None:
    """A scheduler logging record: stderr, ``[ts TPr EPr] `` prefix."""
    tag = f" TP{RANK} EP{RANK}" if EP_TAG else f" TP{RANK}"
    OUT.emit(2, f"[{_stamp()}{tag}] {msg}\n")


def log_main(msg: str) -> None:
    """A logging record of the main process (before the scheduler starts): stderr, ``[ts] `` prefix."""
    OUT.emit(2, f"[{_stamp()}] {msg}\n")


def say(msg: str) -> None:
    """print(msg, flush=True): stdout, no prefix."""
    OUT.emit(1, msg + "\n")


def raw_err(text: str) -> None:
    """Unprefixed stderr output (tqdm, C++ errors); no newline is added."""
    OUT.emit(2, text)


def gib(n: float) -> str:
    return f"{n / GIB:.2f}"


# --------------------------------------------------------------------------- container paths

def load_mounts() -> dict:
    try:
        mounts = json.loads(os.environ.get("LAB_MOUNTS", "") or "{}")
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


# --------------------------------------------------------------------------- checkpoint / engram

def read_safetensors_header(path: str) -> dict:
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise Fatal(f"{path} is not a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > 100 * MIB:
            raise Fatal(f"{path} has an implausible safetensors header length {length}")
        data = fh.read(length)
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise Fatal(f"{path}: bad safetensors header ({exc})") from None


def engram_rows(model_path_container: str, mounts: dict) -> dict:
    """Return {layer: N} from the checkpoint (index + safetensors headers)."""
    model_dir = host_path(model_path_container, mounts)
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    weight_map = {}
    if os.path.exists(index_path):
        with open(index_path, encoding="utf-8") as fh:
            weight_map = json.load(fh).get("weight_map", {})
    elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
        weight_map = None
    else:
        raise Fatal(f"no checkpoint index at {model_path_container}/model.safetensors.index.json")
    headers: dict = {}
    result = {}
    for layer in ENGRAM_LAYERS:
        wname = f"layers.{layer}.engram.embed.weight"
        sname = f"layers.{layer}.engram.embed.scale"
        fname = "model.safetensors" if weight_map is None else weight_map.get(wname)
        if not fname:
            raise Fatal(f"Engram tensor {wname} not found in checkpoint index")
        if fname not in headers:
            headers[fname] = read_safetensors_header(os.path.join(model_dir, fname))
        hdr = headers[fname]
        w = hdr.get(wname)
        s = hdr.get(sname)
        if not w or not s:
            raise Fatal(f"Engram tensors for layer {layer} missing in {fname}")
        if (w.get("dtype") != "F8_E4M3" or len(w.get("shape", [])) != 2 or w["shape"][1] != 256
                or s.get("dtype") != "F8_E8M0" or list(s.get("shape", [])) != [w["shape"][0], 8]):
            raise Fatal(f"Engram tensors for layer {layer} have unexpected dtype/shape "
                        f"({w.get('dtype')} {w.get('shape')}, {s.get('dtype')} {s.get('shape')})")
        result[layer] = int(w["shape"][0])
    return result


def check_shard(host_file: str, layer: int, lo: int, hi: int, n: int) -> bool:
    """False if missing; True if the engine would use it; EngramFatal as the engine's reader words it."""
    if not os.path.exists(host_file):
        return False
    size = os.path.getsize(host_file)
    with open(host_file, "rb") as fh:
        head = fh.read(48)
    if len(head) < 48:
        raise EngramFatal("packed Engram shard has no header", errno=61)  # ENODATA: short read
    fields = struct.unpack_from("<6Q", head, 0)
    if fields[0] != MAGIC:
        raise EngramFatal("packed Engram shard has no header")
    if fields != (MAGIC, layer, lo, hi, n, ROW_BYTES):
        raise EngramFatal("packed Engram shard does not match this rank's range; re-run the pack step")
    if size < HEADER_BYTES + (hi - lo) * ROW_BYTES:
        raise EngramFatal("packed Engram shard is truncated")
    return True


# --------------------------------------------------------------------------- adapters in the image

def _registered_adapters(sitecustomize: str) -> set:
    """Adapters the image's import hook installs in THIS container's environment (empty if unreadable).

    The hook (the real family's shape) inserts its finder into ``sys.meta_path`` only under its
    condition (``DSV41_SOURCE`` set) and calls ``install_<name>(module)`` in the loader of a wrapped
    engine module, under conditions on the environment (a switch gate, ``DSV41_LAUNCHER == "tp4"``), or
    none. Each condition that reads only ``os`` is evaluated here as the hook would evaluate it; the
    loader's dispatch on the module name (and anything else) counts as true."""
    import ast
    try:
        with open(sitecustomize, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=sitecustomize)
    except (OSError, SyntaxError, ValueError):
        return set()
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def holds(node):
        child, cur = node, parents.get(node)
        while cur is not None:
            if isinstance(cur, ast.If) and child is not cur.test \
                    and not {n.id for n in ast.walk(cur.test) if isinstance(n, ast.Name)} - {"os"}:
                try:
                    ok = bool(eval(compile(ast.Expression(cur.test), "<gate>", "eval"),  # noqa: S307 - lab hook
                                   {"os": os, "__builtins__": {}}))
                except Exception:  # noqa: BLE001 - a condition the stand-in cannot evaluate: not installed
                    ok = False
                if ok != (child in cur.body):
                    return False
            child, cur = cur, parents.get(cur)
        return True

    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    if not any(n.func.attr in ("insert", "append") and isinstance(n.func.value, ast.Attribute)
               and n.func.value.attr == "meta_path" and holds(n) for n in calls):
        return set()
    return {n.func.id[len("install_"):] for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.startswith("install_")
            and holds(n)}


_IMAGE_CACHE: dict = {}


def registered_adapters() -> set | None:
    """THE one place that decides which adapters the image carries: names whose
    ``$LAB_IMAGE_ROOT/sgl-workspace/adapter/<name>.py`` exists AND that the image's ``sitecustomize.py``
    installs in this container's environment (see :func:`_registered_adapters`). None without LAB_IMAGE_ROOT (an engine started outside
    the docker stand-in): every adapter counts as present."""
    root = os.environ.get("LAB_IMAGE_ROOT")
    if root is None:
        return None
    if "registered" not in _IMAGE_CACHE:
        adir = os.path.join(root, IMAGE_ADAPTER_DIR)
        names = _registered_adapters(os.path.join(adir, "sitecustomize.py"))
        _IMAGE_CACHE["registered"] = {n for n in names if os.path.isfile(os.path.join(adir, f"{n}.py"))}
    return _IMAGE_CACHE["registered"]


def adapter_in_image(name: str) -> bool:
    """The adapter NAME is in the container's image and registered in its import hook."""
    names = registered_adapters()
    return names is None or name in names


def faults() -> set:
    """LAB_ENGINE_FAULT as a set of fault names (comma or space separated)."""
    return {f for f in os.environ.get("LAB_ENGINE_FAULT", "").replace(",", " ").split() if f}


def fault(name: str) -> bool:
    """Fault NAME is set; each fault acts only where the switch it concerns took effect (callers check)."""
    return name in faults()


def prefetch_check_on() -> bool:
    return adapter_on("engram_prefetch") and os.environ.get("DSV41_ENGRAM_PREFETCH_CHECK", "0").strip() == "1"


ARM_ADAPTERS = ("folded_fence", "wo_a_w8", "engram_prefetch", "draft_head_fp8", "draft_tau", "block_verify",
                "verify_cap")


def tau_value() -> float:
    return env_float("DSV41_DRAFT_TAU", 1.0)


def adapter_on(name: str) -> bool:
    """The switch of adapter NAME is on (each switch's own rule) and the adapter is in the image."""
    if name == "engram_prefetch":
        on = os.environ.get("DSV41_ENGRAM_PREFETCH", "0").strip().lower() in ("1", "on", "true")
    elif name == "draft_tau":
        on = abs(tau_value() - 1.0) > 1e-9
    elif name == "engram_drm":
        on = bool(os.environ.get("DSV41_ENGRAM_DRM_NODE", "").strip())
    elif name == "engram_layer_budget":
        on = bool(os.environ.get("DSV41_CACHE_LAYER_GIB", "").strip())
    else:
        switch = {"autotune_keep": "DSV41_AUTOTUNE_KEEP", "folded_fence": "DSV41_FOLDED_FENCE",
                  "wo_a_w8": "DSV41_WO_A_W8", "draft_head_fp8": "DSV41_DRAFT_HEAD_FP8",
                  "block_verify": "DSV41_BLOCK_VERIFY", "verify_cap": "DSV41_VERIFY_CAP"}[name]
        on = flag(switch)
    return on and adapter_in_image(name)


def autotune_keep_armed() -> bool:
    """DSV41_AUTOTUNE_KEEP non-zero and the retention adapter in the image; otherwise the switch is
    silently ignored, as the real engine ignores a switch whose adapter the image does not carry."""
    return adapter_on("autotune_keep")


def rank_extra() -> tuple:
    """Each rank's extra free memory (bytes): RANK_EXTRA, or the knob LAB_ENGINE_RANK_EXTRA_GIB="0,0.38,-1.5"
    (GiB per rank, comma-separated) for a lab where another rank has the least free memory."""
    raw = os.environ.get("LAB_ENGINE_RANK_EXTRA_GIB", "").strip()
    if raw:
        try:
            return tuple(float(v) * GIB for v in raw.split(","))
        except ValueError:
            pass
    return RANK_EXTRA


# --------------------------------------------------------------------------- Engram caches
def layer_budgets() -> dict:
    """Each Engram layer's row-cache budget (GiB). Stock, and with the downstream DRM adapter: DSV41_CACHE_GIB
    split evenly over the two layers (raising it gives the other layer an ordinary cache too). With the ported
    per-layer adapter (``engram_layer_budget`` in the image, DSV41_CACHE_LAYER_GIB set, e.g. ``1:0,14:0.25``):
    each named layer its own budget, a layer not named 0, DSV41_CACHE_GIB not used."""
    if adapter_on("engram_layer_budget"):
        out = {layer: 0.0 for layer in ENGRAM_LAYERS}
        for item in os.environ.get("DSV41_CACHE_LAYER_GIB", "").replace(" ", "").split(","):
            layer, _, value = item.partition(":")
            try:
                if int(layer) in out:
                    out[int(layer)] = max(0.0, float(value))
            except ValueError:
                continue
        return out
    share = env_float("DSV41_CACHE_GIB", 0.0) / len(ENGRAM_LAYERS)
    return {layer: share for layer in ENGRAM_LAYERS}


def cache_slots(gib_budget: float, ways: int) -> int:
    return int(gib_budget * GIB // ROW_BYTES // ways * ways) if gib_budget > 0 else 0


def drm_ordinary_bytes() -> float:
    """Ordinary memory the DRM-backed layer still takes (the report: keys/metadata and staging stay in ordinary
    memory): 16 B a slot plus a 32 MiB staging buffer; 0 without a DRM-backed cache (a fallback's rows are in the
    budget already)."""
    share = layer_budgets()[ENGRAM_LAYERS[-1]]
    if not adapter_on("engram_drm") or share <= 0 or fault("drm_fallback"):
        return 0.0
    ways = int(env_float("DSV41_CACHE_WAYS", 4)) or 4
    return cache_slots(share, ways) * DRM_SLOT_META_BYTES + DRM_STAGING


def layer_budget_line() -> str | None:
    """The ported per-layer budget adapter's line (lab wording: no port exists yet)."""
    if not adapter_on("engram_layer_budget"):
        return None
    b = layer_budgets()
    return ("[engram_layer_budget] per-layer Engram cache budgets: "
            + ", ".join(f"layer {layer} {b[layer]:.2f} GiB" for layer in ENGRAM_LAYERS)
            + " (DSV41_CACHE_GIB not used)")


# --------------------------------------------------------------------------- MoE and TP padding
def moe_line(args) -> str:
    """How the expert GEMMs run on this rank (lab wording: the SPEC quotes no MoE line of the b12x path). EP1
    tensor-shards every expert's 2304-wide intermediate over the TP ranks (768 at TP3); EP=TP keeps whole experts.
    Fault ``mxfp4_fallback`` (EP1 only): the last rank runs dequantized bf16 weights instead of MXFP4."""
    ep1 = args.ep_size == 1 and args.tp_size > 1
    width = MOE_INTERMEDIATE // args.tp_size if ep1 else MOE_INTERMEDIATE
    quant = "bf16" if ep1 and fault("mxfp4_fallback") and args.rank == args.tp_size - 1 else "mxfp4"
    experts = "all" if args.ep_size == 1 else f"1/{args.ep_size}"
    return (f"MoE expert GEMM: backend={args.moe_runner_backend}, quant={quant}, ep_size={args.ep_size}, "
            f"experts_per_rank={experts}, intermediate_per_rank={width} (of {MOE_INTERMEDIATE})")


def tp_pad_off() -> bool:
    return os.environ.get("DSV41_TP_PAD", "").strip().lower() in ("0", "off", "false")


def padding_line(args, model: str) -> str | None:
    """The local TP3 padding (lab wording): 64 attention heads to 96 (32 a rank, rank 2's all zero), 8 wo_a
    groups to 12 (G=4), the vocabulary to 129408 rows (43136 a rank), the draft's 128 experts to 129. Nothing is
    padded at other TP sizes (64, 8, 128 and the vocab divide by 4); DSV41_TP_PAD=0 turns it off."""
    if args.tp_size != 3:
        return None
    if tp_pad_off():
        return "DSV41 TP padding: off (DSV41_TP_PAD=0)" if model == "target" else None
    if model == "target":
        return ("DSV41 TP padding: attention heads 64->96 (32 per rank), wo_a groups 8->12 (4 per rank), "
                "vocab 129280->129408 (43136 per rank)")
    return "DSV41 TP padding (draft): experts 128->129 (43 per rank), vocab 129280->129408 (43136 per rank)"


# --------------------------------------------------------------------------- memory model

def memory_model(frac: float, pin: int | None, rank: int = 0, max_running: int = 4, tp: int = 3,
                 ep: int | None = None) -> dict:
    """Every memory figure of one boot (bytes; see the module docstring). The KV pool and the folded-sampling
    AUTO decision follow the rank with the least free memory (every rank agrees on both, as the engine does)."""
    extra = rank_extra()
    least = min(extra[r % len(extra)] for r in range(max(tp, 1)))
    # TARGET_WEIGHTS is a TP3 rank's share; a TP4 rank holds a quarter of the same weights instead of a third
    target = TARGET_WEIGHTS * 3 / max(tp, 1) + sum(layer_budgets().values()) * GIB + drm_ordinary_bytes()
    ep1 = ep == 1 and tp > 1
    if ep1:
        target += EP1_WEIGHTS_EXTRA
    w8 = adapter_on("wo_a_w8")
    if w8:
        target += 688 * MIB
        if flag("DSV41_WO_A_W8_DROP"):
            target -= (WO_A_WEIGHTS - WO_A_DROP_KEPT) * WO_A_COPY_MIB * MIB
    draft = DRAFT_WEIGHTS + (210.6 * MIB if adapter_on("draft_head_fp8") else 0.0)
    static = 96 * MIB if os.environ.get("SGLANG_DSPARK_FOLDED_SAMPLING", "").strip() == "2" else 0.0
    reserve_095 = TOTAL_BYTES * 0.05
    base_begin = KV_BASE + reserve_095 + TARGET_WEIGHTS + DRAFT_WEIGHTS

    def after_loads(r: int) -> float:
        return base_begin + extra[r % len(extra)] - target - draft - static

    # the rank with the least free memory (rank 0 by default) minus the reserve TOTAL * (1 - F); 0.01 of F is
    # 1.2e9 bytes
    available = (KV_BASE + least + round((frac - 0.95) * 100, 6) * 1.2e9
                 - (target - TARGET_WEIGHTS) - (draft - DRAFT_WEIGHTS) - static)
    swa = max_running * SWA_TOKENS_PER_REQUEST
    swa_fixed = swa * SWA_BYTES_PER_TOKEN
    full_token = math.floor((available - swa_fixed) / BYTES_PER_FULL_TOKEN / PAGE_SIZE) * PAGE_SIZE
    full_token = max(full_token, 0) if available > swa_fixed else 0
    requested = (pin // PAGE_SIZE) * PAGE_SIZE if pin else None
    allocated = min(full_token, requested) if requested is not None else full_token
    begin = base_begin + extra[rank % len(extra)]
    after_target = begin - target
    after = after_loads(rank)
    pool_bytes = allocated * BYTES_PER_FULL_TOKEN + swa_fixed
    pool_end = after - pool_bytes
    capture_begin = pool_end - WORKSPACE - (EP1_WORKSPACE_EXTRA if ep1 else 0.0)
    target_graphs = TARGET_GRAPH_PER_BS * max_running
    draft_graphs = DRAFT_GRAPH_PER_BS * max_running
    after_capture = capture_begin - target_graphs - draft_graphs
    return {
        "load_begin": begin, "target_usage": target, "after_target": after_target,
        "draft_usage": draft + static, "after_loads": after,
        "available_bytes": available, "swa": swa, "swa_fixed": swa_fixed, "full_token": full_token,
        "requested": pin, "allocated": allocated, "pool": allocated, "clamped": bool(pin) and pin > full_token,
        "pool_end": pool_end, "capture_target_begin": capture_begin, "target_graphs": target_graphs,
        "capture_target_end": capture_begin - target_graphs, "draft_graphs": draft_graphs,
        "capture_draft_end": after_capture,
        "after": after_capture,
        # what the rank with the least free memory keeps after its captures: the AUTO folded-sampling decision
        "after_min": after_capture + least - extra[rank % len(extra)],
    }


def pool_line(full: int, mem: dict) -> str:
    if BUILD == "old":
        return f"DSv4 pool sizes: full={full}, swa={full // 8}, c128={full // 128}"
    return (f"DSV4 pool sizes: full={full}, swa={mem['swa']}, c4={full // 4}, c128={full // 128}, "
            f"c4_state={mem['swa'] // 4}, c128_state=0")


# --------------------------------------------------------------------------- autotune

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
    drift = os.environ.get("LAB_ENGINE_DRIFT", "").strip()
    drift_file = os.environ.get("LAB_ENGINE_DRIFT_FILE", "/etc/dsv41-lab/engine_drift")
    if not drift and os.path.isfile(drift_file):
        with open(drift_file, encoding="utf-8") as fh:
            words = fh.read().split()
        drift = words[0] if words else ""
    return drift


class Autotune:
    """The two autotune passes of one boot (target graphs, draft graphs) on this rank's cache file."""

    def __init__(self, args, mounts: dict):
        self.args = args
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
        log(f"Running FlashInfer autotune with cache: {self.cfile}")
        pace(PHASE[f"autotune_{pass_name}"])
        payload = {"lab": True, "rank": self.args.rank, "pass": pass_name, "tuned_at": time.time(),
                   "tactics": {f"moe_gemm_m{m}": (self.args.rank * 31 + m) % 11 for m in (1, 2, 4, 8, 16)}}
        write_atomic(self.host_file, json.dumps(payload, indent=1, sort_keys=True) + "\n")
        log("FlashInfer autotune completed.")
        self.seconds += time.monotonic() - t0

    def run(self, pass_name: str) -> None:
        if self.keep:
            if self.valid:
                say(f"[autotune_keep] reused {self.short}")
            else:
                self._tune(pass_name)
                write_atomic(self.sidecar, self.fp + "\n")
                say(f"[autotune_keep] tuned and saved {self.short}")
        else:
            if self.existed and self.args.rank == 0:
                log(DISAGREE)
            self._tune(pass_name)


# --------------------------------------------------------------------------- tqdm

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


# --------------------------------------------------------------------------- server_args

def server_args_fields(args) -> dict:
    """The engine's ServerArgs as a dict in field order (about 500 fields: upstream SGLang's, with upstream
    defaults, plus the build's Engram and DSPARK ones). The new build's marker is about 17.1 KB with the
    report's settings, like the real head's 17,130 bytes; the old build's ServerArgs(...) form over 16 KiB."""
    k = args.dspark_block_size
    api = "[REDACTED]" if os.environ.get("API_KEY") else None
    if BUILD == "old" and api:
        api = "***"
    offload = os.environ.get("OFFLOAD_MODE", "nvme") or "nvme"
    bs = list(range(1, args.max_running_requests + 1))
    f: dict = {}
    f.update(model_path=args.model_path, tokenizer_path=args.model_path, tokenizer_mode="auto",
             tokenizer_worker_num=1, skip_tokenizer_init=False, load_format="auto",
             model_loader_extra_config={"enable_multithread_load": True, "num_threads": 16},
             trust_remote_code=True, context_length=None, is_embedding=False, enable_multimodal=None,
             revision=None, model_impl="auto", host=args.host, port=args.port, skip_server_warmup=False,
             warmups=None, nccl_port=None, dtype="auto", quantization="fp8", quantization_param_path=None,
             kv_cache_dtype="auto", enable_fp32_lm_head=False, modelopt_quant=None,
             modelopt_checkpoint_restore_path=None, modelopt_checkpoint_save_path=None,
             mem_fraction_static=args.mem_fraction_static, max_running_requests=args.max_running_requests,
             max_queued_requests=None, max_total_tokens=args.max_total_tokens,
             chunked_prefill_size=args.chunked_prefill_size, max_prefill_tokens=MAX_PREFILL_TOKENS,
             schedule_policy="fcfs", enable_priority_scheduling=False, schedule_low_priority_values_first=False,
             priority_scheduling_preemption_threshold=10, schedule_conservativeness=1.0, page_size=PAGE_SIZE,
             hybrid_kvcache_ratio=None, swa_full_tokens_ratio=0.8, disable_hybrid_swa_memory=False,
             radix_eviction_policy="lru", device="cuda", elastic_ep_backend=None, mooncake_ib_device=None,
             tp_size=args.tp_size, pp_size=1, pp_max_micro_batch_size=None, stream_interval=1,
             stream_output=False, random_seed=1040372163, constrained_json_whitespace_pattern=None,
             constrained_json_disable_any_whitespace=False, watchdog_timeout=300, dist_timeout=None,
             download_dir=None, base_gpu_id=0, gpu_id_step=1, sleep_on_idle=False, log_level="info",
             log_level_http=None, log_requests=flag("LAB_ENGINE_LOG_REQUESTS"), log_requests_level=2,
             crash_dump_folder=None, show_time_cost=False, enable_metrics=False,
             enable_metrics_for_all_schedulers=False, tokenizer_metrics_custom_labels_header="x-custom-labels",
             tokenizer_metrics_allowed_custom_labels=None, bucket_time_to_first_token=None,
             bucket_inter_token_latency=None, bucket_e2e_request_latency=None, collect_tokens_histogram=False,
             prompt_tokens_buckets=None, generation_tokens_buckets=None, gc_warning_threshold_secs=0.0,
             decode_log_interval=40, enable_request_time_stats_logging=False, kv_events_config=None,
             enable_trace=False, otlp_traces_endpoint="localhost:4317", api_key=api,
             served_model_name=args.served_model_name, weight_version="default", chat_template=None,
             completion_template=None, file_storage_path="sglang_storage", enable_cache_report=False,
             reasoning_parser="deepseek-v3", tool_call_parser="deepseekv31", tool_server=None,
             sampling_defaults="model", dp_size=1, load_balance_method="round_robin",
             load_watch_interval=0.1, prefill_round_robin_balance=False,
             dist_init_addr=args.dist_init_addr or None, nnodes=args.tp_size, node_rank=args.rank,
             json_model_override_args="{}", preferred_sampling_params=None, enable_lora=None,
             max_lora_rank=None, lora_target_modules=None, lora_paths=None, max_loaded_loras=None,
             max_loras_per_batch=8, lora_eviction_policy="lru", lora_backend="triton",
             max_lora_chunk_size=16, attention_backend="flashinfer", decode_attention_backend=None,
             prefill_attention_backend=None, sampling_backend="flashinfer", grammar_backend="xgrammar",
             mm_attention_backend=None, nsa_prefill_backend="flashmla_sparse", nsa_decode_backend="fa3",
             speculative_algorithm="DSPARK", speculative_draft_model_path=args.model_path,
             speculative_draft_model_revision=None, speculative_draft_load_format=None,
             speculative_num_steps=1, speculative_eagle_topk=1, speculative_num_draft_tokens=k + 1,
             speculative_dspark_block_size=k, speculative_accept_threshold_single=1.0,
             speculative_accept_threshold_acc=1.0, speculative_token_map=None,
             speculative_attention_mode="prefill", speculative_moe_runner_backend=None,
             speculative_ngram_min_match_window_size=1, speculative_ngram_max_match_window_size=12,
             speculative_ngram_min_bfs_breadth=1, speculative_ngram_max_bfs_breadth=10,
             speculative_ngram_match_type="BFS", speculative_ngram_branch_length=18,
             speculative_ngram_capacity=10000000, ep_size=args.ep_size, moe_a2a_backend="none",
             moe_runner_backend=args.moe_runner_backend, flashinfer_mxfp4_moe_precision="default",
             enable_flashinfer_allreduce_fusion=False, deepep_mode="auto", ep_num_redundant_experts=0,
             ep_dispatch_algorithm="static", init_expert_location="trivial", enable_eplb=False,
             eplb_algorithm="auto", eplb_rebalance_num_iterations=1000, eplb_rebalance_layers_per_chunk=None,
             eplb_min_rebalancing_utilization_threshold=1.0, expert_distribution_recorder_mode=None,
             expert_distribution_recorder_buffer_size=1000, enable_expert_distribution_metrics=False,
             deepep_config=None, moe_dense_tp_size=None, max_mamba_cache_size=None, mamba_ssm_dtype="float32",
             mamba_full_memory_ratio=0.9, enable_hierarchical_cache=False, hicache_ratio=2.0, hicache_size=0,
             hicache_write_policy="write_through", hicache_io_backend="kernel", hicache_mem_layout="layer_first",
             hicache_storage_backend=None, hicache_storage_prefetch_policy="best_effort",
             hicache_storage_backend_extra_config=None, enable_lmcache=False, kt_amx_weight_path=None,
             kt_amx_method=None, kt_cpuinfer=None, kt_threadpool_count=None, kt_num_gpu_experts=None,
             enable_double_sparsity=False, ds_channel_config_path=None, ds_heavy_channel_num=32,
             ds_heavy_token_num=256, ds_heavy_channel_type="qk", ds_sparse_decode_threshold=4096,
             cpu_offload_gb=0, offload_group_size=-1, offload_num_in_group=1, offload_prefetch_step=1,
             offload_mode="cpu", engram_offload_mode=offload, engram_io_threads=96,
             engram_packed_dir=os.environ.get("DSV41_PACKED_DIR", "/engram"),
             multi_item_scoring_delimiter=None, disable_radix_cache=False, cuda_graph_max_bs=bs[-1],
             cuda_graph_bs=bs, disable_cuda_graph=False, disable_cuda_graph_padding=False,
             enable_profile_cuda_graph=False, enable_cudagraph_gc=False, enable_nccl_nvls=False,
             enable_symm_mem=False, disable_flashinfer_cutlass_moe_fp4_allgather=False,
             enable_tokenizer_batch_encode=False, disable_outlines_disk_cache=False,
             disable_custom_all_reduce=False, enable_mscclpp=False, enable_torch_symm_mem=False,
             disable_overlap_schedule=False, enable_mixed_chunk=False, enable_dp_attention=False,
             enable_dp_lm_head=False, enable_two_batch_overlap=False, enable_single_batch_overlap=False,
             tbo_token_distribution_threshold=0.48, enable_torch_compile=False,
             enable_piecewise_cuda_graph=False, torch_compile_max_bs=32, piecewise_cuda_graph_max_tokens=4096,
             piecewise_cuda_graph_tokens=None, piecewise_cuda_graph_compiler="eager", torchao_config="",
             enable_nan_detection=False, enable_p2p_check=False, triton_attention_reduce_in_fp32=False,
             triton_attention_num_kv_splits=8, triton_attention_split_tile_size=None,
             num_continuous_decode_steps=1, delete_ckpt_after_loading=False, enable_memory_saver=False,
             enable_weights_cpu_backup=False, allow_auto_truncate=False, enable_custom_logit_processor=False,
             flashinfer_mla_disable_ragged=False, disable_shared_experts_fusion=False,
             disable_chunked_prefix_cache=False, disable_fast_image_processor=False,
             keep_mm_feature_on_device=False, enable_return_hidden_states=False, scheduler_recv_interval=1,
             numa_node=None, enable_deterministic_inference=False, rl_on_policy_target=None,
             enable_dynamic_batch_tokenizer=False, dynamic_batch_tokenizer_batch_size=32,
             dynamic_batch_tokenizer_batch_timeout=0.002, debug_tensor_dump_output_folder=None,
             debug_tensor_dump_layers=None, debug_tensor_dump_input_file=None, debug_tensor_dump_inject=False,
             disaggregation_mode="null", disaggregation_transfer_backend="mooncake",
             disaggregation_bootstrap_port=8998, disaggregation_decode_tp=None, disaggregation_decode_dp=None,
             disaggregation_prefill_pp=1, disaggregation_ib_device=None,
             disaggregation_decode_enable_offload_kvcache=False, num_reserved_decode_tokens=512,
             disaggregation_decode_polling_interval=1, custom_weight_loader=[], weight_loader_disable_mmap=False,
             remote_instance_weight_loader_seed_instance_ip=None,
             remote_instance_weight_loader_seed_instance_service_port=None,
             remote_instance_weight_loader_send_weights_group_ports=None, enable_pdmux=False,
             pdmux_config_path=None, sm_group_num=8, mm_max_concurrent_calls=32, mm_per_request_timeout=10.0,
             decrypted_config_file=None, decrypted_draft_config_file=None,
             dspark_config={"block_size": k, "folded_sampling": os.environ.get("SGLANG_DSPARK_FOLDED_SAMPLING")
                            or "auto", "verify_graph_bs": bs, "draft_graph_bs": bs},
             engram_layers=[1, 14], enable_engram_stats=True, engram_stats_interval_s=60.0)
    f.update(enable_broadcast_mm_inputs_process=False, mm_process_config={}, enable_prefix_mm_cache=False,
             enable_adaptive_dispatch_to_encoder=False, encoder_only=False, language_only=False,
             encoder_transfer_backend="zmq_to_scheduler", encoder_urls=[], enable_return_routed_experts=False,
             disable_piecewise_cuda_graph=True, enforce_piecewise_cuda_graph=False,
             enable_layerwise_nvtx_marker=False, enable_draft_weights_cpu_backup=False,
             enable_torch_compile_debug_mode=False, torch_compile_max_bs_draft=None,
             speculative_draft_attention_backend=None, speculative_draft_model_quantization="fp8",
             speculative_adaptive=False, speculative_adaptive_config=None, speculative_spec_v2=False,
             enable_spec_overlap=False, ngram_worker_num=1, hicache_storage_pass_prefix_keys=False,
             hierarchical_sparse_attention_extra_config=None, enable_hisparse=False,
             enable_fused_qk_norm_rope=False, enable_shared_experts_dp=False, enable_aiter_allreduce_fusion=False,
             enable_fused_moe_sum_all_reduce=False, disable_flashinfer_autotune=False,
             flashinfer_autotune_cache_dir="/root/.cache/sglang/flashinfer/autotune",
             enable_flashinfer_autotune_cache=True, moe_dense_tp_size_override=None, dsv4_swa_window=128,
             dsv4_index_topk=2048, dsv4_c4_ratio=4, dsv4_c128_ratio=128, dsv4_compress_state_dtype="bfloat16",
             dsv4_full_token_budget=None, dsv4_kv_layout={"full": "paged", "swa": "ring", "c4": "paged",
                                                          "c128": "paged"},
             enable_request_mem_report=False, enable_cache_report_per_rank=False, kv_cache_swap_space_gb=0.0,
             tokenizer_cache_dir=None, preferred_rope_scaling=None, override_generation_config=None,
             enable_generation_config_defaults=True, allowed_local_media_path="", max_mm_items_per_request=None,
             attn_cp_size=1, moe_dp_size=1, enable_nsa_prefill_context_parallel=False,
             nsa_prefill_cp_mode="in-seq-split", enable_fused_set_kv_buffer=True,
             enable_mis_fused_kernels=False, served_model_name_aliases=[], uvicorn_log_config=None,
             skip_tokenizer_warmup=False, warmup_thread_num=1, enable_http2=False, ssl_keyfile=None,
             ssl_certfile=None, ssl_ca_certs=None, ssl_keyfile_password=None, admin_api_key=None,
             enable_admin_endpoints=False, enable_score_api=False, enable_tokenize_api=True,
             stream_response_default_include_usage=False, incremental_streaming_output=True,
             enable_custom_all_reduce_for_draft=True, gpu_memory_utilization_report=False,
             cpu_weight_offload_layers=None, hicache_l3_prefetch_threshold=256)
    # fields of later upstream ServerArgs revisions the build carries (upstream defaults, as resolved at start)
    f.update(tokenizer_backend="huggingface", detokenizer_worker_num=1, model_config_parser="auto",
             fastapi_root_path="", grpc_mode=False, smg_grpc_mode=False, grpc_port=None, sidecar=None,
             sidecar_args=None, http2_max_concurrent_streams=200, enable_ssl_refresh=False,
             checkpoint_engine_wait_weights_before_ready=False, modelopt_export_path=None,
             quantize_and_serve=False, rl_quant_profile=None, enable_tf32_matmul=False,
             prefill_decode_interval=0, enable_dynamic_chunking=False, prefill_max_requests=None,
             disable_priority_preemption=False, default_priority_value=None, abort_on_priority_when_disabled=False,
             retraction_policy="length", enable_prefill_delayer=False, prefill_delayer_max_delay_passes=30,
             prefill_delayer_token_usage_low_watermark=None, prefill_delayer_forward_passes_buckets=None,
             prefill_delayer_wait_seconds_buckets=None, prefill_only_disable_kv_cache=False,
             enable_page_major_kv_layout=False, enable_unified_memory=False, pp_async_batch_depth=0,
             gated_launch_port=None, dcp_size=1, dwdp_size=1, dcp_comm_backend="ag_rs", dcp_replicate_q_proj=None,
             enable_prefill_cp=False, cp_strategy=None, enable_dsa_cache_layer_split=False,
             enable_prefill_context_parallel=False, prefill_cp_mode="in-seq-split", enable_cp_decode_attn_tp=False,
             enable_dp_attention_local_control_broadcast=False, enable_tp_lm_head_all_to_all=None,
             enable_attn_tp_input_scattered=False, enable_shared_experts_attn_tp=False,
             enable_dense_mlp_attn_tp=False, disable_attn_tp_gather=False, soft_watchdog_timeout=None,
             model_checksum=None, use_ray=False, custom_sigquit_handler=None, gc_threshold=None,
             log_requests_format="text", log_requests_target=None, uvicorn_access_log_exclude_prefixes=[],
             extra_metric_labels=None, smg_http_sidecar_port=None, enable_mfu_metrics=False,
             load_snapshot_publish_interval=15, enable_forward_pass_metrics=False, forward_pass_metrics_worker_id="",
             forward_pass_metrics_ipc_name=None, trace_modules="request", export_metrics_to_file=False,
             export_metrics_to_file_dir=None, stat_loggers=None, hf_chat_template_name=None,
             default_chat_template_kwargs=None, strip_thinking_cache=False, enable_strict_thinking=False,
             asr_max_buffer_seconds=60, asr_max_concurrent_sessions=32, batch_notify_size=16,
             enable_streaming_session=False, enable_session_radix_cache=False, enable_lora_overlap_loading=None,
             radix_cache_backend=None, fp8_gemm_runner_backend="auto", fp4_gemm_runner_backend="auto",
             bf16_gemm_backend="auto", dsv4_prefill_backend="auto", dsa_paged_mqa_logits_backend="auto",
             dsa_topk_backend="sgl-kernel",
             flashinfer_autotune_skip_ops=None, mamba_backend="triton", cuda_graph_config=None,
             cuda_graph_backend_decode=None, cuda_graph_backend_prefill=None, cuda_graph_max_bs_decode=None,
             cuda_graph_max_bs_prefill=None, cuda_graph_bs_decode=None, cuda_graph_bs_prefill=None,
             cuda_graph_tc_compiler=None, disable_prefill_cuda_graph=False, disable_decode_cuda_graph=False,
             debug_cuda_graph=False, speculative_moe_a2a_backend=None, enable_multi_layer_eagle=False,
             mamba_scheduler_strategy="no_buffer", mamba_track_interval=256, disable_hicache_numa_detect=False,
             kt_max_deferred_experts_per_token=None, dllm_algorithm=None,
             dllm_algorithm_config=None, disable_tokenizer_batch_decode=False,
             enable_precise_embedding_interpolation=False, crash_on_nan=False, debug_tensor_dump_prefill_only=False,
             disaggregation_decode_enable_fake_auto=False, remote_instance_weight_loader_backend="nccl",
             remote_instance_weight_loader_start_seed_via_transfer_engine=False, mm_enable_dp_encoder=False,
             limit_mm_data_per_request=None, forward_hooks=None, enable_deepseek_v4_fp4_indexer=False,
             pre_warm_nccl=False, enable_quant_communications=False,
             enforce_disable_flashinfer_allreduce_fusion=False, flashinfer_allreduce_fusion_backend=None,
             speculative_dflash_block_size=None, speculative_dspark_sps_table_path=None,
             speculative_dspark_confidence_sts_path=None,
             speculative_dspark_align_verify_tokens_to_graph_tier=False, speculative_use_rejection_sampling=False,
             speculative_dsa_topk_backend="sgl-kernel", speculative_draft_kv_cache_dtype=None,
             speculative_draft_window_size=None, speculative_skip_dp_mlp_sync=False,
             decoupled_spec_bind_endpoint=None, decoupled_spec_connect_endpoints=None, decoupled_spec_rank=None,
             decoupled_spec_role="null", spec_trace_dir=None, speculative_ngram_max_trie_depth=18,
             speculative_ngram_external_corpus_path=None, speculative_ngram_external_sam_budget=0,
             speculative_ngram_external_corpus_max_tokens=10000000, deepep_v2_mode="direct",
             deepep_dispatcher_output_dtype="auto", expert_balancedness_report_mode="off",
             enable_elastic_expert_backup=False, ep_join_mode=None, ep_join_rank_offset=0,
             elastic_ep_initial_size=None, max_ep_size=None, elastic_ep_scale_timeout=600,
             enforce_shared_experts_fusion=False, mamba_max_states_per_path=-1, mamba_radix_cache_strategy="auto",
             linear_attn_backend="triton", hicache_host_memory_mode="cache", enable_w4a4_mxfp4_megamoe=False,
             enable_waterfill=False, elastic_ep_rejoin=False, enable_mamba_cache_stochastic_rounding=False,
             mamba_cache_philox_rounds=0, enable_int8_mamba_checkpoint=False, int8_mamba_ckpt_size=None)
    return f


# An older build's ServerArgs: no Engram fields and no grouped dspark_config (its DSPARK settings are flat
# speculative_dspark_* fields), switches later folded into moe_runner_backend / moe_a2a_backend / attention_backend
# (upstream's deprecated fields), the piecewise CUDA graph token sizes resolved at start (upstream
# _generate_piecewise_cuda_graph_tokens, up to piecewise_cuda_graph_max_tokens) instead of left unset, and the
# capture sizes left at upstream's speculative default (cuda_graph_max_bs 160; the runner captures up to
# max_running_requests, as the Capture lines show).
OLD_BUILD_FIELDS = dict(enable_ep_moe=False, enable_deepep_moe=False, enable_flashinfer_moe=False,
                        enable_flashinfer_cutlass_moe=False, enable_flashinfer_trtllm_moe=False,
                        enable_triton_kernel_moe=False, enable_flashinfer_mxfp4_moe=False, enable_flashinfer_mla=False,
                        enable_flashmla=False, disable_mla=False, disable_jump_forward=False,
                        disable_regex_jump_forward=False, disable_disk_cache=False, disable_penalizer=False,
                        disable_nan_detection=False, disable_flashinfer=False, disable_flashinfer_sampling=False,
                        efficient_weight_load=False, disable_overlap_cg_plan=False, n_share_experts_fusion=0,
                        enable_llama4_multimodal=None, pdlb_url=None)
OLD_BUILD_DROPPED = ("dspark_config", "engram_offload_mode", "engram_io_threads", "engram_packed_dir", "engram_layers",
                     "enable_engram_stats", "engram_stats_interval_s", "rl_on_policy_target")


OLD_BUILD_GRAPH_MAX_BS = 160


def old_build_graph_bs(max_bs: int) -> list:
    """Upstream's default capture sizes with speculative decoding (the runner captures those <= max_running_requests)."""
    sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
    return [s for s in sizes if s <= max_bs]


def piecewise_tokens(max_tokens: int) -> list:
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(640, 4096 + 1, 128)) + list(range(4352, max_tokens + 1, 256)))
    return [s for s in sizes if s <= max_tokens]


def server_args_line(args) -> str:
    fields = server_args_fields(args)
    if BUILD == "old":
        dspark = fields["dspark_config"]
        for key in OLD_BUILD_DROPPED:
            fields.pop(key, None)
        for key in ("folded_sampling", "verify_graph_bs", "draft_graph_bs"):
            fields["speculative_dspark_" + key] = dspark[key]
        fields["piecewise_cuda_graph_tokens"] = piecewise_tokens(fields["piecewise_cuda_graph_max_tokens"])
        fields["cuda_graph_max_bs"] = OLD_BUILD_GRAPH_MAX_BS      # not clamped to max_running_requests
        fields["cuda_graph_bs"] = old_build_graph_bs(OLD_BUILD_GRAPH_MAX_BS)
        fields.update(OLD_BUILD_FIELDS)
        return "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"
    return "server_args=" + repr(fields)


# --------------------------------------------------------------------------- boot

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


def small_row_kernel() -> bool:
    """The engine has wo_a's small-row kernel: only the canary, whose W8 adapter carries the kernel module's
    G=4 dispatch (its wo_a_w8.py replaces DeepseekV4Attention.wo_a_forward), or the knob
    LAB_ENGINE_SMALL_ROW_KERNEL=1 (an engine started outside the docker stand-in). Today's fleet image has
    none: W8 runs through its einsum bridge (SPEC section 3)."""
    if flag("LAB_ENGINE_SMALL_ROW_KERNEL"):
        return True
    root = os.environ.get("LAB_IMAGE_ROOT")
    if root is None:
        return False
    if "small_row" not in _IMAGE_CACHE:
        try:
            with open(os.path.join(root, IMAGE_ADAPTER_DIR, "wo_a_w8.py"), encoding="utf-8", errors="replace") as fh:
                _IMAGE_CACHE["small_row"] = "DeepseekV4Attention.wo_a_forward =" in fh.read()
        except OSError:
            _IMAGE_CACHE["small_row"] = False
    return _IMAGE_CACHE["small_row"]


def wo_a_bridge() -> bool:
    """wo_a_w8 is armed and runs through the einsum bridge (no small-row kernel in this engine)."""
    return adapter_on("wo_a_w8") and not small_row_kernel()


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


def capture_pass(pass_name: str, args, mem: dict, autotune: Autotune) -> float:
    """One CUDA-graph capture with its autotune pass; returns the lab seconds spent capturing."""
    m = args.max_running_requests
    bs = list(range(1, m + 1))
    begin = mem["capture_target_begin"] if pass_name == "target" else mem["capture_target_end"]
    usage = mem["target_graphs"] if pass_name == "target" else mem["draft_graphs"]
    if BUILD == "old":
        what = "cuda graph" if pass_name == "target" else "draft cuda graph"
        log(f"Capture {what} begin. This can take up to several minutes. avail mem={gib(begin)} GB")
        log(f"Capture {what} bs {bs}")
    else:
        log(f"Capture {pass_name} verify CUDA graph begin. backend=full, num_tokens_per_req="
            f"{args.dspark_block_size + 1}, bs={bs}, avail mem={gib(begin)} GB")
    t0 = time.monotonic()
    order = list(reversed(bs))
    step = usage / len(order)

    def desc(i: int) -> str:
        return f"Capturing batches (bs={order[min(i, len(order) - 1)]} avail_mem={gib(begin - step * i)} GB)"

    # tqdm's first draw and a refresh; the logging records that follow land on the same physical line
    raw_err(tqdm_line(desc(0), 0, len(order), 0.0))
    pace(PHASE["bar"])
    raw_err("\r" + tqdm_line(desc(0), 0, len(order), time.monotonic() - t0) + "\x1b[A")
    autotune.run(pass_name)
    capture_t0 = time.monotonic()
    for i in range(1, len(order) + 1):
        pace(PHASE[f"capture_{pass_name}"] / len(order))
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
    if BUILD == "old":
        what = "cuda graph" if pass_name == "target" else "draft cuda graph"
        log(f"Capture {what} end. Time elapsed: {elapsed:.2f} s. mem usage={gib(usage)} GB. avail mem={gib(end)} GB.")
    else:
        log(f"Capture {pass_name} verify CUDA graph end. elapsed={elapsed:.2f} s, mem usage={gib(usage)} GB, "
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
    root = os.environ.get("LAB_IMAGE_ROOT")
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


def boot(args, t_start: float) -> dict:
    mounts = load_mounts()
    pace(PHASE["scheduler_start"])
    log("Init torch distributed begin.")
    pace(PHASE["dist"])
    if args.rank == 0:
        log("sglang is using nccl==2.27.7")
    log(f"Init torch distributed ends. mem usage={0.41 + 0.03 * (args.rank % 3):.2f} GB")
    autotune = Autotune(args, mounts)
    autotune.arm()

    mem = memory_model(args.mem_fraction_static, args.max_total_tokens, args.rank, args.max_running_requests,
                       args.tp_size, args.ep_size)
    load_t0 = time.monotonic()
    log(f"Load weight begin. avail mem={gib(mem['load_begin'])} GB")
    pace(PHASE["load_start"])
    rows = engram_rows(args.model_path, mounts)
    packed_dir = os.environ.get("DSV41_PACKED_DIR", "/engram").rstrip("/") or "/engram"
    offload = os.environ.get("OFFLOAD_MODE", "nvme").strip() or "nvme"
    budgets = layer_budgets()
    ways = int(env_float("DSV41_CACHE_WAYS", 4)) or 4
    if layer_budget_line():
        say(layer_budget_line())
    prefetch = adapter_on("engram_prefetch")
    if prefetch:
        log("DSV41 Engram prefetch ARMED: rows fetched on a side stream after the hasher"
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
        if BUILD == "old":
            log(f"Exact {offload} Engram layer={layer} rank={r} rows=[{lo},{hi}) cache_budget={cache:.1f}GiB "
                f"ways={ways} io_threads=96")
        else:
            log(f"Exact {offload} Engram layer={layer} rank={r} rows=[{lo},{hi}) cache={cache:.1f}GiB "
                f"({slots} slots, {ways}-way, {pct:.1f}% of owned rows) scales=0.0GiB io_threads=96 "
                f"packed={packed}")
        pace(PHASE["engram_layer"])
    drm_lines(args.rank)
    log(moe_line(args))
    if padding_line(args, "target"):
        log(padding_line(args, "target"))
    if prefetch and not packed_all:
        log("DSV41 Engram prefetch disabled after error: packed Engram shards are required "
            f"(DSV41_PACKED_DIR={packed_dir})")
    pace(PHASE["load_target"])
    print_load_adapters("target")
    if BUILD == "old":
        log(f"Load weight end. type=DeepseekV4ForCausalLM, dtype=torch.bfloat16, avail mem={gib(mem['after_target'])} "
            f"GB, mem usage={gib(mem['target_usage'])} GB.")
    else:
        log(f"Load weight end. elapsed={time.monotonic() - load_t0:.2f} s, type=DeepseekV4ForCausalLM, quant=fp8, "
            f"avail mem={gib(mem['after_target'])} GB, mem usage={gib(mem['target_usage'])} GB.")
    draft_t0 = time.monotonic()
    log(f"Load weight begin. avail mem={gib(mem['after_target'])} GB")
    pace(PHASE["load_draft"])
    if padding_line(args, "draft"):
        log(padding_line(args, "draft"))
    print_load_adapters("draft")
    if BUILD == "old":
        log(f"Load weight end. type=DeepseekV4ForCausalLMNextN, dtype=torch.bfloat16, avail mem="
            f"{gib(mem['after_loads'])} GB, mem usage={gib(mem['draft_usage'])} GB.")
    else:
        log(f"Load weight end. elapsed={time.monotonic() - draft_t0:.2f} s, type=DeepseekV4ForCausalLMNextN, "
            f"quant=fp8, avail mem={gib(mem['after_loads'])} GB, mem usage={gib(mem['draft_usage'])} GB.")
    load_seconds = time.monotonic() - load_t0

    kv_t0 = time.monotonic()
    spelling = "DSv4" if BUILD == "old" else "DSV4"
    full_token = (f"{gib(mem['full_token'] * BYTES_PER_FULL_TOKEN)} GB" if BUILD == "old"
                  else str(mem["full_token"]))
    log(f"{spelling} memory calculation: bytes_per_full_token={BYTES_PER_FULL_TOKEN:.2f}, "
        f"available_bytes={gib(mem['available_bytes'])} GB, c128_state_fixed=0.00 GB, "
        f"swa_fixed={gib(mem['swa_fixed'])} GB, full_token={full_token}")
    if mem["full_token"] < PAGE_SIZE:
        raise Fatal("Not enough memory. Please try to increase --mem-fraction-static. "
                    f"(available_bytes={gib(mem['available_bytes'])} GB)")
    log(pool_line(mem["full_token"], mem))
    if mem["clamped"]:
        log(f"\x1b[33mWARNING: max_total_tokens={mem['requested']} is larger than the profiled value "
            f"{mem['full_token']}. Use the profiled value instead.\x1b[0m")
    pace(PHASE["kv"])
    log(pool_line(mem["allocated"], mem))
    log(f"KV Cache is allocated. #tokens: {mem['allocated']}, full: {gib(mem['allocated'] * BYTES_PER_FULL_TOKEN)} "
        f"GB, swa: {gib(mem['swa_fixed'])} GB")
    log(f"Memory pool end. avail mem={gib(mem['pool_end'])} GB")
    kv_seconds = time.monotonic() - kv_t0
    pace(PHASE["workspace"])
    print_verify_adapters()

    graph_seconds = capture_pass("target", args, mem, autotune)
    graph_seconds += capture_pass("draft", args, mem, autotune)
    pace(PHASE["scheduler_ready"])
    if args.rank == 0:
        if sps_table_line():
            log(sps_table_line())
        log(folded_sampling_line(mem))
        log(f"max_total_num_tokens={mem['allocated']}, chunked_prefill_size={args.chunked_prefill_size}, "
            f"max_prefill_tokens={MAX_PREFILL_TOKENS}, max_running_requests={args.max_running_requests}, "
            f"context_len={CONTEXT_LEN}, available_gpu_mem={gib(mem['after'])} GB")
        if BUILD != "old":
            log(f"Engine startup timings (s): load_weight={load_seconds:.2f}, kv_cache_allocation={kv_seconds:.2f}, "
                f"scheduler_e2e={time.monotonic() - t_start:.2f}, cuda_graph={graph_seconds:.2f}, "
                f"autotune={autotune.seconds:.2f}")
    return {"packed": packed_all, "rows": rows, "mem": mem}


def print_fatal(exc: Exception) -> None:
    """A scheduler exception as SGLang logs it (one record: prefix on the first line only)."""
    log("Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3015, in run_scheduler_process\n'
        "    scheduler = Scheduler(\n"
        "                ^^^^^^^^^^\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 312, in __init__\n'
        "    self.tp_worker = TpModelWorker(\n"
        "                     ^^^^^^^^^^^^^^\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 402, in initialize\n'
        "    self.init_memory_pool(\n"
        f"{getattr(exc, 'kind', 'RuntimeError')}: {exc}")
    log_main("Received sigquit from a child process. It usually means the child failed.")


# --------------------------------------------------------------------------- rendezvous (lab detail)

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


# --------------------------------------------------------------------------- serving

WORDS_PROSE = ("the of and a to in is was that for on with as by at from it be this are which an or have "
               "one had not but what all were when we there can more if will each about how up out them "
               "then she many some so these would other into has two like time could way been now people "
               "rank engram token memory step cache draft verify block").split()
WORDS_CODE = ("def return self if else for in range import from None True False print len list dict "
              "value key result x y i n args kwargs class raise try except with as yield lambda".split())
THINKING_TOKENS = 256

# The target model's distribution (lab fiction): at position i of the answer to a prompt (hash h), logits over the
# workload's vocabulary drawn from a generator seeded by (h, i), the greedy answer's word lifted above the rest so
# temperature 0 keeps today's greedy answers. A sampled row commits a word of the request's sampling distribution
# (temperature, then top-k, then top-p on the renormalised rest, as the engine's sampler does) and logprobs report
# the tempered distribution before top-k and top-p (SGLang's default). The draft's logits are the target's plus
# noise: a folded proposal with draft temperature tau is drawn from the draft at temperature T * tau, and
# speculative sampling commits the target's distribution only when its acceptance and residual use that same
# tempered proposal (fault tau_untempered: they use the untempered one).
GREEDY_LIFT = 0.5
DRAFT_NOISE = 0.3
POSITION_MIX = 0x9E3779B1


def position_logits(h: int, i: int, vocab, greedy_word: str) -> tuple:
    """(target logits, draft logits) over ``vocab`` at position ``i`` of the answer to the prompt hashed ``h``."""
    r = random.Random((h * POSITION_MIX + i) & 0xFFFFFFFFFFFFFFFF)
    z = [r.gauss(0.0, 1.0) for _ in vocab]
    z[vocab.index(greedy_word)] = max(z) + GREEDY_LIFT
    return z, [v + r.gauss(0.0, DRAFT_NOISE) for v in z]


def tempered(logits, temperature: float) -> list:
    """softmax(logits / temperature) (temperature 0 or less: the untempered softmax, as a greedy row reports)."""
    t = temperature if temperature > 0 else 1.0
    m = max(v / t for v in logits)
    w = [math.exp(v / t - m) for v in logits]
    total = sum(w)
    return [x / total for x in w]


def sampling_dist(probs, top_k, top_p) -> list:
    """The sampler's distribution from tempered ``probs``: top-k, renormalise, top-p (smallest prefix reaching it)."""
    order = sorted(range(len(probs)), key=lambda j: -probs[j])
    if isinstance(top_k, int) and top_k >= 1:
        order = order[:top_k]
    total = sum(probs[j] for j in order)
    keep, cum = [], 0.0
    limit = float(top_p) if isinstance(top_p, (int, float)) and not isinstance(top_p, bool) else 1.0
    for j in order:
        keep.append(j)
        cum += probs[j] / total
        if cum >= limit:
            break
    out = [0.0] * len(probs)
    kept = sum(probs[j] for j in keep)
    for j in keep:
        out[j] = probs[j] / kept
    return out


def draw_index(rng: random.Random, dist) -> int:
    u = rng.random()
    cum = 0.0
    last = 0
    for j, p in enumerate(dist):
        if p > 0:
            cum += p
            last = j
            if u < cum:
                return j
    return last


def speculative_draw(rng: random.Random, target, proposal, accept_with) -> int:
    """One committed token of speculative sampling: drawn from ``proposal``, kept with min(1, target/accept_with),
    else drawn from the residual max(0, target - accept_with) renormalised. Exactly ``target`` when
    ``accept_with`` is the proposal it was drawn from."""
    j = draw_index(rng, proposal)
    q = accept_with[j]
    if q > 0 and rng.random() < min(1.0, target[j] / q):
        return j
    residual = [max(0.0, a - b) for a, b in zip(target, accept_with)]
    total = sum(residual)
    return draw_index(rng, [x / total for x in residual]) if total > 0 else draw_index(rng, target)


def logprob_entry(token: str, probs, vocab, top_n: int, prefix: str) -> dict:
    """One ``logprobs.content`` entry: the committed token and the ``top_n`` most likely tokens of the reported
    (tempered) distribution ``probs`` over ``vocab`` (None: a fixed answer, the token certain)."""
    if probs is None or token not in vocab:
        return {"token": prefix + token, "logprob": 0.0, "bytes": list((prefix + token).encode()),
                "top_logprobs": [{"token": prefix + token, "logprob": 0.0, "bytes": list((prefix + token).encode())}]}

    def lp(j):
        return math.log(probs[j]) if probs[j] > 0 else -9999.0
    top = sorted(range(len(vocab)), key=lambda j: -probs[j])[:max(0, top_n)]
    return {"token": prefix + token, "logprob": lp(vocab.index(token)), "bytes": list((prefix + token).encode()),
            "top_logprobs": [{"token": prefix + vocab[j], "logprob": lp(j), "bytes": list((prefix + vocab[j]).encode())}
                             for j in top]}


def verify_cap() -> tuple | None:
    """The confidence cap's rule when it took effect: ("fixed", rows) or ("conf", threshold); None when off."""
    if not adapter_on("verify_cap"):
        return None
    raw = os.environ.get("DSV41_VERIFY_CAP", "").strip()
    if raw.startswith("conf:"):
        try:
            return ("conf", float(raw[5:].split(",")[0]))
        except ValueError:
            return ("conf", 0.1)
    try:
        return ("fixed", int(raw))
    except ValueError:
        return None


def live_rows(cap: tuple, rng: random.Random, k: int) -> int:
    """Verify rows the cap keeps live in one step (the rest are dead: routed to the anchor's experts and never
    committed). Under conf:T each next row's draft confidence stays above T with probability 1 - 2T."""
    if cap[0] == "fixed":
        return max(0, min(k, cap[1]))
    live = 0
    while live < k and rng.random() < max(0.0, 1.0 - 2.0 * cap[1]):
        live += 1
    return live


def prompt_text(messages) -> str:
    parts = []
    for m in messages or []:
        c = m.get("content", "") if isinstance(m, dict) else ""
        if isinstance(c, list):
            c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
        parts.append(str(c))
    return "\n".join(parts)


# Long-context retrieval (lab fiction of a model that reads its whole context): a prompt that hides
# "The pass code for vault NAME is DIGITS." in filler and asks "What is the pass code for vault NAME?" is
# answered with that sentence. Fault needle_miss: with an experimental adapter armed, beyond
# LAB_ENGINE_NEEDLE_REACH tokens (default 50000) of prompt the needle is not found (an arm that breaks the
# context envelope, which the report says a short smoke does not validate).
NEEDLE_RE = re.compile(r"The pass code for vault (\w+) is (\d+)\.")
NEEDLE_QUESTION_RE = re.compile(r"What is the pass code for vault (\w+)\?")


def needle_answer(messages, prompt_tokens: int):
    """The words answering a needle question, or None for any other prompt."""
    if not messages:
        return None
    question = NEEDLE_QUESTION_RE.search(prompt_text(messages[-1:]))
    if not question:
        return None
    name = question.group(1)
    found = dict(NEEDLE_RE.findall(prompt_text(messages)))
    reach = int(env_float("LAB_ENGINE_NEEDLE_REACH", 50000))
    armed = any(adapter_on(a) for a in ARM_ADAPTERS)
    if name not in found or (fault("needle_miss") and armed and prompt_tokens > reach):
        return f"I found no pass code for vault {name} in the text.".split()
    return f"The pass code for vault {name} is {found[name]}.".split()


# Graded tasks (lab fiction of a model that solves small code, JSON and math tasks): a prompt asking one of the
# graded tasks the quality check uses is answered right, in the shape the prompt asks (a python code block, a
# bare JSON object, reasoning then the final answer on the last line). Fault graded_wrong: with an experimental
# adapter armed, every answer is subtly wrong (an off-by-one sum, a wrong total, code that fails its asserts).
# Tokens keep their line breaks and indentation (a token "\n    return" starts a new, indented line).
GRADED_ANSWERS = (
    ("sum of the first 50 odd positive integers",
     "The first n odd numbers add up to n squared, so the sum is 50 * 50.\n2500",
     "Adding them pairwise from both ends gives 25 pairs.\n2499"),
    ("product of the two numbers is even",
     "The product is odd only when both dice are odd: 1/2 * 1/2 = 1/4. So the product is even with\n3/4",
     "The product is even when either die is even.\n1/2"),
    ("for this invoice",
     '{"number": "2025-0412", "seller": "Northwind Tools", "lines": [{"item": "espresso tamper", "quantity": 4, '
     '"unit_price": 18.5}, {"item": "milk jug", "quantity": 2, "unit_price": 12.0}, {"item": "grinder", '
     '"quantity": 1, "unit_price": 240.0}], "total": 338.0}',
     '{"number": "2025-0412", "seller": "Northwind Tools", "lines": [{"item": "espresso tamper", "quantity": 4, '
     '"unit_price": 18.5}, {"item": "milk jug", "quantity": 2, "unit_price": 12.0}, {"item": "grinder", '
     '"quantity": 1, "unit_price": 240.0}], "total": 270.5}'),
    ("describing a server",
     '{"name": "spark1", "ranks": 1, "gpus": ["GB10"]}',
     '{"name": "spark1", "ranks": "1", "gpus": ["GB10"]}'),
    ("function gcd(a, b)",
     "```python\ndef gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n```",
     "```python\ndef gcd(a, b):\n    while b > 1:\n        a, b = b, a % b\n    return a\n```"),
    ("function is_palindrome(text)",
     "```python\ndef is_palindrome(text):\n    kept = [c.lower() for c in text if c.isalnum()]\n"
     "    return kept == kept[::-1]\n```",
     "```python\ndef is_palindrome(text):\n    return text == text[::-1]\n```"),
)
GRADED_TOKEN_RE = re.compile(r"\n[ \t]*\S+|\S+")


def graded_answer(messages):
    """The tokens answering a graded task, or None for any other prompt."""
    if not messages:
        return None
    asked = prompt_text(messages[-1:])
    for marker, right, wrong in GRADED_ANSWERS:
        if marker in asked:
            armed = any(adapter_on(a) for a in ARM_ADAPTERS)
            return GRADED_TOKEN_RE.findall(wrong if fault("graded_wrong") and armed else right)
    return None


def count_prompt_tokens(messages) -> int:
    total = 3
    for m in messages or []:
        text = prompt_text([m])
        total += 4 + (len(text.split()) * 4 + 2) // 3
    return total


class Engine:
    """The head's serving state. ``state`` and ``ranks`` are set when the boot completes."""

    def __init__(self, args):
        self.args = args
        self.state: dict | None = None
        self.ranks: RankStates | None = None
        self.ready = threading.Event()
        self.sem = threading.BoundedSemaphore(args.max_running_requests)
        self.lock = threading.Lock()
        self.active = 0
        self.sampled_active = 0
        self.queued = 0
        self.lookups = 0
        self.requests = 0
        self.profiling: float | None = None

    def all_packed(self) -> bool:
        return self.ranks.all_packed() if self.ranks else False

    def step_ms(self) -> float:
        k = self.args.dspark_block_size
        packed = self.all_packed()
        base = 98.0 if packed else 120.0
        # each verify row past today's three costs this much (LAB_ENGINE_STEP_MS_PER_ROW, default 4 ms): set high,
        # a longer block loses to k=3 on committed tokens per second of step time, as the report warns it may
        base += env_float("LAB_ENGINE_STEP_MS_PER_ROW", 4.0) * (k - 3)
        if adapter_on("wo_a_w8"):
            base -= 4.0
        if adapter_on("engram_prefetch") and packed:
            base -= 2.0
        if os.environ.get("DSV41_ENGRAM_PREFETCH_CHECK", "0").strip() == "1":
            base += 15.0
        if adapter_on("draft_head_fp8"):
            base -= 1.0
        if adapter_on("verify_cap"):
            base -= 2.0   # dead verify rows routed to the anchor's experts: less expert work per step (a lab figure)
        if self.args.ep_size == 1 and self.args.tp_size > 1:
            base -= 3.0   # EP1: every rank holds a slice of every expert, no expert imbalance (a lab figure)
        cache = sum(layer_budgets().values())
        if cache > 0:
            base -= 4.0 * min(cache, 0.5)   # fewer exposed Engram misses, up to 2 ms at 0.5 GiB
            if int(env_float("DSV41_CACHE_WAYS", 4)) >= 16:
                base -= 0.5                  # ways matter only with a non-zero cache
        base *= clock_step_factor()   # 1.0 at the 2200 MHz lock, 0.988 unlocked at boost, less when throttled
        with self.lock:
            active = max(1, self.active)
        return base * (1 + 0.12 * (active - 1))

    def plan(self, body: dict) -> dict:
        messages = body.get("messages") or []
        text = prompt_text(messages)
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).digest()
        h = int.from_bytes(digest[:8], "little")
        temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
        seed = body.get("seed")
        if temperature <= 0:
            rng = random.Random(h)
        elif isinstance(seed, int) and not isinstance(seed, bool):
            # fixed seed: repeatable; a sampler path other than the default (forced folding, draft temperature,
            # block verification) draws another stream from the same distribution, as the real engine does
            rng = random.Random(h ^ (seed * 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF) ^ sampler_path_salt())
        else:
            rng = random.Random(int.from_bytes(os.urandom(8), "little"))
        kwargs = body.get("chat_template_kwargs") or {}
        thinking = bool(kwargs.get("thinking") or kwargs.get("enable_thinking"))
        natural = 64 + h % 961 + (THINKING_TOKENS if thinking else 0)
        if temperature > 0:
            natural = max(64, natural + rng.randint(-32, 32))
        # max_completion_tokens overrides the deprecated max_tokens
        limit = body.get("max_completion_tokens")
        if limit is None:
            limit = body.get("max_tokens")
        if limit is None:
            limit = 1024
        n_out = max(0, min(int(limit), natural))
        low = text.lower()
        code = "def " in low or "code" in low
        vocab = WORDS_CODE if code else WORDS_PROSE
        folded = folded_sampling_active(self.state["mem"]) if self.state else False
        # draft temperature acts only on a folded proposal; block verification only on sampled rows
        tau = adapter_on("draft_tau") and folded and temperature > 0
        verify = adapter_on("block_verify") and temperature > 0
        want_logprobs = bool(body.get("logprobs"))
        top_n = int(body.get("top_logprobs") or 0) if want_logprobs else 0
        dists = None        # the reported (tempered) distribution at each position, when logprobs are asked
        if temperature > 0:
            top_k, top_p = body.get("top_k"), body.get("top_p")
            greedy_seq = random.Random(h)
            words, dists = [], []
            for i in range(n_out):
                z, d = position_logits(h, i, vocab, greedy_seq.choice(vocab))
                probs = tempered(z, temperature)
                target = sampling_dist(probs, top_k, top_p)
                if tau:
                    # the folded proposal: the draft at temperature T * tau; acceptance and residual must use it
                    proposal = sampling_dist(tempered(d, temperature * tau_value()), top_k, top_p)
                    used = sampling_dist(tempered(d, temperature), top_k, top_p) if fault("tau_untempered") else proposal
                    j = speculative_draw(rng, target, proposal, used)
                else:
                    j = draw_index(rng, target)
                if fault("sampler_shift") and (tau or verify) and rng.random() < 0.5:
                    # the arm's sampler draws from a shifted distribution: the first third of the vocabulary
                    # far more often than it should
                    j = rng.randrange(max(1, len(vocab) // 3))
                words.append(vocab[j])
                dists.append(probs)
            if not want_logprobs:
                dists = None
        else:
            words = [rng.choice(vocab) for _ in range(n_out)]
            if want_logprobs:
                greedy_seq = random.Random(h)
                dists = [tempered(position_logits(h, i, vocab, greedy_seq.choice(vocab))[0], 0.0) for i in range(n_out)]
        with self.lock:
            self.requests += 1
            number, others = self.requests, self.active
            sampled_running = self.sampled_active
        if temperature <= 0 and fault("mixed_greedy") and adapter_on("block_verify") and sampled_running > 0:
            # block verification applied to every row of a batch holding a sampled one: the greedy rows'
            # committed tokens change
            mix = random.Random(h ^ 0x5BD1E995)
            words = [mix.choice(vocab) if i % 5 == 2 else w for i, w in enumerate(words)]
        if temperature <= 0 and fault("fold_race") and adapter_on("folded_fence"):
            # a folded result read after the next step overwrote the verify buffer: under concurrency, and
            # on every other request alone, some committed tokens come from another row
            if others > 0 or number % 2 == 0:
                race = random.Random(int.from_bytes(os.urandom(8), "little"))
                words = [race.choice(vocab) if i % 7 == 3 else w for i, w in enumerate(words)]
        needle = needle_answer(messages, count_prompt_tokens(messages))
        if needle is not None:
            words = needle[:max(1, int(limit))]
            n_out = natural = len(words)
        graded = graded_answer(messages)
        if graded is not None:
            words = graded[:max(1, int(limit))]
            n_out = natural = len(words)
        if temperature <= 0 and fault("answer_drift") and any(adapter_on(a) for a in ARM_ADAPTERS) and h % 4 == 1:
            # an arm that changes what greedy decoding commits: one prompt in four gets other words
            drift = random.Random(h ^ 0x2545F491)
            words = [drift.choice(vocab) if i % 9 == 4 else w for i, w in enumerate(words)]
        if fault("nonfinite") and adapter_on("wo_a_w8"):
            log("Detected errors during sampling! NaN in the logits.")
            words = ["!"] * n_out
        accept = (0.70 if code else 0.55)
        if temperature > 0:
            accept -= 0.12            # sampled rows accept fewer drafted tokens than greedy ones
        if tau:
            accept += 0.03
        if verify:
            accept += 0.06
        every_error = int(env_float("LAB_ENGINE_STREAM_ERROR_EVERY", 0))
        every_abort = int(env_float("LAB_ENGINE_ABORT_EVERY", 0))
        cut = None
        if every_error > 0 and number % every_error == 0:
            cut = "error"
        elif every_abort > 0 and number % every_abort == 0:
            cut = "abort"
        if needle is not None or graded is not None:
            dists = None if dists is None else [None] * len(words)     # a fixed answer: every token certain
        return {"words": words, "prompt_tokens": count_prompt_tokens(messages), "accept": min(accept, 0.95),
                "vocab": vocab, "dists": dists, "top_logprobs": top_n, "cap": verify_cap(),
                "cap_rng": random.Random(h ^ 0x3C6EF372),
                "finish": "length" if n_out < natural else "stop", "rng": rng,
                "reasoning": min(THINKING_TOKENS, n_out) if thinking else 0,
                "cut": cut, "cut_at": max(1, n_out // 2), "accepted": 0, "proposed": 0,
                "sampled": temperature > 0}

    def steps(self, plan: dict):
        """Yield lists of committed words, sleeping one speculative step per list. Under the confidence cap the
        accepted drafts of a step are the same draws, limited to its live rows (the cap only removes acceptances);
        fault cap_dead_rows commits the dead rows too, the draft's unverified guesses in place of the target's."""
        k = self.args.dspark_block_size
        words = plan["words"]
        rng = plan["rng"]
        cap = plan.get("cap")
        # the scheduler logs a Decode batch line every decode_log_interval steps of the running batch, with the
        # batch's size at that moment (not only as a request leaves): every LAB_ENGINE_DECODE_LOG_STEPS steps of
        # this request (default 20; 0: only the line as a request leaves), its accept len and the step time over them
        every = int(env_float("LAB_ENGINE_DECODE_LOG_STEPS", 20))
        since, since_tokens, since_steps = time.monotonic(), 0, 0
        i = 0
        while i < len(words):
            accepted = sum(1 for _ in range(k) if rng.random() < plan["accept"])
            n = 1 + accepted
            if cap is not None:
                live = live_rows(cap, plan["cap_rng"], k)
                n = 1 + min(accepted, live)
                if fault("cap_dead_rows") and live < k:
                    legit, n = n, 1 + min(k, accepted + (k - live))
                    for j in range(i + legit, min(i + n, len(words))):
                        words[j] = plan["cap_rng"].choice(plan["vocab"])
            speed_sleep(self.step_ms() * rng.uniform(0.97, 1.03) / 1000.0)
            block = words[i:i + n]
            plan["accepted"] += max(0, len(block) - 1)     # the first token of a step is the target's own
            plan["proposed"] += k
            yield block
            i += n
            since_tokens, since_steps = since_tokens + len(block), since_steps + 1
            if every > 0 and since_steps >= every and i < len(words):
                now = time.monotonic()
                with self.lock:
                    running, queued = self.active, self.queued
                accept_len = since_tokens / since_steps
                step_s = (now - since) / since_steps
                rate = running * accept_len / step_s if step_s > 0 else 0.0
                self.decode_line(running, plan["prompt_tokens"] + i, accept_len, rate, queued)
                since, since_tokens, since_steps = now, 0, 0

    def decode_line(self, running: int, used: int, accept_len: float, rate: float, queued: int) -> None:
        """One ``Decode batch`` line as the engine's scheduler logs it (rank 0 only)."""
        mem = self.state["mem"]
        if BUILD == "old":
            log(f"Decode batch. #running-req: {running}, #token: {used}, "
                f"token usage: {used / max(1, mem['allocated']):.2f}, cuda graph: True, "
                f"gen throughput (token/s): {rate:.2f}, #queue-req: {queued}")
        else:
            swa_used = min(used, mem["swa"])
            log(f"Decode batch, #running-req: {running}, #full token: {used}, "
                f"full token usage: {used / max(1, mem['allocated']):.2f}, #swa token: {swa_used}, "
                f"swa token usage: {swa_used / max(1, mem['swa']):.2f}, accept len: {accept_len:.2f}, "
                f"accept rate: {max(0.0, accept_len - 1) / self.args.dspark_block_size:.2f}, cuda graph: True, "
                f"gen throughput (token/s): {rate:.2f}, #queue-req: {queued}")

    def enter(self, plan: dict):
        with self.lock:
            self.queued += 1
        self.sem.acquire()
        with self.lock:
            self.queued -= 1
            running, queued = self.active, self.queued
            self.active += 1
            self.sampled_active += 1 if plan.get("sampled") else 0
        pool = max(1, self.state["mem"]["allocated"])
        if BUILD == "old":
            log(f"Prefill batch. #new-seq: 1, #new-token: {plan['prompt_tokens']}, #cached-token: 0, "
                f"token usage: {plan['prompt_tokens'] / pool:.2f}, #running-req: {running}, #queue-req: {queued}")
        else:
            log(f"Prefill batch, #new-seq: 1, #new-token: {plan['prompt_tokens']}, #cached-token: 0, "
                f"full token usage: {plan['prompt_tokens'] / pool:.2f}, swa token usage: 0.00, "
                f"#running-req: {running}, #queue-req: {queued}")

    def leave(self, plan: dict, n_tokens: int, steps: int, wall: float) -> None:
        with self.lock:
            self.active -= 1
            self.sampled_active -= 1 if plan.get("sampled") else 0
            running, queued = self.active, self.queued
            self.lookups += plan["prompt_tokens"] + n_tokens
            lookups = self.lookups
        self.sem.release()
        rate = (n_tokens / wall if wall > 0 else 0.0) * (running + 1)   # the batch's tokens per second
        accept_len = n_tokens / max(1, steps)
        self.decode_line(running + 1, plan["prompt_tokens"] + n_tokens, accept_len, rate, queued)
        budgets = layer_budgets()
        ways = int(env_float("DSV41_CACHE_WAYS", 4)) or 4
        for layer in ENGRAM_LAYERS:
            # each layer's own cache (a layer at budget 0 serves every lookup from the shard)
            cache = budgets[layer]
            hit = row_cache_hit_rate(cache * len(ENGRAM_LAYERS), ways, lookups)
            reads = round(lookups * (1.0 - hit))
            if BUILD == "old":
                log(f"Engram layer={layer} lookups={lookups} hit_rate={hit * 100:.1f}% reads={reads} "
                    f"cache={cache:.1f}GiB({ways}-way) threads=96")
            else:
                log(f"Engram layer={layer} lookups={lookups} hit_rate={hit * 100:.1f}% reads={reads} "
                    f"cache={cache:.1f}GiB({ways}-way) scales=0.0GiB threads=96 packed={self.state['packed']}")


# The row cache's hit rate (lab fiction, for the shape of cold and warm): empty at every boot, it fills with
# the rows the served text looks up and approaches a steady rate set by its size (16 ways a little higher).
ROW_CACHE_FILL_LOOKUPS = 3000.0


def row_cache_hit_rate(cache_gib_total: float, ways: int, lookups: int) -> float:
    """Share of Engram lookups the row cache served since the boot (0 without a cache)."""
    if cache_gib_total <= 0:
        return 0.0
    steady = 0.30 * min(cache_gib_total, 0.5) / 0.5 + (0.02 if ways >= 16 else 0.0)
    return steady * (1.0 - math.exp(-lookups / ROW_CACHE_FILL_LOOKUPS))


def check_sampling(body: dict) -> None:
    """The request checks the engine makes before generating (ValueError -> 400 with the error object)."""
    for key in ("max_tokens", "max_completion_tokens"):
        v = body.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError(f"{key} must be a non-negative integer, got {v!r}")
    t = body.get("temperature")
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0):
        raise ValueError(f"temperature must be a non-negative number, got {t!r}")
    p = body.get("top_p")
    if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {p!r}")
    k = body.get("top_k")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or (k < 1 and k != -1)):
        raise ValueError(f"top_k must be -1 (disabled) or at least 1, got {k!r}")


def make_handler(engine: Engine | None):
    """HTTP handler of the head (engine given) or of a worker's dummy health server (None)."""
    served = engine.args.served_model_name if engine else SERVED_MODEL_NAME

    class Handler(BaseHTTPRequestHandler):
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, fmt, *a):  # access lines are written by access() in uvicorn's form
            pass

        def access(self, code: int) -> None:
            phrase = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                      503: "Service Unavailable"}.get(code, "")
            log_main(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - '
                     f'"{self.command} {self.path} HTTP/1.1" {code} {phrase}'.rstrip())

        def send_body(self, code: int, data: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            if data:
                self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.access(code)

        def send_json(self, code: int, obj) -> None:
            self.send_body(code, json.dumps(obj).encode())

        def send_error_obj(self, code: int, message: str, kind: str) -> None:
            self.send_json(code, {"object": "error", "message": message, "type": kind, "param": None, "code": code})

        def authorized(self) -> bool:
            key = os.environ.get("API_KEY", "")
            if not key:
                return True
            if (self.headers.get("Authorization", "") == f"Bearer {key}"
                    or self.headers.get("x-api-key", "") == key):
                return True
            self.send_json(401, {"error": "Unauthorized"})
            return False

        def ready(self) -> bool:
            return engine is None or engine.ready.is_set()

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate"):
                if not self.ready():
                    self.send_body(503, b"")
                    return
                if path == "/health_generate" and engine is not None:
                    speed_sleep(engine.step_ms() / 1000.0)  # one token
                self.send_body(200, b"")
            elif path == "/v1/models" and engine is not None:
                if self.authorized():
                    self.send_json(200, {"object": "list", "data": [
                        {"id": served, "object": "model", "created": int(time.time()), "owned_by": "sglang",
                         "root": served, "max_model_len": CONTEXT_LEN}]})
            else:
                self.send_json(404, {"detail": "Not Found"})

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            if engine is not None and path in ("/start_profile", "/stop_profile"):
                if not self.ready():
                    self.send_error_obj(503, "The server is not ready yet", "ServiceUnavailableError")
                elif path == "/start_profile":
                    engine.profiling = time.monotonic()
                    self.send_body(200, b"Start profiling.", "text/plain")
                elif engine.profiling is None:
                    self.send_error_obj(400, "Profiling is not in progress. Call /start_profile first.",
                                        "BadRequestError")
                else:
                    engine.profiling = None
                    trace = profile_trace(0, bool((engine.state or {}).get("packed")))
                    if engine.ranks is not None:
                        with engine.ranks.lock:
                            engine.ranks.profiles_done += 1
                    log(f"Profiling done. Traces are saved to: {os.path.dirname(trace)}")
                    self.send_body(200, b"Stop profiling. This will take some time.", "text/plain")
                return
            if engine is None or path != "/v1/chat/completions":
                self.send_json(404, {"detail": "Not Found"})
                return
            if not self.authorized():
                return
            try:
                length = int(self.headers.get("Content-Length", "0") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                    raise ValueError("messages must be a list")
                check_sampling(body)
            except ValueError as exc:
                self.send_error_obj(400, f"bad request: {exc}", "BadRequestError")
                return
            if not self.ready():
                self.send_error_obj(503, "The server is not ready yet", "ServiceUnavailableError")
                return
            if flag("LAB_ENGINE_LOG_REQUESTS"):
                log_main(f"Receive: obj=ChatCompletionRequest(messages={body.get('messages')!r}, "
                         f"model={body.get('model')!r}, stream={bool(body.get('stream'))!r}, "
                         f"max_tokens={body.get('max_tokens')!r}, temperature={body.get('temperature')!r})")
            plan = engine.plan(body)
            engine.enter(plan)
            start = time.monotonic()
            n_tokens = 0
            n_steps = 0
            left = []

            def leave():
                # the request leaves the batch when its last step is done, before its client can read the end of
                # the answer: a client that sends its next request at once never finds this one still running
                # (the real scheduler's #running-req counts only the requests of that decode step)
                if not left:
                    left.append(True)
                    engine.leave(plan, n_tokens, n_steps, time.monotonic() - start)
            try:
                speed_sleep((60.0 + 0.05 * plan["prompt_tokens"]) / 1000.0)
                rid = "chatcmpl-" + uuid.uuid4().hex[:24]
                created = int(time.time())
                model = body.get("model") or served

                def usage():
                    u = {"prompt_tokens": plan["prompt_tokens"], "completion_tokens": n_tokens,
                         "total_tokens": plan["prompt_tokens"] + n_tokens}
                    if plan["reasoning"]:
                        u["reasoning_tokens"] = min(plan["reasoning"], n_tokens)
                    if flag("LAB_ENGINE_SPEC_USAGE"):
                        u["completion_tokens_details"] = {
                            "accepted_prediction_tokens": plan["accepted"],
                            "rejected_prediction_tokens": plan["proposed"] - plan["accepted"]}
                    return u

                def logprobs_at(i, word):
                    """The logprobs.content entry of the token committed at position i (when asked)."""
                    if not body.get("logprobs"):
                        return None
                    dists = plan.get("dists")
                    return logprob_entry(word, dists[i] if dists and i < len(dists) else None, plan["vocab"],
                                         plan["top_logprobs"], " " if i else "")

                cut_error = {"message": "The engine failed while generating (lab knob LAB_ENGINE_STREAM_ERROR_EVERY)",
                             "type": "ServiceUnavailableError", "param": None, "code": 503}

                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    self.access(200)

                    def sse(*objs) -> None:
                        data = "".join(f"data: {o if isinstance(o, str) else json.dumps(o)}\n\n" for o in objs)
                        self.wfile.write(data.encode())
                        self.wfile.flush()

                    def chunk(delta, finish=None):
                        return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

                    first = True
                    cut = False
                    for block in engine.steps(plan):
                        pieces = []
                        for word in block:
                            field = "reasoning_content" if n_tokens < plan["reasoning"] else "content"
                            if pieces and pieces[-1][0] == field:
                                pieces[-1][1].append(word)
                                pieces[-1][2].append(logprobs_at(n_tokens, word))
                            else:
                                pieces.append((field, [word], [logprobs_at(n_tokens, word)]))
                            n_tokens += 1
                        n_steps += 1
                        out = [chunk({"role": "assistant", "content": ""})] if first else []
                        for field, ws, lps in pieces:
                            piece = chunk({field: ("" if first else " ") + " ".join(ws)})
                            if body.get("logprobs"):
                                piece["choices"][0]["logprobs"] = {"content": lps}
                            out.append(piece)
                            first = False
                        sse(*out)
                        if plan["cut"] and n_tokens >= plan["cut_at"]:
                            cut = True
                            break
                    leave()
                    if cut and plan["cut"] == "error":
                        sse({"error": cut_error}, "[DONE]")   # no finish chunk, no usage: the real shape
                        return
                    if first:
                        sse(chunk({"role": "assistant", "content": ""}))
                    sse(chunk({}, "abort" if cut else plan["finish"]))
                    if (body.get("stream_options") or {}).get("include_usage"):
                        sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                             "choices": [], "usage": usage()})
                    sse("[DONE]")
                else:
                    out = []
                    for block in engine.steps(plan):
                        out.extend(block)
                        n_steps += 1
                        if plan["cut"] and len(out) >= plan["cut_at"]:
                            break
                    n_tokens = len(out)
                    leave()
                    if plan["cut"] == "error":
                        self.send_json(503, {"object": "error", **cut_error})
                        return
                    message = {"role": "assistant", "content": " ".join(out[plan["reasoning"]:])}
                    if plan["reasoning"]:
                        message["reasoning_content"] = " ".join(out[:plan["reasoning"]])
                    choice = {"index": 0, "message": message,
                              "finish_reason": "abort" if plan["cut"] else plan["finish"]}
                    if body.get("logprobs"):
                        choice["logprobs"] = {"content": [logprobs_at(i, w) for i, w in enumerate(out)]}
                    self.send_json(200, {
                        "id": rid, "object": "chat.completion", "created": created, "model": model,
                        "choices": [choice], "usage": usage()})
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                leave()

    return Handler


class HTTPServer(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True


def uvicorn_started(port: int) -> None:
    log_main("INFO:     Started server process [1]")
    log_main("INFO:     Waiting for application startup.")
    log_main("INFO:     Application startup complete.")
    log_main(f"INFO:     Uvicorn running on http://0.0.0.0:{port} (Press CTRL+C to quit)")


def prefetch_check_loop() -> None:
    """The prefetch adapter's periodic CHECK line (engine logging, WARNING), every stats period."""
    period = env_float("LAB_ENGINE_STATS_SECONDS", env_float("DSV41_STATS_SECONDS", 60.0))
    period = max(period / max(env_float("LAB_ENGINE_SPEED", 1.0), 1e-6), 0.05)
    counts = "[2, 0]" if fault("prefetch_mismatch") else "[0, 0]"
    while True:
        time.sleep(period)
        log(f"DSV41 Engram prefetch CHECK: gathers differing from the synchronous path per layer = {counts}")


def start_periodic(state: dict) -> None:
    if prefetch_check_on() and state.get("packed"):
        threading.Thread(target=prefetch_check_loop, daemon=True).start()


def profile_trace(rank: int, packed: bool = False) -> str:
    """Write this rank's trace of the profiled window; returns its path. Kernel events carry a stream
    (``tid``) and a duration (us per step, real scale): the MoE and attention dominate the compute stream
    (7); the Engram gather runs there (1,000 us packed, 2,500 us from the unpacked files) unless the
    prefetch is in effect on packed shards, which moves it to a side stream (8) and leaves a 150 us wait
    on the compute stream; CHECK mode re-runs the synchronous gather on the compute stream too."""
    if adapter_on("wo_a_w8") and not fault("g4_not_taken"):
        mid = flag("DSV41_WO_A_W8_MID") or flag("DSV41_WO_A_W8_DROP")
        # in bridge mode with DROP the draft keeps its bf16 wo_a (it does not use the shared dispatch)
        draft_bf16 = wo_a_bridge() and flag("DSV41_WO_A_W8_DROP")
        kernels = [("wo_a_fp8_gemv_g4 (target)", 7, 400),
                   ("wo_a_bf16_gemv (draft)", 7, 180) if draft_bf16 else ("wo_a_fp8_gemv_g4 (draft)", 7, 120)]
        kernels += [("wo_a_fp8_mid (target)", 7, 300)] if mid else []
    else:
        kernels = [("wo_a_bf16_gemv (target)", 7, 600), ("wo_a_bf16_gemv (draft)", 7, 180)]
    kernels += [("flash_attn_verify", 7, 8000), ("moe_b12x_dense", 7, 30000)]
    gather = 1000 if packed else 2500
    if packed and adapter_on("engram_prefetch"):
        kernels += [("engram_gather", 8, gather), ("engram_prefetch_wait", 7, 150)]
        if prefetch_check_on():
            kernels += [("engram_gather", 7, gather)]
    else:
        kernels += [("engram_gather", 7, gather)]
    events = [{"name": k, "ph": "X", "cat": "kernel", "ts": i * 10, "dur": dur, "pid": 0, "tid": tid}
              for i, (k, tid, dur) in enumerate(kernels)]
    out_dir = os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
    path = os.path.join(out_dir, f"{int(time.time())}-TP-{rank}.trace.json")
    write_atomic(host_path(path, load_mounts()) if path.startswith("/") else path,
                 json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    return path


def warmup(engine: Engine) -> None:
    """The launcher's warm-up request, as SGLang logs it."""
    log_main('INFO:     127.0.0.1:41822 - "GET /model_info HTTP/1.1" 200 OK')
    if BUILD == "old":
        log("Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, "
            "#queue-req: 0")
    else:
        log("Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, full token usage: 0.00, "
            "swa token usage: 0.00, #running-req: 0, #queue-req: 0")
    pace(PHASE["warmup"])
    log_main('INFO:     127.0.0.1:41830 - "POST /generate HTTP/1.1" 200 OK')
    log_main("The server is fired up and ready to roll!")


# --------------------------------------------------------------------------- main

_IS_HEAD = False


def on_sigterm(_signum, _frame):
    log_main("Received sigterm=15, shutting down.")
    if _IS_HEAD:
        log_main("INFO:     Shutting down")
        log_main("INFO:     Finished server process [1]")
    os._exit(0)


def main(argv: list | None = None) -> int:
    global RANK, EP_TAG, BUILD, _IS_HEAD
    load_knob_file()
    configure_pacing()
    BUILD = "old" if os.environ.get("LAB_ENGINE_BUILD", "new").strip().lower() == "old" else "new"
    args = parse_args(sys.argv[1:] if argv is None else argv)
    RANK = args.rank
    EP_TAG = args.ep_size > 1
    head = args.role == "head" and args.rank == 0
    _IS_HEAD = head
    signal.signal(signal.SIGTERM, on_sigterm)
    t_start = time.monotonic()
    log_main(server_args_line(args))
    engine = Engine(args) if head else None
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
        pace(PHASE["tokenizer"])
        state = boot(args, t_start)
    except EngramFatal as exc:
        raw_err(f"Engram retrieval failed: {exc.detail} (errno={exc.errno})\n")
        return 134  # abort()
    except Fatal as exc:
        print_fatal(exc)
        return 1
    except OSError as exc:
        print_fatal(exc)
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
        start_periodic(state)
        while True:
            time.sleep(3600)
    ranks = RankStates(state["packed"])
    if args.dist_init_addr:
        start_rendezvous_server(args.dist_init_addr, ranks)
    engine.state = state
    engine.ranks = ranks
    uvicorn_started(args.port)
    warmup(engine)
    engine.ready.set()
    say(f"Ready: API on port {args.port}")
    start_periodic(state)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
