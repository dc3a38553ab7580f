"""How the expert GEMMs run on this rank and the local TP3 padding (lab wording of both lines)."""
from __future__ import annotations

import os

from .constants import MOE_INTERMEDIATE
from .knobs import fault


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
