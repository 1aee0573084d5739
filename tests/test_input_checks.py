"""Every input check of the GEMM entry points, fed TensorViews with fake device pointers (no GPU is
touched)."""

from __future__ import annotations

import re

import pytest

from dgx import gemm, jit, launch
from fake_views import BASE, fake_view

# --- fp8_gemm_nt input checks (no GPU) ------------------------------------------------------------

M, N, K = 256, 512, 1024


def _view(shape, dtype, strides=None, ptr=BASE, device=0):
    return fake_view(shape, dtype, strides, ptr, device)


def _inputs(**over):
    views = {
        "A": _view((M, K), "float8_e4m3fn", ptr=BASE),
        "SFA": _view((M, K // 128), "float32", strides=(1, M), ptr=BASE + 0x100000),
        "B": _view((N, K), "float8_e4m3fn", ptr=BASE + 0x200000),
        "SFB": _view((N // 128, K // 128), "float32", ptr=BASE + 0x300000),
        "d": _view((M, N), "bfloat16", ptr=BASE + 0x400000),
    }
    views.update(over)
    return (views["A"], views["SFA"]), (views["B"], views["SFB"]), views["d"]


class Launched(Exception):
    pass


@pytest.fixture
def no_launch(monkeypatch):
    """Anything past the checks (planning, launching) raises Launched: valid inputs reach it, bad ones not."""

    def plan(*args, **kwargs):
        raise Launched()

    monkeypatch.setattr(launch, "plan", plan)


def test_valid_inputs_pass_every_check(no_launch):
    with pytest.raises(Launched):
        gemm.fp8_gemm_nt(*_inputs())
    # A wider M-major row stride (a slice of a larger buffer) is read as is too.
    sfa_mn_major = _view((M, K // 128), "float32", strides=(1, M + 4), ptr=BASE + 0x100000)
    with pytest.raises(Launched):
        gemm.fp8_gemm_nt(*_inputs(SFA=sfa_mn_major))


@pytest.mark.parametrize(
    "over, error, message",
    [
        (dict(A=_view((M, K), "bfloat16")), TypeError, "A: expected dtype float8_e4m3fn; got bfloat16"),
        (dict(B=_view((N, K), "float32", ptr=BASE + 0x200000)), TypeError, "B: expected dtype float8_e4m3fn"),
        (dict(SFA=_view((M, K // 128), "bfloat16", ptr=BASE + 0x100000)), TypeError, "SFA: expected dtype float32"),
        (dict(d=_view((M, N), "int32", ptr=BASE + 0x400000)), TypeError, "d: expected dtype bfloat16"),
        (dict(A=_view((1, M, K), "float8_e4m3fn")), ValueError, "A: expected a 2-D tensor"),
        (dict(B=_view((N, K + 128), "float8_e4m3fn", ptr=BASE + 0x200000)), ValueError, f"B: expected K = {K}"),
        (dict(d=_view((M, N + 8), "bfloat16", ptr=BASE + 0x400000)), ValueError, f"d: expected shape ({M}, {N})"),
        (dict(SFA=_view((M, K // 64), "float32", ptr=BASE + 0x100000)), ValueError, "SFA: expected shape"),
        (dict(SFB=_view((N // 128, K // 64), "float32", ptr=BASE + 0x300000)), ValueError, "SFB: expected shape"),
        (dict(A=_view((M, K), "float8_e4m3fn", strides=(K + 8, 1))), ValueError, "A: TMA needs row strides that are a multiple of 16 bytes"),
        (dict(A=_view((M, K), "float8_e4m3fn", strides=(1, M))), ValueError, "A: expected contiguous rows"),
        (dict(A=_view((M, K), "float8_e4m3fn", ptr=BASE + 8)), ValueError, "A: TMA needs a 16-byte aligned base address"),
        (dict(d=_view((M, N), "bfloat16", ptr=BASE + 0x400004)), ValueError, "d: TMA needs a 16-byte aligned base address"),
        (dict(SFA=_view((M, K // 128), "float32", ptr=BASE + 0x100002)), ValueError, "SFA: expected an address aligned to 4 bytes"),
        (dict(SFB=_view((N // 128, K // 128), "float32", strides=(1, N // 128), ptr=BASE + 0x300000)), ValueError, "SFB: expected a contiguous row-major tensor"),
        (dict(B=_view((N, K), "float8_e4m3fn", ptr=BASE + 0x200000, device=1)), ValueError, "B: expected a tensor on cuda:0 like the others; got cuda:1"),
    ],
)
def test_input_check(no_launch, over, error, message):
    with pytest.raises(error, match=re.escape(message)):
        gemm.fp8_gemm_nt(*_inputs(**over))


def test_n_must_be_a_multiple_of_8(no_launch):
    n = 500
    a, _, _ = _inputs()
    b = (_view((n, K), "float8_e4m3fn", ptr=BASE + 0x200000), _view((4, K // 128), "float32", ptr=BASE + 0x300000))
    d = _view((M, n), "bfloat16", ptr=BASE + 0x400000)
    with pytest.raises(ValueError, match=r"N must be a multiple of 8.*got N = 500"):
        gemm.fp8_gemm_nt(a, b, d)


def test_pairs_and_c(no_launch):
    (A, SFA), b, d = _inputs()
    with pytest.raises(TypeError, match="a: expected a \\(tensor, scales\\) pair; got TensorView"):
        gemm.fp8_gemm_nt(A, b, d)
    with pytest.raises(ValueError, match="c"):
        gemm.fp8_gemm_nt((A, SFA), b, d, c=d)


def test_cpu_tensor_is_refused(no_launch):
    torch = pytest.importorskip("torch")
    a_cpu = torch.zeros(M, K, dtype=torch.float32).to(torch.float8_e4m3fn)
    (_, SFA), b, d = _inputs()
    with pytest.raises(ValueError, match="A: expected a tensor in CUDA device memory; got one on cpu"):
        gemm.fp8_gemm_nt((a_cpu, SFA), b, d)
    (A, _), b, d = _inputs()
    with pytest.raises(ValueError, match="d: expected a tensor in CUDA device memory; got one on cpu"):
        gemm.fp8_gemm_nt((A, SFA), b, torch.zeros(M, N, dtype=torch.bfloat16))


def test_m_zero_returns_without_touching_the_gpu(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("M = 0 must not plan, compile or launch anything")

    monkeypatch.setattr(launch, "plan", forbidden)
    monkeypatch.setattr(launch, "get_num_sms", forbidden)
    monkeypatch.setattr(jit, "get_kernel", forbidden)
    a = (_view((0, K), "float8_e4m3fn"), _view((0, K // 128), "float32", ptr=BASE + 0x100000))
    _, b, _ = _inputs()
    d = _view((0, N), "bfloat16", ptr=BASE + 0x400000)
    assert gemm.fp8_gemm_nt(a, b, d) is None


# The per-call fast path for torch tensors has its own tests: tests/test_fastpath.py.


G, GN = 4, 256


def _grouped_inputs(kind, **over):
    if kind == "contiguous":
        views = {
            "A": _view((M, K), "float8_e4m3fn", ptr=BASE),
            "SFA": _view((M, K // 128), "float32", strides=(1, M), ptr=BASE + 0x100000),
            "B": _view((G, GN, K), "float8_e4m3fn", ptr=BASE + 0x200000),
            "SFB": _view((G, GN // 128, K // 128), "float32", ptr=BASE + 0x300000),
            "d": _view((M, GN), "bfloat16", ptr=BASE + 0x400000),
            "idx": _view((M,), "int32", ptr=BASE + 0x500000),
        }
    else:
        views = {
            "A": _view((G, M, K), "float8_e4m3fn", ptr=BASE),
            "SFA": _view((G, M, K // 128), "float32", strides=(M * K // 128, 1, M), ptr=BASE + 0x100000),
            "B": _view((G, GN, K), "float8_e4m3fn", ptr=BASE + 0x200000),
            "SFB": _view((G, GN // 128, K // 128), "float32", ptr=BASE + 0x300000),
            "d": _view((G, M, GN), "bfloat16", ptr=BASE + 0x400000),
            "idx": _view((G,), "int32", ptr=BASE + 0x500000),
        }
    views.update(over)
    return (views["A"], views["SFA"]), (views["B"], views["SFB"]), views["d"], views["idx"]


@pytest.fixture
def no_grouped_launch(monkeypatch):
    def plan(*args, **kwargs):
        raise Launched()

    monkeypatch.setattr(launch, "plan", plan)


def _call(kind, args):
    from dgx import grouped

    if kind == "contiguous":
        grouped.m_grouped_fp8_gemm_nt_contiguous(*args)
    else:
        grouped.m_grouped_fp8_gemm_nt_masked(*args, 64)


@pytest.mark.parametrize("kind", ["contiguous", "masked"])
def test_grouped_valid_inputs_pass_every_check(no_grouped_launch, kind):
    with pytest.raises(Launched):
        _call(kind, _grouped_inputs(kind))


@pytest.mark.parametrize(
    "kind, over, error, message",
    [
        ("contiguous", dict(idx=_view((M,), "float32", ptr=BASE + 0x500000)), TypeError, "m_indices: expected dtype int32"),
        ("contiguous", dict(idx=_view((M - 1,), "int32", ptr=BASE + 0x500000)), ValueError, "m_indices: expected shape"),
        ("contiguous", dict(B=_view((GN, K), "float8_e4m3fn", ptr=BASE + 0x200000)), ValueError, "B: expected a 3-D tensor"),
        ("contiguous", dict(B=_view((0, GN, K), "float8_e4m3fn", ptr=BASE + 0x200000)), ValueError, "B: expected at least one group"),
        ("contiguous", dict(SFB=_view((G, GN // 128, K // 64), "float32", ptr=BASE + 0x300000)), ValueError, "SFB: expected shape"),
        ("contiguous", dict(B=_view((G, GN, K), "float8_e4m3fn", strides=(GN * K * 2, K, 1), ptr=BASE + 0x200000)),
         ValueError, "B: expected the groups stored one after another"),
        ("contiguous", dict(A=_view((M - 64, K), "float8_e4m3fn"), SFA=_view((M - 64, K // 128), "float32", strides=(1, M), ptr=BASE + 0x100000),
                            d=_view((M - 64, GN), "bfloat16", ptr=BASE + 0x400000), idx=_view((M - 64,), "int32", ptr=BASE + 0x500000)),
         ValueError, "M_sum must be a multiple of the contiguous-layout alignment 128"),
        ("contiguous", dict(d=_view((M, GN + 8), "bfloat16", ptr=BASE + 0x400000)), ValueError, "d: expected shape"),
        ("masked", dict(idx=_view((G + 1,), "int32", ptr=BASE + 0x500000)), ValueError, "masked_m: expected shape"),
        ("masked", dict(A=_view((G + 1, M, K), "float8_e4m3fn")), ValueError, "A: expected 4 groups like B"),
        ("masked", dict(d=_view((G, M, GN), "bfloat16", strides=(M * GN + 8, GN, 1), ptr=BASE + 0x400000)),
         ValueError, "d: expected the groups stored one after another"),
        ("masked", dict(A=_view((M, K), "float8_e4m3fn")), ValueError, "A: expected a 3-D tensor"),
        ("masked", dict(idx=_view((G,), "int32", ptr=BASE + 0x500000, device=1)), ValueError, "masked_m: expected a tensor on cuda:0"),
    ],
)
def test_grouped_input_check(no_grouped_launch, kind, over, error, message):
    with pytest.raises(error, match=re.escape(message)):
        _call(kind, _grouped_inputs(kind, **over))


def test_masked_expected_m_must_be_positive(no_grouped_launch):
    from dgx import grouped

    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="expected_m: expected a positive int"):
            grouped.m_grouped_fp8_gemm_nt_masked(*_grouped_inputs("masked"), bad)


def test_unreadable_sfa_layout_of_non_torch_tensor_raises_before_planning(no_launch):
    odd = _view((M, K // 128), "float32", strides=(1, M + 1), ptr=BASE + 0x100000)
    with pytest.raises(ValueError, match="SFA: expected the TMA-aligned MN-major layout"):
        gemm.fp8_gemm_nt(*_inputs(SFA=odd))
