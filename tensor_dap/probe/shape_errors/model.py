"""What a shape-error explanation says: the failing operation's operands and one hint, per frame. Pure data."""

from __future__ import annotations

import re
from dataclasses import dataclass

_KINDS = (
    # a loss's targets that do not fit its scores (``targets``); a DataLoader that cannot stack its samples
    ("loss targets", re.compile(r"Expected target size \[[\d, ]*\], got \[[\d, ]*\]|"
                                r"Target size \(torch\.Size\(\[[\d, ]*\]\)\) must be the same as input size|"
                                r"Expected floating point type for target with class probabilities")),
    ("rnn/attention", re.compile(r"Expected hidden(?:\[\d\])? size \(|The shape of the \dD attn_mask is|"
                                 r"input\.size\(-1\) must be equal to input_size|"
                                 r"was expecting embedding dimension of \d+, but got \d+")),
    ("collate", re.compile(r"stack expects each tensor to be equal size|default_collate: batch must contain|"
                           r"DataLoader worker process \d+\.[\s\S]*Trying to resize storage that is not resizable")),
    # an op's contract broken by a value (``contracts``): scores handed to binary cross-entropy, a parameter changed
    # in place while autograd records, a tensor of many values where Python wants one truth value
    ("probabilities", re.compile(r"all elements of (?:input|target) should be between 0 and 1")),
    ("leaf in place", re.compile(r"a leaf Variable that requires grad (?:is being|has been) used in an in-place")),
    ("ambiguous", re.compile(r"Boolean value of Tensor with more than one (?:value|element) is ambiguous")),
    ("one value", re.compile(r"a Tensor with \d+ elements cannot be converted to Scalar|"
                             r"only one element tensors can be converted to Python scalars")),
    # a pool or conv window larger than what is left of the feature map
    ("too small", re.compile(r"Output size is too small|Kernel size can't be greater than actual input size")),
    # an id past an Embedding's rows, a class past the scores' (cross_entropy, nll_loss on the CPU)
    ("out of range", re.compile(r"Target -?\d+ is out of bounds|index out of range in self|"
                                r"index -?\d+ is out of bounds for dimension \d+ with size \d+")),
    # backward() on a loss of many values (reduction='none', a missing .mean())
    ("not scalar", re.compile(r"grad can be implicitly created only for (?:real )?scalar outputs")),
    # a loss's scores and targets with different batch sizes: the batch dim changed on the way (a view(-1, n))
    ("batch size", re.compile(r"Expected input batch_size \(\d+\) to match target batch_size \(\d+\)")),
    # (a conv's "Input type (X) and weight type (Y) should be the same" names devices as torch.cuda.FloatTensor,
    # dtypes as double or c10::Half: devices first)
    ("devices", re.compile(r"Expected all tensors to be on the same device|is not on the expected device|"
                           r"Input and parameter tensors are not at the same device|"
                           r"should be either on cpu or on the same device|"
                           r"Input type \(torch\.[\w.]+\) and (?:weight|bias) type \(torch\.[\w.]+\)", re.IGNORECASE)),
    ("dtypes", re.compile(r"must have the same dtype|expected scalar type \w+ but found \w+|"
                          r"Found dtype \w+ but expected \w+|expected target dtype to be|"
                          r"to have one of the following scalar types|"
                          r"Input type \([\w:]+\) and (?:weight|bias) type \([\w:]+\) should be the same|"
                          r"mixed dtype \(CPU\): all inputs must share same datatype|"
                          r"input dtype \([\w.]+\) does not match weight dtype", re.IGNORECASE)),
    # batch/instance norm in training mode on one value per channel: a batch of one, or a 1x1 feature map
    ("batch of one", re.compile(r"Expected more than 1 (?:value per channel|spatial element) when training")),
    ("matmul", re.compile(r"cannot be multiplied|mat1 and mat2|self and mat2|same reduction dim|"
                          r"Expected size for first two dimensions of batch2|inconsistent tensor size|"
                          r"size mismatch, m1|input and weight", re.IGNORECASE)),
    ("broadcast", re.compile(r"must match the size of tensor b|broadcast|must match the existing size|"
                             r"expanded size of the tensor", re.IGNORECASE)),
    # view() of a transposed/permuted/expanded tensor: the sizes are fine, the memory layout is not
    ("not contiguous", re.compile(r"view size is not compatible with input tensor's size and stride", re.IGNORECASE)),
    ("size mismatch", re.compile(r"size mismatch|Sizes of tensors must match|is invalid for input of size|"
                                 r"to have \d+ channels|shape mismatch|"
                                 r"must match|number of sizes provided|expected input with shape", re.IGNORECASE)),
    ("dims", re.compile(r"Dimension out of range|Expected \d+D|expected \d+D|number of dimensions|"
                        r"\d+D (?:or \d+D )?(?:\w+ )?tensor expected|"
                        r"too many indices|dimensions? (?:of|but)|expected .* dims?\b|got \d+D", re.IGNORECASE)),
)


def classify(exc: BaseException) -> str | None:
    """The family of ``exc`` (the first word of each ``_KINDS`` entry: 'out of range', 'batch size', 'dtypes',
    'devices', 'batch of one', 'matmul', ...), or None when it is none of these."""
    if not isinstance(exc, (RuntimeError, ValueError, IndexError, TypeError, AssertionError)):  # (attention asserts)
        return None
    text = str(exc)
    for kind, pattern in _KINDS:
        if pattern.search(text):
            return kind
    return None


@dataclass(frozen=True)
class Operand:
    expr: str  # the source text of the sub-expression
    kind: str  # "tensor", "module", "value", "unknown"
    shape: tuple[int, ...] | None = None
    dtype: str = ""
    device: str = ""
    detail: str = ""  # a module's repr or a value's short repr


@dataclass(frozen=True)
class FrameExplanation:
    filename: str
    lineno: int
    function: str
    source: str  # the failing statement (its first lines)
    expr: str  # the failing operation, "" when it could not be pinned down
    operands: tuple[Operand, ...]
    hint: str  # one sentence naming the mismatch, "" when none can be computed


@dataclass(frozen=True)
class ShapeExplanation:
    kind: str
    error: str  # the exception's first line
    frames: tuple[FrameExplanation, ...]  # innermost first
