"""The sequence layers' own shape checks, named: an RNN's hidden state of another batch, features that do not fit an
RNN or an attention layer, an attention mask made for another length.

torch says "Expected hidden size (1, 2, 8), got [1, 4, 8]": the hidden state kept from a batch of 4 meets an epoch's
last batch of 2; "The shape of the 2D attn_mask is torch.Size([5, 5]), but should be (7, 7)": a causal mask built
once for one length; "input.size(-1) must be equal to input_size. Expected 8, got 6" and "was expecting embedding
dimension of 8, but got 6": features that are not the layer's.
"""

from __future__ import annotations

import re

from ...format import fmt_shape, parse_shape
from .model import Operand

_HIDDEN = re.compile(r"Expected hidden(?:\[\d\])? size \(([\d, ]*)\), got \[([\d, ]*)\]")
_MASK = re.compile(r"The shape of the \dD attn_mask is torch\.Size\(\[([\d, ]*)\]\), but should be \(([\d, ]*)\)")
_FEATURES = re.compile(r"input\.size\(-1\) must be equal to input_size\. Expected (\d+), got (\d+)|"
                       r"was expecting embedding dimension of (\d+), but got (\d+)")


def sequence_hint(operands: list[Operand], message: str) -> str:
    """The hint for the family ``rnn/attention``; '' when the message is none of these."""
    tensors = [o for o in operands if o.kind == "tensor" and o.shape is not None]
    layer = next((o for o in operands if o.kind == "module"), None)
    found = _HIDDEN.search(message)
    if found:
        return _hidden(tensors, parse_shape(found.group(1)), parse_shape(found.group(2)))
    found = _MASK.search(message)
    if found:
        got, wanted = parse_shape(found.group(1)), parse_shape(found.group(2))
        mask = next((o.expr for o in tensors if o.shape == got), "the mask")
        length = wanted[-1] if wanted else "?"
        return (f"{mask} {fmt_shape(got)} was made for another length: this attention's sequence has {length} "
                f"positions, so it must be {fmt_shape(wanted)}. Build it from the batch (T = x.size(1); "
                "torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)), or crop one made for the longest "
                "length: mask[:T, :T]")
    found = _FEATURES.search(message)
    if found:
        wanted, got = (int(g) for g in (found.group(1, 2) if found.group(1) else found.group(3, 4)))
        x = next((o for o in tensors if o.shape and o.shape[-1] == got), None)
        what = f"{x.expr} {fmt_shape(x.shape)} has" if x is not None else "the input has"
        built = f"{layer.expr} ({layer.detail})" if layer is not None else "the layer"
        return (f"{what} {got} features in its last dim, but {built} takes {wanted}: build it for the features it is "
                "given, or check the input's layout ([length, batch, features] unless batch_first=True)")
    return ""


def _hidden(tensors: list[Operand], wanted: tuple[int, ...], got: tuple[int, ...]) -> str:
    hidden = next((o.expr for o in tensors if o.shape == got), "the hidden state")
    said = (f"{hidden} {fmt_shape(got)} does not fit: the layer wants {fmt_shape(wanted)} "
            "[layers × directions, batch, size]")
    if len(wanted) == len(got) == 3 and wanted[1] != got[1] and wanted[::2] == got[::2]:
        return (f"{said}: it was made for a batch of {got[1]}, and this batch has {wanted[1]} (an epoch's last, short "
                "batch, with the state kept from the batch before?). Make it for each batch from the batch's size, or "
                "pass None (zeros of the right size), or DataLoader(..., drop_last=True)")
    if len(wanted) == len(got) == 3 and wanted[0] != got[0]:
        return (f"{said}: it has {got[0]} layers × directions where the layer has {wanted[0]} (num_layers, "
                "bidirectional)")
    return said
