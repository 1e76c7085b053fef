"""Targets that do not fit a loss's scores, a DataLoader that cannot make a batch, an index past a dim: the crash
explanation names the operands (or, for a batch, the samples) and the usual fix."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from crashes import explained, run_script
from torch import nn
from torch.utils.data import DataLoader, Dataset

from tensor_dap.probe.shape_errors.collate import collate_hint

pytestmark = pytest.mark.timeout(60)


def _user_hint(ex) -> str:
    assert ex is not None and ex.frames[-1].filename == __file__
    return ex.frames[-1].hint


def test_sequence_logits_with_the_classes_last_are_told_to_move_them():
    """[batch, time, classes] logits straight into cross_entropy: torch takes time for the classes."""
    logits, tokens = torch.randn(8, 20, 50), torch.randint(0, 50, (8, 20))
    ex = explained(lambda: F.cross_entropy(logits, tokens))
    assert ex.kind == "loss targets"
    hint = _user_hint(ex)
    assert hint.startswith("logits [8, 20, 50] is read as [batch, classes, ...]: 20 classes on dim 1, so the targets "
                           "must be [8, 50], but tokens is [8, 20]: the classes are the last dim"), hint
    assert "cross_entropy(logits.transpose(1, 2), tokens)" in hint
    assert "cross_entropy(logits.reshape(-1, 50), tokens.reshape(-1))" in hint


def test_other_target_sizes_say_what_the_targets_must_be():
    scores, targets = torch.randn(4, 5, 6), torch.randint(0, 5, (4, 7))
    hint = _user_hint(explained(lambda: F.cross_entropy(scores, targets)))
    assert hint == "scores [4, 5, 6] is read as [batch, classes, ...]: 5 classes on dim 1, so the targets must be " \
                   "[4, 6] (one class id per position), not [4, 7]", hint


def test_bce_targets_without_the_scores_last_dim_get_squeeze_or_unsqueeze():
    criterion, logits, y = nn.BCEWithLogitsLoss(), torch.randn(8, 1), torch.randint(0, 2, (8,)).float()
    ex = explained(lambda: criterion(logits, y))
    assert ex.kind == "loss targets"
    assert _user_hint(ex) == ("y [8] and logits [8, 1] must have one shape: drop the scores' last dim, "
                              "logits.squeeze(-1), or give the targets one, y.unsqueeze(-1)")


def test_one_hot_integer_targets_are_read_as_probabilities_and_told_so():
    scores, labels = torch.randn(8, 10), F.one_hot(torch.randint(0, 10, (8,)), 10)
    hint = _user_hint(explained(lambda: F.cross_entropy(scores, labels)))
    assert hint.startswith("labels [8, 10] has the scores' shape, so cross_entropy reads it as class probabilities")
    assert "labels.argmax(1)" in hint and "labels.float()" in hint


def test_an_index_past_a_dim_names_the_tensor_and_its_valid_indices():
    preds = torch.randn(5)
    ex = explained(lambda: [preds[i] for i in range(1, 6)])
    assert ex.kind == "out of range"
    assert _user_hint(ex).startswith("`preds` [5] has 5 items along dim 0 (indices 0–4, or -5–-1), and index 5 was "
                                     "asked: an off-by-one"), _user_hint(ex)


class Images(Dataset):
    """Eight RGB images, one of them grayscale."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.rand(1 if i == 5 else 3, 8, 8), i % 2


def test_a_grayscale_image_among_rgb_ones_is_told_in_the_main_process():
    with pytest.raises(RuntimeError) as caught:
        list(DataLoader(Images(), batch_size=4))
    hint = collate_hint(str(caught.value))
    assert hint == ("sample 1 of the batch is [1, 8, 8] where sample 0 is [3, 8, 8]: a grayscale (or RGBA) image "
                    "among RGB ones; open each image with .convert('RGB') in the dataset"), hint


def test_samples_of_two_lengths_are_told_to_be_padded():
    assert "pad variable-length samples in a collate_fn" in collate_hint(
        "stack expects each tensor to be equal size, but got [12] at entry 0 and [9] at entry 3")


def test_a_dataset_of_pil_images_or_other_objects_is_told_to_make_tensors():
    """The message as default_collate writes it (PIL is not needed to read it)."""
    pil = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found "
           "<class 'PIL.Image.Image'>")
    assert "add transforms.ToTensor()" in collate_hint(pil)

    class Records(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return object()

    with pytest.raises(TypeError) as caught:
        list(DataLoader(Records(), batch_size=2))
    assert collate_hint(str(caught.value)).startswith("the dataset returns object objects: turn each sample into")


WORKERS = """\
import torch
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.rand(1 if i == 5 else 3, 8, 8)


for x in DataLoader(Images(), batch_size=4, num_workers=1):
    pass
"""


def test_unequal_samples_in_a_worker_are_told_through_tensor_dap_run(tmp_path):
    """In a worker the batch fails earlier and otherwise ("Trying to resize storage that is not resizable"),
    re-raised in the main process: the report's heading and hint say what it means."""
    script = tmp_path / "loader.py"
    script.write_text(WORKERS)
    err = " ".join(run_script(script).stderr.split())
    assert "Batch not made: RuntimeError: Caught RuntimeError in DataLoader worker process 0." in err, err
    assert "→ the samples of a batch differ in shape: a worker makes room for the first sample's shape" in err


def test_an_rnn_hidden_state_kept_from_a_larger_batch_is_told_so():
    """The state made for a batch of 4 meets an epoch's last batch of 2."""
    rnn, hidden = nn.GRU(8, 16), torch.zeros(1, 4, 16)
    short = torch.randn(5, 2, 8)
    ex = explained(lambda: rnn(short, hidden))
    assert ex.kind == "rnn/attention"
    assert _user_hint(ex).startswith("hidden [1, 4, 16] does not fit: the layer wants [1, 2, 16] [layers × directions, "
                                     "batch, size]: it was made for a batch of 4, and this batch has 2"), _user_hint(ex)


def test_an_attention_mask_for_another_length_and_features_that_are_not_the_layers():
    attn = nn.MultiheadAttention(8, 2, batch_first=True)
    causal, x = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1), torch.randn(2, 7, 8)
    hint = _user_hint(explained(lambda: attn(x, x, x, attn_mask=causal)))
    assert hint.startswith("causal [5, 5] was made for another length: this attention's sequence has 7 positions, so "
                           "it must be [7, 7]"), hint
    narrow = torch.randn(2, 7, 6)
    ex = explained(lambda: attn(narrow, narrow, narrow))  # torch asserts this one (an AssertionError)
    assert ex.kind == "rnn/attention"
    assert _user_hint(ex).startswith("narrow [2, 7, 6] has 6 features in its last dim, but attn "
                                     "(MultiheadAttention(8, heads=2)"), _user_hint(ex)
    lstm = nn.LSTM(8, 16)
    assert _user_hint(explained(lambda: lstm(narrow))).startswith(
        "narrow [2, 7, 6] has 6 features in its last dim, but lstm (LSTM(8→16)) takes 8")
