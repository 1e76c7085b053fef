"""The texts that tell torch's errors apart: watch's notes on ``backward()``'s (``triggers.backward_errors``) and the
crash report's hint (``crash.hint_for``) match the same ones."""

INPLACE = "modified by an inplace operation"
SECOND_TIME = "Trying to backward through the graph a second time"
NO_GRAPH = "does not require grad and does not have a grad_fn"
DEVICE_ASSERT = "device-side assert triggered"  # a CUDA kernel's check (an index out of range), reported late
