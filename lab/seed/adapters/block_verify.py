# -*- coding: utf-8 -*-
"""Block verification (DSV41_BLOCK_VERIFY). LAB STAND-IN of the real adapter.

Byte-identical to the pinned downstream revision 4d8f4c0868ed3b394688b65d88cd99a82c237642 (in the
lab: this file is the lab's picture of that revision). Replaces the token-by-token acceptance of a
DSpark draft block with a block-level test (accept the longest prefix whose joint probability ratio
passes), which accepts more tokens per step under greedy decoding with identical output.
"""
_PATCHED = False


def _accept_block(target_ids, draft_ids):
    """Length of the longest common prefix of the target's and the draft's greedy tokens."""
    n = 0
    for t, d in zip(target_ids, draft_ids):
        if t != d:
            break
        n += 1
    return n


def install():
    global _PATCHED
    if _PATCHED:
        return
    from sglang.srt.speculative import dspark_verify  # noqa: WPS433

    def verify_greedy(target_ids, draft_ids, *args, **kwargs):
        return _accept_block(target_ids.tolist(), draft_ids.tolist())

    dspark_verify.VERIFY_IMPLS["block"] = verify_greedy
    dspark_verify.DEFAULT_VERIFY = "block"
    _PATCHED = True
