"""TensorBoard's event records, checksummed in C: the same bytes, without stalling the training loop.

Every record TensorBoard writes carries masked CRC32C checksums that its writer computes in pure
Python: ~10 µs for a 60-byte scalar event, in the writer's thread with the GIL held, so the
training thread waits for it. With ``google-crc32c`` (a dependency of tensor_dap) the same
checksum comes from C in well under a microsecond. ``use_fast_crc`` swaps it in once, after
checking that both give the same value, for every SummaryWriter in the process; the files do not
change by a bit.
"""

from __future__ import annotations

import functools


def _masked(crc: int) -> int:
    """TFRecord's mask: rotate right by 15 and add a constant, in 32 bits."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


@functools.cache
def use_fast_crc() -> bool:
    """Make TensorBoard's record writer checksum in C (once); False (nothing changed) when that is not possible."""
    ok = False
    try:
        import google_crc32c
        from tensorboard.summary.writer import record_writer

        def masked_crc32c(data: bytes) -> int:
            return _masked(google_crc32c.value(bytes(data)))

        samples = (b"", b"\x00" * 8, bytes(range(256)) * 3)
        if all(masked_crc32c(s) == record_writer.masked_crc32c(s) for s in samples):
            record_writer.masked_crc32c = masked_crc32c
            ok = True
    except Exception:  # noqa: BLE001 - no package, another tensorboard: keep its own checksum
        ok = False
    return ok
