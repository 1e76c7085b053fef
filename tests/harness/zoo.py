"""The tensor zoo: every kind of tensor a summary must handle, with the head and tokens its line must show.

Shared by the summary tests, the DAP renderer tests and the zoo debuggee (the Variables panel tour).
"""

import torch

class Tagged(torch.Tensor):
    """A __torch_function__ subclass whose overrides must not run inside describe()."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.aminmax, torch.aminmax, torch.Tensor.mean):
            raise RuntimeError("subclass override should not be called")
        return super().__torch_function__(func, types, args, kwargs or {})


class CountingTorchFunction(torch.Tensor):
    """A __torch_function__ subclass that counts the calls into it: describe and explain must make none."""

    calls = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def _fake():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return torch.empty(2, 3)


def _inference():
    with torch.inference_mode():
        return torch.ones(3, 3)


def _nonleaf():
    a = torch.ones(4, requires_grad=True)
    return a * 2


def param_with_grad():
    p = torch.nn.Parameter(torch.ones(3, 2))
    (p * 3).sum().backward()
    return p


def _freed():
    t = torch.ones(8)
    t.untyped_storage().resize_(0)
    return t


ZOO = [
    # (id, factory, expected head, expected tokens in the line)
    ("f32", lambda: torch.randn(8, 16), "tensor[8, 16]", ["x∈[", "σ="]),
    ("f16", lambda: torch.randn(4, 5).half(), "tensor[4, 5] f16", ["x∈["]),
    ("bf16", lambda: torch.randn(4, 5).bfloat16(), "tensor[4, 5] bf16", ["x∈["]),
    ("f64", lambda: torch.randn(3, 7, dtype=torch.float64), "tensor[3, 7] f64", ["x∈["]),
    ("f8e4m3", lambda: torch.randn(12).to(torch.float8_e4m3fn), "tensor[12] f8e4m3", ["x∈["]),
    ("f8e5m2", lambda: torch.randn(12).to(torch.float8_e5m2), "tensor[12] f8e5m2", ["x∈["]),
    ("i8", lambda: torch.arange(-6, 6, dtype=torch.int8), "tensor[12] i8", ["x∈[-6, 5]"]),
    ("i16", lambda: torch.arange(20, dtype=torch.int16), "tensor[20] i16", ["x∈[0, 19]"]),
    ("i32", lambda: torch.arange(20, dtype=torch.int32), "tensor[20] i32", ["x∈[0, 19]"]),
    ("i64", lambda: torch.arange(20), "tensor[20] i64", ["x∈[0, 19]", "μ=9.5"]),
    ("u8", lambda: torch.arange(250, 256, dtype=torch.uint8).repeat(2), "tensor[12] u8", ["x∈[250, 255]"]),
    ("u16", lambda: torch.arange(12).to(torch.uint16), "tensor[12] u16", ["x∈[0, 11]"]),
    ("u32", lambda: torch.arange(12).to(torch.uint32), "tensor[12] u32", ["x∈[0, 11]"]),
    ("bool", lambda: torch.tensor([True] * 3 + [False] * 9), "tensor[12] bool", ["25% true"]),
    ("c64", lambda: torch.full((12,), 3 + 4j, dtype=torch.complex64), "tensor[12] c64", ["|x|∈[5, 5]"]),
    ("c128", lambda: torch.randn(12, dtype=torch.complex128), "tensor[12] c128", ["|x|∈["]),
    ("c32", lambda: torch.randn(12, dtype=torch.complex64).to(torch.complex32), "tensor[12] c32", []),
    ("0-dim float", lambda: torch.tensor(0.25), "tensor[]", ["0.25"]),
    ("0-dim bool", lambda: torch.tensor(True), "tensor[] bool", ["True"]),
    ("empty", lambda: torch.empty(0, 3), "tensor[0, 3]", ["empty"]),
    ("empty i64", lambda: torch.empty(5, 0, dtype=torch.long), "tensor[5, 0] i64", ["empty"]),
    ("transposed", lambda: torch.randn(30, 20).t(), "tensor[20, 30]", ["x∈["]),
    ("expanded", lambda: torch.arange(4.0).expand(1000, 4), "tensor[1000, 4]", ["x∈[0, 3]", "μ=1.5"]),
    ("strided slice", lambda: torch.arange(100.0).view(10, 10)[::3, 1::2], "tensor[4, 5]", ["x∈[1, 99]"]),
    ("channels_last", lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
     "tensor[2, 3, 4, 5]", ["x∈["]),
    ("sparse coo", lambda: torch.eye(6).to_sparse(), "tensor[6, 6]", ["sparse_coo", "nnz=6", "values∈[1, 1]"]),
    ("sparse csr", lambda: torch.eye(6).to_sparse_csr(), "tensor[6, 6]", ["sparse_csr", "nnz=6"]),
    ("sparse csc", lambda: torch.eye(6).to_sparse_csc(), "tensor[6, 6]", ["sparse_csc", "nnz=6"]),
    ("mkldnn", lambda: torch.arange(6.0).view(2, 3).to_mkldnn(), "tensor[2, 3]", ["mkldnn", "x∈[0, 5]", "μ=2.5"]),
    ("quantized", lambda: torch.quantize_per_tensor(torch.linspace(-1, 1, 16), 0.1, 0, torch.qint8),
     "tensor[16] qint8", ["quantized per_tensor_affine", "x∈[-1, 1]"]),
    ("meta", lambda: torch.empty(3, 4, device="meta"), "tensor[3, 4]", ["meta"]),
    ("fake", _fake, "FakeTensor[2, 3]", ["fake"]),
    ("nested", lambda: torch.nested.nested_tensor([torch.ones(2, 5), torch.ones(3, 5)]),
     "tensor[2, ?, 5]", ["nested", "x∈[1, 1]"]),
    ("nested jagged", lambda: torch.nested.nested_tensor([torch.ones(2, 5), torch.zeros(3, 5)],
                                                         layout=torch.jagged), "NestedTensor[2, ?, 5]", ["nested"]),
    ("subclass", lambda: torch.arange(6.0).as_subclass(Tagged), "Tagged[6]", ["x∈[0, 5]"]),
    ("inference", _inference, "tensor[3, 3]", ["inference", "x∈[1, 1]"]),
    ("requires_grad", lambda: torch.ones(11, requires_grad=True), "tensor[11]", ["grad"]),
    ("non-leaf", _nonleaf, "tensor[4]", ["grad", "MulBackward0"]),
    ("param with grad", param_with_grad, "Parameter[3, 2]", ["grad", "has .grad"]),
    ("nan+inf", lambda: torch.tensor([0.0, float("nan"), float("-inf"), 2.0] * 3), "tensor[12]",
     ["x∈[0, 2]", "NaN!", "-Inf!"]),
    ("all zero", lambda: torch.zeros(64, 64), "tensor[64, 64]", ["all zeros"]),
    ("freed storage", _freed, "tensor[8]", ["<"]),
]
