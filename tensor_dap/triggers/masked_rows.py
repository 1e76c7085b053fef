"""Rows that are masked through and through, the usual story behind a softmax's NaN: a row of -inf scores, or an
attention query whose every key is masked (by its padding mask, its attention mask, or the two together). Read in
bounded pieces (``finite.anywhere``): the scores may be an activation of gigabytes."""

from __future__ import annotations

import torch

from . import finite
from .birth import Birth, input_tensors

# ops whose NaN a row of -inf along the last dim explains (a softmax over it, a row minus its own max or logsumexp):
# for others (a conv, a matmul) rows along the last dim mean nothing
ROW_OPS = frozenset({"softmax", "log_softmax", "_softmax", "_log_softmax", "softmin", "logsumexp", "sub", "rsub", "add",
                     "scaled_dot_product_attention", "multi_head_attention_forward"})


def has_masked_row(t: torch.Tensor) -> bool:
    """A row of ``t`` (along its last dim) is entirely -inf; a row too long to read whole is not looked at."""
    if not t.is_floating_point() or t.dim() == 0 or not 0 < t.shape[-1] <= finite.SLICE_ELEMENTS:
        return False
    if t.dim() == 1:
        return bool(torch.isneginf(t).all())
    return finite.anywhere(t, lambda p: torch.isneginf(p).all(-1).any())


def softmax_input(birth: Birth) -> bool:
    """The softmax input has a row (along its last dim) that is entirely -inf."""
    x = next(iter(input_tensors(birth.inputs)), None)
    if x is None or x.dim() == 0 or not x.is_floating_point():
        return birth.cause is not None  # NaN from Infs, shape unknown: still the likely story
    return has_masked_row(x) or birth.cause is not None


def any_input(birth: Birth) -> bool:
    """One of the op's inputs has a row (along its last dim) that is entirely -inf."""
    return any(has_masked_row(t) for t in input_tensors(birth.inputs))


def all_keys(birth: Birth) -> bool:
    """Some query of ``multi_head_attention_forward`` has every key masked, by its key_padding_mask (N, S), its
    attn_mask ((L, S) or (N * heads, L, S)), or the two together (left padding under a causal mask)."""
    masks = {name: t for name, t in birth.inputs if name in ("key_padding_mask", "attn_mask")
             and isinstance(t, torch.Tensor) and t.dim() > 0}
    if any(has_masked_row(m) if m.is_floating_point() else m.dtype == torch.bool
           and m.shape[-1] <= finite.SLICE_ELEMENTS and finite.anywhere(m, lambda p: p.all(-1).any())
           for m in masks.values()):
        return True
    if any(m.numel() > finite.SLICE_ELEMENTS for m in masks.values()):
        return False  # the two together: not told for masks this large (their copies below would be as large)
    with torch.no_grad():
        blocked = {name: m if m.dtype == torch.bool else torch.isneginf(m) for name, m in masks.items()}
        keys, attn = blocked.get("key_padding_mask"), blocked.get("attn_mask")
        if keys is None or attn is None or keys.dim() != 2:
            return False
        # How many keys each query may see in each sequence, as a product of the open positions: no (N, L, S)
        # temporary (a 4096-token causal mask over a batch of 32 would be 512 MB of it).
        keys_open, attn_open = (~keys).float(), (~attn).float()
        try:
            if attn.dim() == 2:  # (L, S), shared by the batch
                seen = attn_open @ keys_open.T  # (L, N)
            else:  # (N * heads, L, S)
                seen = torch.bmm(attn_open.view(keys.shape[0], -1, attn.shape[-1]), keys_open[:, :, None])
        except RuntimeError:  # shapes that do not line up: not told
            return False
        return bool((seen == 0).any())
