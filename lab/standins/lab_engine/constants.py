"""The engine's and the lab node's fixed figures (bytes unless named otherwise; see the memory model in the
package docstring)."""
from __future__ import annotations

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


DISAGREE = ("FlashInfer autotune: per-rank caches disagree, discarding them and tuning from scratch so all "
            "ranks agree on the tactics.")
WO_A_WEIGHTS = 43                   # one wo_a per layer
WO_A_DROP_KEPT = 2                  # bf16 copies DROP keeps (dequantized copy not bit-identical)
WO_A_COPY_MIB = 32
