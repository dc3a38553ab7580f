"""Engine logs in the real engine's formats (SPEC section 3), built line by line for the parser tests.

Each boot is a list of ``(stream, line)``: logging lines go to ``stderr`` with the
``[date time TPr EPr] `` prefix (``[date time] `` before the scheduler starts), ``print()`` lines
(adapters, ``Ready``, fatal Engram errors per the SPEC's streams) carry no prefix.  ``build="old"``
gives an older build's formats (``server_args=ServerArgs(...)``, ``cache_budget=`` without ``packed=``,
``DSv4``).  Rows are the real DeepSeek-V4.1-Flash tables.
"""
ROWS = {1: 384006168, 14: 384016684}
HASH = "05cc0d96dc7e28b8"
CACHE = "/root/.cache/sglang/flashinfer/autotune/0.6.18/sm121/%s/rank_tp%d_pp0_dp0.json"


def rank_range(layer, rank, tp=3):
    n = ROWS[layer]
    return n * rank // tp, n * (rank + 1) // tp


def server_args(rank, requested=750000, build="new", page_size=256, extra=None):
    fields = {"model_path": "/models/DeepSeek-V4.1-Flash", "tokenizer_path": "/models/DeepSeek-V4.1-Flash",
              "host": "0.0.0.0", "port": 8888, "mem_fraction_static": 0.95, "max_running_requests": 4,
              "max_total_tokens": requested, "chunked_prefill_size": 1024, "page_size": page_size,
              "nnodes": 3, "node_rank": rank, "tp_size": 3, "ep_size": 3, "api_key": "[REDACTED]",
              "speculative_algorithm": "DSPARK", "speculative_num_draft_tokens": 6,
              "speculative_dspark_block_size": 5, "context_length": None, "enable_metrics": True,
              "json_model_override_args": {"rope_scaling": {"factor": 4.0}}, "cuda_graph_bs": [1, 2, 3, 4]}
    # pad to the real marker's size (about 12 KB) with plausible fields
    for i in range(300):
        fields["option_%03d" % i] = None if i % 3 == 0 else (i % 2 == 0)
    fields.update(extra or {})
    if build == "old":
        body = ", ".join("%s=%r" % (k, v) for k, v in fields.items())
        return "server_args=ServerArgs(%s)" % body
    return "server_args=%r" % (fields,)


def boot(rank, t="2026-09-11 23:34", build="new", packed=(True, True), requested=750000, allocated=491520,
         available="1.04 GB", disagree=0, keep=None, fatal=None, die_after_marker=False, ready=None,
         decode=0, periodic=1, mode="nvme", page_size=256):
    """One boot of one rank.  ``keep``: None (stock autotune) or 'reused' / 'tuned'."""
    p0 = "[%s:03] " % t
    p = "[%s:14 TP%d EP%d] " % (t, rank, rank)
    out = [("stderr", p0 + server_args(rank, requested, build, page_size))]
    if die_after_marker:
        out.append(("stderr", p + "Load weight begin. avail mem=111.47 GB"))
        return out
    out.append(("stderr", p + "Load weight begin. avail mem=111.47 GB"))
    for i, layer in enumerate((1, 14)):
        lo, hi = rank_range(layer, rank)
        if fatal is not None and fatal[0] == layer:
            out.append(("stderr", "Engram retrieval failed: packed Engram shard %s (errno=0)" % fatal[1]))
            return out
        if build == "old":
            line = ("Exact %s Engram layer=%d rank=%d rows=[%d,%d) cache_budget=0.0GiB (0 slots, 4-way, 0.0%% of "
                    "owned rows) scales=0.0GiB io_threads=96" % (mode, layer, rank, lo, hi))
        else:
            line = ("Exact %s Engram layer=%d rank=%d rows=[%d,%d) cache=0.0GiB (0 slots, 4-way, 0.0%% of owned "
                    "rows) scales=0.0GiB io_threads=96 packed=%s" % (mode, layer, rank, lo, hi, packed[i]))
        out.append(("stderr", p + line))
    dsv = "DSv4" if build == "old" else "DSV4"
    out += [
        ("stderr", p + "Load weight end. elapsed=541.76 s, type=DeepseekV4ForCausalLM, quant=fp8, avail mem=17.47 GB, "
                       "mem usage=94.00 GB."),
        ("stderr", p + "%s memory calculation: bytes_per_full_token=1670.75, available_bytes=%s, "
                       "c128_state_fixed=0.00 GB, swa_fixed=0.30 GB, full_token=%d" % (dsv, available, allocated)),
        ("stderr", p + "%s pool sizes: full=%d, swa=13312, c4=%d, c128=%d, c4_state=2048, c128_state=0"
         % (dsv, allocated, allocated // 4, allocated // 128)),
        ("stderr", p + "%s pool sizes: full=%d, swa=13312, c4=%d, c128=%d, c4_state=2048, c128_state=0"
         % (dsv, allocated, allocated // 4, allocated // 128)),
        ("stderr", p + "Memory pool end. avail mem=9.90 GB"),
    ]
    if keep:
        out.append(("stdout", "[autotune_keep] armed"))
    for pass_name in ("target", "draft"):
        out.append(("stderr", p + "Capture %s verify CUDA graph begin. backend=full, num_tokens_per_req=6, "
                                  "bs=[1, 2, 3, 4], avail mem=8.20 GB" % pass_name))
        if rank == 0 and disagree and not keep:
            # tqdm glues the warning onto its progress bar, with cursor codes
            out.append(("stderr", "Capturing batches (bs=4 avail_mem=7.62 GB):   0%|          | 0/4 [00:00<?, ?it/s]"
                                  "\x1b[A\r" + p + "FlashInfer autotune: per-rank caches disagree, discarding them "
                                  "and tuning from scratch so all ranks agree on the tactics."))
            disagree -= 1
        if keep == "reused":
            out.append(("stdout", "[autotune_keep] reused %s/rank_tp%d_pp0_dp0.json" % (HASH, rank)))
        else:
            out.append(("stderr", p + "Running FlashInfer autotune with cache: " + CACHE % (HASH, rank)))
            out.append(("stderr", p + "FlashInfer autotune completed."))
            if keep == "tuned":
                out.append(("stdout", "[autotune_keep] tuned and saved %s/rank_tp%d_pp0_dp0.json" % (HASH, rank)))
        out.append(("stderr", p + "Capture %s verify CUDA graph end. elapsed=13.48 s, mem usage=0.58 GB, "
                                  "avail mem=7.62 GB." % pass_name))
    if rank == 0:
        out.append(("stderr", p + "max_total_num_tokens=%d, chunked_prefill_size=1024, max_prefill_tokens=16384, "
                                  "max_running_requests=4, context_len=1048576, available_gpu_mem=7.68 GB" % allocated))
    if ready if ready is not None else rank == 0:
        out.append(("stdout", "Ready: API on port 8888"))
    for i in range(periodic):
        for j, layer in enumerate((1, 14)):
            flag = "" if build == "old" else " packed=%s" % packed[j]
            out.append(("stderr", p + "Engram layer=%d lookups=%d hit_rate=0.0%% reads=%d cache=0.0GiB(4-way) "
                                      "scales=0.0GiB threads=96%s" % (layer, 6040 * (i + 1), 6040 * (i + 1), flag)))
    for i in range(decode if rank == 0 else 0):
        out.append(("stderr", p + "Decode batch, #running-req: 1, #token: %d, token usage: 0.00, accept len: 3.%02d, "
                                  "accept rate: 0.41, cuda graph: True, gen throughput (token/s): 3.12, #queue-req: 0"
                    % (240 + i, 8 + i)))
    return out


def text(*boots, crlf=False):
    """The log as one text (both streams in order, as a saved log or merged docker logs)."""
    end = "\r\n" if crlf else "\n"
    return "".join(line + end for b in boots for _stream, line in b)


def docker_streams(*boots, start=0):
    """``(stdout, stderr)`` as ``docker logs --timestamps`` prints them: each line on its own stream with
    its own RFC 3339 nanosecond timestamp."""
    out, err = [], []
    n = start
    for b in boots:
        for stream, line in b:
            n += 1
            stamped = "2026-09-11T%02d:%02d:%02d.%09dZ %s\n" % (n // 3600 % 24, n // 60 % 60, n % 60, n, line)
            (out if stream == "stdout" else err).append(stamped)
    return "".join(out), "".join(err)


# --------------------------------------------------------------------------- a container's log, as docker keeps it

PART = 16 * 1024


def rfc3339(ns):
    import time as _time
    secs, frac = divmod(int(ns), 10 ** 9)
    return _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(secs)) + ".%09dZ" % frac


class FakeDocker(object):
    """``docker inspect`` and ``docker logs [--timestamps] [--since T] [--tail N]`` over a json-file log
    kept as records ``(ns, stream, bytes)``, answered as docker does: a line over 16 KiB is stored as
    partial records of 16,384 bytes, ``--timestamps`` stamps each record (so later parts' times land
    inside the line), ``--tail`` takes the last N records, ``--since`` keeps times at or after it.
    ``docker logs`` is streamed one record per read, in the order docker writes them; ``delivered``
    counts the records handed out, so a test sees how much of the log a reader pulled."""

    def __init__(self, started_ns):
        self.records = []
        self.started_ns = started_ns
        self.delivered = 0
        self.calls = []

    def add(self, ns, stream, line):
        data = line.encode() if isinstance(line, str) else line
        data += b"\n"
        while len(data) > PART:
            self.records.append((ns, stream, data[:PART]))
            data = data[PART:]
            ns += 1
        self.records.append((ns, stream, data))
        return ns

    def add_lines(self, start_ns, lines, step_ns=10 ** 6):
        """``lines``: ``(stream, text)``; each record ``step_ns`` after the previous. Returns the next time."""
        ns = start_ns
        for stream, text in lines:
            ns = self.add(ns, stream, text) + step_ns
        return ns

    def run(self, args):
        """``docker inspect``, and ``docker logs`` as one whole output (a module run through modrun, which
        answers streamed commands with ``run_command``)."""
        args = list(args)
        if args[0].endswith("/timeout"):        # the reader bounds docker inspect with coreutils timeout
            args = args[3:]
        if args[1] == "logs":
            stream, out = self.open_stream(args, None), {0: [], 1: []}
            while not stream.finished:
                for which, data in stream.read():
                    out[which].append(data)
            return 0, b"".join(out[0]).decode(), b"".join(out[1]).decode()
        self.calls.append(args)
        if args[1] == "inspect":
            return 0, '{"Status": "running", "StartedAt": "%s"}\n' % rfc3339(self.started_ns), ""
        raise AssertionError("unexpected command %r" % args)

    def open_stream(self, args, timeout):
        self.calls.append(list(args))
        assert args[1] == "logs", args
        opts = args[2:-1]
        ts = "--timestamps" in opts
        since = tail = None
        if "--since" in opts:
            since = parse_rfc3339(opts[opts.index("--since") + 1])
        if "--tail" in opts:
            tail = int(opts[opts.index("--tail") + 1])
        recs = self.records[-tail:] if tail is not None else self.records
        recs = [r for r in recs if since is None or r[0] >= since]
        return _RecordStream(self, recs, ts)


def parse_rfc3339(text):
    import calendar
    head, _, frac = text.rstrip("Z").partition(".")
    secs = calendar.timegm(tuple(int(x) for x in head.replace("T", "-").replace(":", "-").split("-")) + (0, 0, 0))
    return secs * 10 ** 9 + int(frac.ljust(9, "0") or 0)


class _RecordStream(object):
    def __init__(self, docker, records, ts):
        self.docker = docker
        self.records = iter(records)
        self.ts = ts
        self.ended = False

    @property
    def finished(self):
        return self.ended

    def read(self):
        for ns, stream, data in self.records:
            self.docker.delivered += 1
            if self.ts:
                data = (rfc3339(ns) + " ").encode() + data
            return [(0 if stream == "stdout" else 1, data)]
        self.ended = True
        return [(0, b""), (1, b"")]

    def drain(self):
        return [], True

    def close(self):
        return None if not self.ended else 0

    def error_text(self):
        return ""
