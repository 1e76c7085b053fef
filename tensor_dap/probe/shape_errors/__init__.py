"""Shape errors explained: the failing line's operands and their shapes, found without running user code.

``evaluator`` re-evaluates a statement on ``meta`` tensors, ``source`` locates the failing
operation, ``hints`` names the mismatch in one sentence, ``explain`` puts them together.
"""

from .explain import explain, explain_frame
from .model import FrameExplanation, Operand, ShapeExplanation, classify

__all__ = ["FrameExplanation", "Operand", "ShapeExplanation", "classify", "explain", "explain_frame"]
