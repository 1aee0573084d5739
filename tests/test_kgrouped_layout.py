"""The K-grouped GEMM's scale layouts, without a GPU: dgx's [M, sum(ks)/128] and DeepGEMM's [sum(ks)/128, M]
(the k-blocks of all groups stacked), recognised by dgx.layout.k_grouped_scales_view and read without a copy
when the kernel can; the entry points fed TensorViews with fake device pointers."""

from __future__ import annotations

import re

import pytest

from dgx import launch, wgrad
from dgx.layout import SfaTma, k_grouped_scales_view, sfa_tma_layout
from dgx.tensors import TensorView
from fake_views import BASE, fake_view



def _view(shape, strides=None, ptr=BASE, dtype="float32", device=0) -> TensorView:
    return fake_view(shape, dtype, strides, ptr, device)


def _transposed(v: TensorView) -> TensorView:
    return TensorView(v.ptr, v.shape[::-1], v.strides[::-1], v.dtype, v.device, v.device_kind)


# --- the pure layout decision ----------------------------------------------------------------------


def test_dgx_layout_is_returned_as_is():
    v = _view((256, 40), (1, 256))
    assert k_grouped_scales_view(v, 256, 40, "SFA") == (v, False)
    row_major = _view((256, 40))  # dgx's layout row-major: kept, converted later as before
    assert k_grouped_scales_view(row_major, 256, 40, "SFA") == (row_major, False)


@pytest.mark.parametrize("m, kb", [(256, 40), (7168, 128), (4096, 1), (8, 3)])
def test_contiguous_deepgemm_layout_is_the_kernels_layout_without_a_copy(m, kb):
    v = _view((kb, m))
    seen, transposed = k_grouped_scales_view(v, m, kb, "SFA")
    assert transposed
    assert seen == _transposed(v)
    assert (seen.ptr, seen.shape, seen.strides) == (v.ptr, (m, kb), (1, m))
    # What scales_for_tma hands the launch: the same view and its tensor map, no converted copy.
    assert launch.scales_for_tma(None, seen, None, 0, "SFA", transposed) == (seen, SfaTma(m, kb, m * 4), None, None)


def test_deepgemm_layout_with_padded_rows_is_read_as_is():
    v = _view((40, 250), (252, 1))
    seen, transposed = k_grouped_scales_view(v, 250, 40, "SFA")
    assert transposed and seen.strides == (1, 252)
    assert sfa_tma_layout(seen) == SfaTma(250, 40, 1008)


@pytest.mark.parametrize("m", [130, 250, 7, 1])
def test_deepgemm_layout_with_unaligned_rows_needs_a_copy(m):
    seen, transposed = k_grouped_scales_view(_view((24, m)), m, 24, "SFA")
    assert transposed and sfa_tma_layout(seen) is None


def test_torch_tensor_in_deepgemm_layout_is_seen_as_its_transpose():
    torch = pytest.importorskip("torch")
    from dgx.tensors import as_view

    sf = torch.rand(40, 256)  # DeepGEMM: (sum(ks) / 128, M), contiguous
    seen, transposed = k_grouped_scales_view(as_view(sf), 256, 40, "SFA")
    t = as_view(sf.t())
    assert transposed and (seen.ptr, seen.shape, seen.strides) == (t.ptr, t.shape, t.strides)


def test_square_scales_are_decided_by_the_strides():
    x = 64  # M == sum(ks) / 128
    contiguous = _view((x, x))
    seen, transposed = k_grouped_scales_view(contiguous, x, x, "SFA")
    assert transposed and seen.strides == (1, x)  # DeepGEMM's layout, what its callers pass
    for strides in ((1, x), (1, x + 4)):  # M-major: dgx's layout (get_mn_major_tma_aligned_tensor's)
        v = _view((x, x), strides)
        assert k_grouped_scales_view(v, x, x, "SFA") == (v, False)
    padded_rows = _view((x, x), (x + 4, 1))  # rows of M scales, padded: DeepGEMM's
    assert k_grouped_scales_view(padded_rows, x, x, "SFA")[1]
    one = _view((1, 1))  # one scale: both layouts are the same bytes
    assert k_grouped_scales_view(one, 1, 1, "SFA") == (one, False)


def test_no_k_blocks_at_all():
    assert k_grouped_scales_view(_view((0, 256)), 256, 0, "SFA")[1]
    assert not k_grouped_scales_view(_view((256, 0)), 256, 0, "SFA")[1]


@pytest.mark.parametrize("shape", [(256, 41), (41, 256), (40, 255), (256,)])
def test_wrong_shape_names_the_argument_and_both_layouts(shape):
    message = "SFB: expected shape (256, 40) (dgx's layout: [N, sum(ks) / 128]) or (40, 256) (DeepGEMM's: [sum(ks) / 128, N]"
    with pytest.raises(ValueError, match=re.escape(message)):
        k_grouped_scales_view(_view(shape), 256, 40, "SFB", "N")


# --- the entry points ------------------------------------------------------------------------------

M, N = 256, 512
KS = [1024, 0, 512, 0, 128]  # groups without K contribute no scale rows
KB = sum(KS) // 128


class Launched(Exception):
    pass


@pytest.fixture
def seen_scales(monkeypatch):
    """Runs the checks only: planning raises Launched. Records what scales_for_tma gave the launch."""
    calls = []

    def recording(*args, **kwargs):
        out = launch.scales_for_tma(*args, **kwargs)
        calls.append(out)
        return out

    def plan(*args, **kwargs):
        raise Launched()

    monkeypatch.setattr(wgrad, "scales_for_tma", recording)
    monkeypatch.setattr(launch, "plan", plan)
    monkeypatch.setattr(wgrad, "_ks_on_device", lambda ks, device: _view((len(ks),), ptr=BASE + 0x600000, dtype="int32"))
    return calls


def _inputs(sfa: TensorView, sfb: TensorView, m: int = M, n: int = N, ks=KS):
    total = sum(ks)
    a = (_view((m * total,), dtype="float8_e4m3fn", ptr=BASE), sfa)
    b = (_view((n * total,), dtype="float8_e4m3fn", ptr=BASE + 0x1000000), sfb)
    d = _view((len(ks), m, n), ptr=BASE + 0x2000000)
    return a, b, d


def _sf(shape, strides=None, which=0):
    return _view(shape, strides, ptr=BASE + 0x3000000 + which * 0x100000)


@pytest.mark.parametrize("legacy", [True, False])
def test_deepgemm_layout_reaches_the_launch_as_a_view(seen_scales, legacy):
    sfa, sfb = _sf((KB, M)), _sf((KB, N), which=1)
    a, b, d = _inputs(sfa, sfb)
    with pytest.raises(Launched):
        if legacy:
            wgrad.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(a, b, d, KS)
        else:
            wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, KS)
    (va, la, keep_a, _), (vb, lb, keep_b, _) = seen_scales
    assert (va, la, keep_a) == (_transposed(sfa), SfaTma(M, KB, M * 4), None)
    assert (vb, lb, keep_b) == (_transposed(sfb), SfaTma(N, KB, N * 4), None)


def test_dgx_layout_reaches_the_launch_unchanged(seen_scales):
    sfa, sfb = _sf((M, KB), (1, M)), _sf((N, KB), (1, N), which=1)
    with pytest.raises(Launched):
        wgrad.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(*_inputs(sfa, sfb), KS)
    assert [(v, keep) for v, _, keep, _ in seen_scales] == [(sfa, None), (sfb, None)]


def test_layouts_may_differ_between_sfa_and_sfb(seen_scales):
    sfa, sfb = _sf((M, KB), (1, M)), _sf((KB, N), which=1)
    with pytest.raises(Launched):
        wgrad.k_grouped_fp8_gemm_nt_contiguous(*_inputs(sfa, sfb), KS)
    assert [v for v, _, _, _ in seen_scales] == [sfa, _transposed(sfb)]


def test_square_scales_through_the_call(seen_scales):
    m, ks = 16, [1024, 0, 1024]  # M == sum(ks) / 128 == 16
    with pytest.raises(Launched):
        wgrad.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(*_inputs(_sf((16, 16)), _sf((N, 16), (1, N), which=1), m=m, ks=ks), ks)
    assert seen_scales[0][0].strides == (1, 16)  # contiguous: DeepGEMM's rows of M scales, transposed
    assert seen_scales[1][0].strides == (1, N)  # dgx's M-major layout, as it is
    m_major = _sf((16, 16), (1, 16))
    with pytest.raises(Launched):
        wgrad.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(*_inputs(m_major, _sf((16, N), which=1), m=m, ks=ks), ks)
    assert seen_scales[2][0] == m_major  # stride 1 along M: dgx's layout


def test_unaligned_deepgemm_rows_of_a_non_torch_tensor_are_refused_before_planning(seen_scales):
    m = 130  # 520-byte rows: TMA needs a copy, made only for torch tensors
    with pytest.raises(ValueError, match=re.escape("SFA: expected DeepGEMM's layout with TMA-aligned rows")):
        wgrad.k_grouped_fp8_gemm_nt_contiguous(*_inputs(_sf((KB, m)), _sf((KB, N), which=1), m=m), KS)


@pytest.mark.parametrize(
    "sfa_shape, sfb_shape, message",
    [
        ((KB + 1, M), (KB, N), f"SFA: expected shape ({M}, {KB}) (dgx's layout: [M, sum(ks) / 128]) or ({KB}, {M})"),
        ((KB, M), (N, KB - 1), f"SFB: expected shape ({N}, {KB}) (dgx's layout: [N, sum(ks) / 128]) or ({KB}, {N})"),
        ((M, KB * 2), (KB, N), "(DeepGEMM's: [sum(ks) / 128, M], the k-blocks of all groups stacked); got (256, 26)"),
    ],
)
def test_wrong_scale_shapes(seen_scales, sfa_shape, sfb_shape, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        wgrad.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(*_inputs(_sf(sfa_shape), _sf(sfb_shape, which=1)), KS)
