"""The K-grouped GEMM's per-call work, on the CPU with the driver calls stood in (tests/driver_stand_in.py): the
groups' tensor maps are encoded and copied to the device once per A/B addresses, sizes and stream
(dgx.k_grouped_maps), and a repeated call takes the fast path (dgx.fastpath) with exactly the parameters the full
path packs; new operand addresses, another stream, graph capture and bad inputs never get a stale launch."""

from __future__ import annotations

import ctypes
import warnings

import pytest

torch = pytest.importorskip("torch")

from dgx import k_grouped_maps, runtime, wgrad  # noqa: E402
from dgx.errors import LayoutConversionWarning  # noqa: E402
from dgx.kernels.fp8_gemm import INTERFACE  # noqa: E402
from driver_stand_in import decode_map, stand_in  # noqa: E402
from test_fastpath import params  # noqa: E402

FP8, F32 = torch.float8_e4m3fn, torch.float32
G, M, N = 3, 256, 384
KS = [256, 0, 384]
KB = sum(KS) // 128


def m_major(rows: int, cols: int):
    return torch.zeros(cols, rows).t()


def operands(ks=KS):
    total = sum(ks)
    a = (torch.zeros(M * total, dtype=FP8), m_major(M, total // 128))
    b = (torch.zeros(N * total, dtype=FP8), m_major(N, total // 128))
    return a, b, torch.zeros(len(ks), M, N, dtype=F32)


def k_launches(s):
    return [x for x in s.driver.launches if x.kernel.startswith("dgx_fp8_gemm")]


def full_path(s, fn):
    """The launches `fn` makes with the K-grouped entries out of the way (the full path's), entries kept."""
    saved, wgrad._k_entries = wgrad._k_entries, {}
    before = len(s.driver.launches)
    try:
        fn()
    finally:
        wgrad._k_entries = saved
    return s.driver.launches[before:]


def cpu_ks_on_device(ks, device):
    """wgrad._ks_on_device with the tensor in host memory (read as cuda:0 by the stand-ins), cached like it."""
    key = (device, ks)
    if key not in wgrad._ks_tensors:
        wgrad._ks_tensors[key] = torch.tensor(ks, dtype=torch.int32)
    return wgrad._ks_tensors[key]


@pytest.fixture
def si(monkeypatch):
    monkeypatch.setattr(wgrad, "_ks_on_device", cpu_ks_on_device)
    monkeypatch.setattr(wgrad, "_ks_tensors", {})
    with stand_in() as s:
        yield s


def group_map_addresses(buffer: runtime.DeviceTensorMaps) -> list[int | None]:
    """The global address of each map in a groups' buffer (None for an empty slot)."""
    raw = ctypes.string_at(ctypes.addressof(buffer._host), 128 * buffer.count)
    out = []
    for i in range(buffer.count):
        chunk = raw[128 * i:128 * (i + 1)]
        out.append(decode_map(chunk)["address"] if any(chunk) else None)
    return out


def test_repeated_calls_encode_and_copy_the_groups_maps_once(si):
    a, b, d = operands()
    ks_tensor = torch.tensor(KS, dtype=torch.int32)
    wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, KS, ks_tensor)
    encodes, allocs = si.driver.encodes, len(si.driver.allocs)
    for _ in range(5):
        wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, KS, ks_tensor)
    assert si.driver.encodes == encodes and len(si.driver.allocs) == allocs and si.driver.frees == []
    first, *rest = k_launches(si)
    assert len(rest) == 5 and all(x.params == first.params for x in rest)
    (buffer,) = k_grouped_maps._maps.values()
    assert params(first)["group_maps"] == buffer.address
    base_a, base_b = a[0].data_ptr(), b[0].data_ptr()
    assert group_map_addresses(buffer) == [base_a, base_b, None, None, base_a + M * 256, base_b + N * 256]
    assert params(first)["grouped_layout"] == ks_tensor.data_ptr()


def test_fast_launches_equal_the_full_paths(si):
    """Fresh d, scales and ks_tensor at new addresses are relocated; every launch is byte for byte the full path's."""
    a, b, _ = operands()
    for i in range(12):
        d = torch.zeros(G, M, N, dtype=F32)
        sfa = m_major(M, KB) if i % 2 else a[1]
        ks_tensor = torch.tensor(KS, dtype=torch.int32)
        call = lambda: wgrad.k_grouped_fp8_gemm_nt_contiguous((a[0], sfa), b, d, KS, ks_tensor)  # noqa: E731
        before = len(si.driver.launches)
        call()
        fast = si.driver.launches[before:]
        full = full_path(si, call)
        assert [x.params for x in fast] == [x.params for x in full], i
        assert params(fast[-1])["d_ptr"] == d.data_ptr()


def test_steady_state_takes_the_fast_path(si, monkeypatch):
    from dgx import launch

    a, b, d = operands()
    wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, KS)
    planned = []
    real_plan = launch.plan
    monkeypatch.setattr(launch, "plan", lambda *x, **k: planned.append(x) or real_plan(*x, **k))
    for _ in range(10):
        wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, tuple(KS))
    assert planned == [] and len(k_launches(si)) == 11


def test_dgx_made_ks_tensor_stays_alive_with_its_entry(si):
    a, b, d = operands()
    wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, KS)
    wgrad._ks_tensors.clear()  # dgx's cache of them starts over: the entry still holds the tensor it launches with
    (hit,) = wgrad._k_entries.values()
    ks_tensor = hit[-1]
    assert ks_tensor is not None and ks_tensor.tolist() == KS
    wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, KS)
    assert params(k_launches(si)[-1])["grouped_layout"] == ks_tensor.data_ptr()


def test_new_operand_addresses_get_their_own_maps(si):
    a, b, d = operands()
    a2 = (torch.zeros_like(a[0]), a[1])
    wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, KS)
    wgrad.k_grouped_fp8_gemm_nt_contiguous(a2, b, d, KS)
    wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, KS)
    first, second, third = k_launches(si)
    assert params(second)["tmap_a"]["address"] == a2[0].data_ptr()
    assert params(second)["group_maps"] != params(first)["group_maps"]
    assert third.params == first.params  # the first buffer is found again
    assert k_grouped_maps.kept_count() == 2
    buffers = {buf.address: buf for buf in k_grouped_maps._maps.values()}
    assert group_map_addresses(buffers[params(second)["group_maps"]])[0] == a2[0].data_ptr()


def test_each_stream_gets_its_own_buffer_and_launch(si):
    a, b, d = operands()
    for stream in (None, 7, 7, None, 9):
        wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, KS, stream=stream)
    launches = k_launches(si)
    assert [x.stream for x in launches] == [0, 7, 7, 0, 9]
    assert len({params(x)["group_maps"] for x in launches}) == 3 == k_grouped_maps.kept_count()


def test_under_capture_the_maps_are_the_graphs_and_no_entry_is_made(monkeypatch):
    monkeypatch.setattr(wgrad, "_ks_on_device", cpu_ks_on_device)
    monkeypatch.setattr(wgrad, "_ks_tensors", {})
    kept = []
    monkeypatch.setattr(runtime, "keep_alive_with_graph", lambda buffer, stream: kept.append(buffer) or 1)
    with stand_in(capturing=True) as s:
        a, b, d = operands()
        for _ in range(2):
            wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, KS)
        assert wgrad._k_entries == {} and k_grouped_maps.kept_count() == 0
        maps = [address for address, size in s.driver.allocs if size == 128 * 2 * G]
        assert len(maps) == 2 and s.driver.frees[-1] == maps[-1] and len(kept) == 2


def test_converted_scales_are_converted_on_the_fast_path_too(si):
    a, b, d = operands()
    sfa = torch.ones(M, KB)  # dgx's layout, row-major: the kernel cannot read it as it is
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LayoutConversionWarning)
        for _ in range(3):
            call = lambda: wgrad.k_grouped_fp8_gemm_nt_contiguous((a[0], sfa), b, d, KS)  # noqa: E731
            before = len(si.driver.launches)
            call()
            fast = si.driver.launches[before:]
            full = full_path(si, call)
            assert [x.kernel for x in fast] == [x.kernel for x in full] and len(fast) == 2
            assert fast[-1].params == full[-1].params


@pytest.mark.parametrize("ks, message", [([256, 64, 384], r"ks\[1\]: expected a non-negative multiple of 128"),
                                         ([256, 0], r"d: expected \[G = 2, M, N\]")])
def test_bad_inputs_after_fast_calls_still_reach_the_checks(si, ks, message):
    a, b, d = operands()
    for _ in range(2):
        wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, KS)
    with pytest.raises(ValueError, match=message):
        wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks)


def test_a_changed_stride_reaches_the_checks(si):
    a, b, d = operands()
    wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, d, KS)
    with pytest.raises(ValueError, match="d:"):
        wgrad.k_grouped_fp8_gemm_nt_contiguous(a, b, torch.zeros(G, M, 2 * N, dtype=F32)[:, :, ::2], KS)


def test_interface_has_the_group_maps_pointer():
    assert "group_maps" in [p.name for p in INTERFACE.params]
