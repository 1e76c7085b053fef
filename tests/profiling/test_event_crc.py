"""TensorBoard's record checksum from C: the same values, the same files (read back by TensorBoard)."""

import random

from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
from tensorboard.summary.writer import record_writer

from tensor_dap.profiling.event_crc import use_fast_crc


def test_fast_checksum_is_tensorboards_own_and_files_read_back(tmp_path):
    assert use_fast_crc() and use_fast_crc()  # once, then remembered
    assert record_writer.masked_crc32c is not pywrap_tensorflow.masked_crc32c
    rng = random.Random(0)
    for n in (0, 1, 7, 8, 60, 1000):
        data = bytes(rng.randrange(256) for _ in range(n))
        assert record_writer.masked_crc32c(data) == pywrap_tensorflow.masked_crc32c(data)
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(tmp_path)) as w:
        for step in range(5):
            w.add_scalar("x", step * 0.5, step)
    acc = ea.EventAccumulator(str(tmp_path))
    acc.Reload()  # TensorBoard checks every record's checksum as it reads
    assert [e.value for e in acc.Scalars("x")] == [0.0, 0.5, 1.0, 1.5, 2.0]
