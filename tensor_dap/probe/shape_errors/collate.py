"""A ``DataLoader`` that cannot make a batch: its samples differ in shape, or are not tensors.

``default_collate`` stacks the samples of a batch: "stack expects each tensor to be equal size, but got [3, 224, 224]
at entry 0 and [1, 224, 224] at entry 5" (a grayscale image among RGB ones; sequences of different lengths), or
"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found <class
'PIL.Image.Image'>" (a dataset without ``ToTensor``). In a worker process the unequal samples fail earlier, with
"Trying to resize storage that is not resizable". The error is raised in torch's code (in a worker process,
re-raised in the main one), far from the dataset: the hint is read from the message, so it is the same wherever
the batch was made.
"""

from __future__ import annotations

import re

from ...format import fmt_shape, parse_shape

_STACK = re.compile(r"stack expects each tensor to be equal size, but got \[([\d, ]*)\] at entry (\d+) and "
                    r"\[([\d, ]*)\] at entry (\d+)")
_FOUND = re.compile(r"default_collate: batch must contain .*?; found <class '([\w.]+)'>")


def collate_hint(message: str) -> str:
    """The hint for the family ``collate``, from torch's message alone; ''."""
    found = _STACK.search(message)
    if found:
        a, i, b, j = parse_shape(found.group(1)), found.group(2), parse_shape(found.group(3)), found.group(4)
        said = f"sample {j} of the batch is {fmt_shape(b)} where sample {i} is {fmt_shape(a)}"
        differ = [d for d in range(min(len(a), len(b))) if a[d] != b[d]] if len(a) == len(b) else []
        if len(a) == len(b) == 3 and differ == [0] and {a[0], b[0]} <= {1, 3, 4}:
            return (f"{said}: a grayscale (or RGBA) image among RGB ones; open each image with .convert('RGB') in "
                    "the dataset")
        if len(differ) == 1:
            return (f"{said}: the samples differ in dim {differ[0]}; pad variable-length samples in a collate_fn "
                    "(torch.nn.utils.rnn.pad_sequence), or resize / crop them to one size in the dataset's transform")
        return f"{said}: every sample of a batch needs one shape (a collate_fn can pad or pack them)"
    if "Trying to resize storage that is not resizable" in message:  # a worker stacks into room for sample 0's shape
        return ("the samples of a batch differ in shape: a worker makes room for the first sample's shape times the "
                "batch, and a sample of another shape does not fit (num_workers=0 names the shapes). Pad "
                "variable-length samples in a collate_fn (torch.nn.utils.rnn.pad_sequence), resize or crop images to "
                "one size, or .convert('RGB') a grayscale image among RGB ones")
    found = _FOUND.search(message)
    if found:
        kind = found.group(1)
        if kind.startswith("PIL."):
            return ("the dataset returns PIL images: add transforms.ToTensor() (or v2.ToImage() and "
                    "v2.ToDtype(torch.float32, scale=True)) to its transform")
        return (f"the dataset returns {kind} objects: turn each sample into tensors (or numbers, arrays) in "
                "__getitem__, or give the DataLoader a collate_fn that batches them")
    return ""
