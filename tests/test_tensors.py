"""Tensor views (torch fast path, DLPack) and the SFA layouts TMA reads as they are."""

from __future__ import annotations

import pytest

from dgx.tensors import TensorView, as_view, require_cuda
from dgx.layout import SfaTma, sfa_tma_layout

# --- tensors --------------------------------------------------------------------------------------


def test_torch_cpu_views():
    torch = pytest.importorskip("torch")
    cases = [
        (torch.float8_e4m3fn, "float8_e4m3fn"),
        (torch.bfloat16, "bfloat16"),
        (torch.float32, "float32"),
        (torch.int32, "int32"),
    ]
    for tdtype, name in cases:
        t = torch.zeros(6, 8, dtype=torch.float32).to(tdtype)
        v = as_view(t, "t")
        assert (v.ptr, v.shape, v.strides, v.dtype) == (t.data_ptr(), (6, 8), (8, 1), name)
        assert (v.device, v.device_kind) == (-1, "cpu")
    t = torch.zeros(16, 32, dtype=torch.float32).t()[2:]  # a strided, offset view
    v = as_view(t, "t")
    assert v.shape == (30, 16) and v.strides == (1, 32) and v.ptr == t.data_ptr()
    with pytest.raises(TypeError, match="t: expected a tensor of dtype .* got torch.float16"):
        as_view(torch.zeros(2, dtype=torch.float16), "t")
    with pytest.raises(TypeError, match="x: expected a tensor .* got list"):
        as_view([1, 2], "x")


def test_dlpack_path_matches_torch_fast_path():
    torch = pytest.importorskip("torch")

    class OnlyDlpack:  # not a torch tensor: goes through __dlpack__ and the DLPack structs
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, *args, **kwargs):
            return self.t.__dlpack__(*args, **kwargs)

    for t in (torch.arange(24, dtype=torch.float32).reshape(4, 6)[:, 1:], torch.zeros(3, 5, dtype=torch.bfloat16)):
        fast, generic = as_view(t, "t"), as_view(OnlyDlpack(t), "t")
        assert (generic.ptr, generic.shape, generic.strides, generic.dtype) == (
            fast.ptr,
            fast.shape,
            fast.strides,
            fast.dtype,
        )
        assert generic.device_kind == "cpu"


def test_cpu_tensor_refused_by_require_cuda():
    torch = pytest.importorskip("torch")
    view = as_view(torch.zeros(4, 4), "A")
    with pytest.raises(ValueError, match="A: expected a tensor in CUDA device memory; got one on cpu"):
        require_cuda(view, "A")
    gpu_view = TensorView(0x1000, (4, 4), (4, 1), "float32", 1)
    with pytest.raises(ValueError, match=r"A: expected a tensor on cuda:0 like the others; got cuda:1"):
        require_cuda(gpu_view, "A", 0)


BASE = 0x7F0000000000


# --- SFA layouts read by TMA -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, strides, ptr, expect",
    [
        # TMA-aligned M-major (DeepGEMM's layout): a row of M floats per k-block, rows 16-byte aligned.
        ((250, 56), (1, 252), BASE, SfaTma(250, 56, 1008)),
        # One k-block (K <= 128): any [M, 1] with unit M stride; the row stride is never used.
        ((300, 1), (1, 1), BASE, SfaTma(300, 1, 1200)),
        # One row, M-major: any 16-byte multiple along K works.
        ((1, 5), (7, 4), BASE, SfaTma(1, 5, 16)),
        # Row-major: converted.
        ((256, 56), (56, 1), BASE, None),
        # M-major with an unaligned row stride: converted.
        ((250, 56), (1, 250), BASE, None),
        # Rows that overlap (stride below M): converted.
        ((250, 56), (1, 248), BASE, None),
        # Base address not 16-byte aligned: converted.
        ((256, 56), (1, 256), BASE + 4, None),
    ],
)
def test_sfa_tma_layout(shape, strides, ptr, expect):
    assert sfa_tma_layout(TensorView(ptr, shape, strides, "float32", 0)) == expect
