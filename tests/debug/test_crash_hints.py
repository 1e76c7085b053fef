"""The crash report's hint under backward()'s errors: given once, never when a watch already explained the error,
and never a failure of its own."""

from tensor_dap.debug.crash import hint_for


class Unprintable(RuntimeError):
    def __str__(self):
        raise ValueError("a __str__ that fails")


def test_each_backward_error_gets_its_hint_and_others_none():
    assert "names the tensor, the op that changed it in place" in hint_for(
        RuntimeError("one of the variables needed for gradient computation has been modified by an inplace operation"))
    assert "carries the freed graph" in hint_for(RuntimeError("Trying to backward through the graph a second time"))
    assert "a frozen model" in hint_for(
        RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn"))
    assert hint_for(ValueError("something else")) == ""


def test_no_hint_where_the_watch_already_noted_it_or_the_text_cannot_be_read():
    error = RuntimeError("Trying to backward through the graph a second time")
    error.__notes__ = ["tensor_dap: `hidden` [1, 2, 4] ... still carries the graph"]
    assert hint_for(error) == ""
    assert hint_for(Unprintable()) == ""
