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

Lab knobs: environment variables of the engine process (``LAB_ENGINE_*``, and the ``LAB_*`` the docker
stand-in sets); the one list, each with its default and meaning, is ``KNOBS`` in ``knobs.py``. Any ``LAB_*``
key may also be set in a host-side file, ``/etc/dsv41-lab/engine.env`` (path: ``LAB_ENGINE_ENV_FILE``); the
environment wins over the file.

Layout (one module a subject; ``dsv41_engine.py`` beside this package is the entry file the docker stand-in
starts): ``main`` (the process), ``run`` (the settings fixed at start-up, passed to the code that needs them),
``knobs``, ``pacing``, ``output`` (streams), ``paths`` (container paths), ``checkpoint`` (checkpoint / Engram
shards), ``adapters`` (adapters in the image), ``caches`` (Engram caches), ``moe`` (MoE and TP padding),
``memory`` (memory model), ``autotune``, ``tqdm_bar``, ``server_args``, ``arguments``, ``boot``, ``rendezvous``,
and serving: ``engine`` (the head's serving state), ``sampling``, ``answers``, ``api`` (HTTP), ``profiler``,
``serving`` (after the boot); ``constants``, ``errors`` and ``clocks`` (the lab GPU's clocks) beside them.

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
  before top-k and top-p, as SGLang reports it (a fixed answer: needle, graded task, reports each token certain;
  LAB_ENGINE_NO_LOGPROBS=1: none, as a build that ignores the request's logprobs);
  completion length = min(max tokens, natural), natural = 64 + hash % 961 (+256 with thinking).
"""
