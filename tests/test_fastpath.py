"""The per-call fast path (dgx.fastpath) on the CPU, through the real entry points with the driver calls stood in
(tests/driver_stand_in.py): every launch it makes must carry exactly the parameters the full path packs for the
same call, no tensor map is encoded again when only addresses change, and no input the checks refuse gets past
it (another stride, shape, dtype, alignment, an in-place change, a bool for an int)."""

from __future__ import annotations

import struct
import threading
import warnings

import pytest

torch = pytest.importorskip("torch")

import dgx  # noqa: E402
from dgx import device, fastpath, gemm, grouped, k_grouped_maps, scales, wgrad  # noqa: E402
from dgx.bench.host_patterns import all_patterns  # noqa: E402
from dgx.errors import LayoutConversionWarning  # noqa: E402
from dgx.kernels import scale_layout  # noqa: E402
from dgx.kernels.fp8_gemm import INTERFACE  # noqa: E402
from driver_stand_in import decode_map, stand_in  # noqa: E402

FP8, BF16, F32 = torch.float8_e4m3fn, torch.bfloat16, torch.float32
M, N, K = 64, 256, 512
KB = K // 128


@pytest.fixture(params=["guard", "python"])
def si(request, monkeypatch):
    """The stand-in driver; every test runs with torch's C++ tensor guard and with the Python check it falls back
    on."""
    monkeypatch.setattr(fastpath, "_check_factory",
                        fastpath._guard_check if request.param == "guard" else fastpath._python_check)
    with stand_in() as s:
        yield s


def m_major(rows: int, cols: int, groups: int | None = None):
    aligned = -(-rows // 4) * 4
    if groups is None:
        return torch.zeros(cols, aligned).t()[:rows]
    return torch.zeros(groups, cols, aligned).transpose(1, 2)[:, :rows]


def dense(m: int = M):
    return ((torch.zeros(m, K, dtype=FP8), m_major(m, KB)), (torch.zeros(N, K, dtype=FP8), torch.ones(N // 128, KB)),
            torch.zeros(m, N, dtype=BF16))


def params(launch) -> dict:
    """Every member of the GEMM's parameter struct, tensor maps decoded."""
    out = {}
    for p, off in zip(INTERFACE.params, INTERFACE.offsets):
        if p.ctype == "dgx::TensorMap":
            out[p.name] = decode_map(launch.params[off:off + 128])
        else:
            fmt = "Q" if p.ctype.endswith("*") else {"int": "i", "unsigned": "I", "float": "f", "long long": "q",
                                                     "unsigned long long": "Q"}[p.ctype]
            out[p.name] = struct.unpack_from("<" + fmt, launch.params, off)[0]
    return out


def gemm_launches(s):
    return [x for x in s.driver.launches if x.kernel.startswith("dgx_fp8_gemm")]


_ENTRY_CACHES = ((gemm, "_entries"), (grouped, "_contiguous"), (grouped, "_masked"), (wgrad, "_k_entries"))


def full_path_launches(s, fn):
    """The launches `fn` makes with the fast path's entries out of the way (the full path's), entries kept."""
    saved = [(module, name, getattr(module, name)) for module, name in _ENTRY_CACHES]
    for module, name, _ in saved:
        setattr(module, name, {})
    before = len(s.driver.launches)
    try:
        fn()
    finally:
        for module, name, cache in saved:
            setattr(module, name, cache)
    return s.driver.launches[before:]


def test_repeated_call_launches_the_same_parameters_without_encoding(si):
    a, b, d = dense()
    gemm.fp8_gemm_nt(a, b, d)
    encodes = si.driver.encodes
    for _ in range(3):
        gemm.fp8_gemm_nt(a, b, d)
    first, *rest = gemm_launches(si)
    assert si.driver.encodes == encodes and len(rest) == 3
    assert all(x.params == first.params for x in rest)
    p = params(first)
    assert p["tmap_a"]["address"] == a[0].data_ptr() and p["d_ptr"] == d.data_ptr()
    assert p["sfa"] == a[1].data_ptr() and p["tmap_sfa"]["address"] == a[1].data_ptr()


@pytest.mark.filterwarnings("ignore::dgx.errors.LayoutConversionWarning")
def test_fast_parameters_equal_the_full_paths_for_every_host_pattern(si):
    """Every pattern of the host benchmark, 40 calls each (fresh outputs, slices at moving offsets, changing M,
    converted scales): the fast path's launches, byte for byte, are what the full path launches for the same
    arguments, and steady state encodes no tensor map."""
    for pattern in all_patterns(dgx, "cpu", kinds=("dense", "contiguous", "masked", "wgrad", "k_grouped")):
        for i in range(40):
            args = pattern.args(i)
            before = len(si.driver.launches)
            pattern.call(args)
            fast = si.driver.launches[before:]
            full = full_path_launches(si, lambda: pattern.call(args))
            assert [(x.kernel, x.grid) for x in fast] == [(x.kernel, x.grid) for x in full], pattern.key
            for x, y in zip(fast, full):
                if x.kernel.startswith("dgx_sf_"):  # the converted scales' address is the workspace of the call
                    assert x.params[:8] == y.params[:8] and x.params[16:] == y.params[16:], pattern.key
                else:
                    assert x.params == y.params, (pattern.key, i, params(x), params(y))
        encodes = si.driver.encodes
        for i in range(40, 60):
            pattern.step(i)
        assert si.driver.encodes == encodes, f"{pattern.key}: tensor maps encoded in steady state"


def test_fresh_output_and_slices_are_relocated_not_encoded(si):
    _, b, _ = dense()
    a_buf = torch.zeros(4096, K, dtype=FP8)
    sfa_buf = m_major(4096, KB)
    gemm.fp8_gemm_nt((a_buf[:M], sfa_buf[:M]), b, torch.empty(M, N, dtype=BF16))
    encodes = si.driver.encodes
    for off in (64, 640, 1280, 4):  # rows of 512 bytes: every offset keeps A 16-byte aligned; SFA needs off % 4 == 0
        a = (a_buf[off:off + M], sfa_buf[off:off + M])
        d = torch.empty(M, N, dtype=BF16)
        gemm.fp8_gemm_nt(a, b, d)
        p = params(gemm_launches(si)[-1])
        assert p["tmap_a"]["address"] == a[0].data_ptr() and p["tmap_a"]["dims"] == (K, M)
        assert p["sfa"] == p["tmap_sfa"]["address"] == a[1].data_ptr()
        assert p["tmap_d"]["address"] == p["d_ptr"] == d.data_ptr()
        assert p["tmap_b"]["address"] == b[0].data_ptr()
    assert si.driver.encodes == encodes


def test_same_pointer_with_another_stride_or_shape_is_not_served_stale(si):
    a, b, _ = dense()
    base = torch.zeros(M * 2 * N, dtype=BF16)
    d1 = base[:M * N].view(M, N)
    gemm.fp8_gemm_nt(a, b, d1)
    d2 = base.view(M, 2 * N)[:, :N]  # same address, rows twice as far apart
    assert d2.data_ptr() == d1.data_ptr()
    gemm.fp8_gemm_nt(a, b, d2)
    assert params(gemm_launches(si)[-1])["tmap_d"]["strides"] == (2 * N * 2,)
    assert params(gemm_launches(si)[-1])["ld_d"] == 2 * N
    with pytest.raises(ValueError, match=r"d: expected shape \(64, 256\)"):
        gemm.fp8_gemm_nt(a, b, base.view(M // 2, 4 * N)[:, :N])  # same address, another shape
    with pytest.raises(ValueError, match="TMA needs row strides that are a multiple of 16 bytes"):
        gemm.fp8_gemm_nt(a, b, torch.zeros(M * (N + 4), dtype=BF16).view(M, N + 4)[:, :N])


def test_misaligned_addresses_after_aligned_ones_reach_the_checks(si):
    a, b, d = dense()
    gemm.fp8_gemm_nt(a, b, d)
    flat = torch.zeros(M * K + 16, dtype=FP8)
    a_odd = flat[8:8 + M * K].view(M, K)
    assert a_odd.data_ptr() % 16 == 8
    with pytest.raises(ValueError, match="A: TMA needs a 16-byte aligned base address"):
        gemm.fp8_gemm_nt((a_odd, a[1]), b, d)
    d_flat = torch.zeros(M * N + 8, dtype=BF16)
    with pytest.raises(ValueError, match="d: TMA needs a 16-byte aligned base address"):
        gemm.fp8_gemm_nt(a, b, d_flat[4:4 + M * N].view(M, N))
    # SFA M-major but 4 bytes off a 16-byte boundary: the full path converts it (two launches, GEMM reads the copy).
    sfa_flat = torch.zeros(KB * M + 4)
    sfa_odd = sfa_flat[1:1 + KB * M].view(KB, M).t()
    before = len(si.driver.launches)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LayoutConversionWarning)
        gemm.fp8_gemm_nt((a[0], sfa_odd), b, d)
    kernels = [x.kernel for x in si.driver.launches[before:]]
    assert kernels[0].startswith("dgx_sf_transpose") and kernels[1].startswith("dgx_fp8_gemm")


def test_in_place_changes_of_a_tensor_reach_the_checks(si):
    a, b, d = dense()
    gemm.fp8_gemm_nt(a, b, d)
    d.t_()  # same object, same address, transposed in place
    with pytest.raises(ValueError, match=r"d: expected shape \(64, 256\); got \(256, 64\)"):
        gemm.fp8_gemm_nt(a, b, d)
    d.t_()
    gemm.fp8_gemm_nt(a, b, d)
    B = b[0]
    B.data = torch.zeros(N, K + 128, dtype=FP8)  # same object, new storage and shape
    with pytest.raises(ValueError, match="B: expected K = 512"):
        gemm.fp8_gemm_nt(a, b, d)
    with pytest.raises(TypeError, match="d: expected .*bfloat16.*got torch.float16"):
        gemm.fp8_gemm_nt(a, (torch.zeros(N, K, dtype=FP8), b[1]), d.view(torch.float16))


def test_weights_as_parameters_take_the_fast_path(si):
    a, (B, SFB), d = dense()
    weight = torch.nn.Parameter(B, requires_grad=False)
    gemm.fp8_gemm_nt(a, (weight, SFB), d)
    encodes = si.driver.encodes
    for _ in range(3):
        gemm.fp8_gemm_nt(a, (weight, SFB), d)
    assert len(gemm._entries) == 1 and si.driver.encodes == encodes
    gemm.fp8_gemm_nt(a, (B, SFB), d)  # the plain tensor under the same key: its own entry, same parameters
    first, *_, last = gemm_launches(si)
    assert first.params == last.params


def test_non_int_expected_m_never_takes_an_int_entry(si):
    g, m_max = 2, 64
    a = (torch.zeros(g, m_max, K, dtype=FP8), m_major(m_max, KB, g))
    b = (torch.zeros(g, N, K, dtype=FP8), torch.ones(g, N // 128, KB))
    d = torch.zeros(g, m_max, N, dtype=BF16)
    mm = torch.full((g,), 8, dtype=torch.int32)
    dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, mm, 1)
    dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, mm, 1)
    for bad in (True, 1.0):
        with pytest.raises(ValueError, match="expected_m: expected a positive int"):
            dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, mm, bad)


def test_entries_are_per_thread(si):
    a, b, _ = dense()
    outs = [torch.zeros(M, N, dtype=BF16) for _ in range(2)]
    gemm.fp8_gemm_nt(a, b, outs[0])

    def run(d):
        for _ in range(5):
            gemm.fp8_gemm_nt(a, b, d)

    t = threading.Thread(target=run, args=(outs[1],))
    t.start()
    t.join()
    run(outs[0])
    assert len(gemm._entries) == 2
    by_address = {params(x)["d_ptr"] for x in gemm_launches(si)}
    assert by_address == {d.data_ptr() for d in outs}


def test_a_new_sm_count_retires_every_entry(si):
    a, b, d = dense(4096)
    gemm.fp8_gemm_nt(a, b, d)
    grid = gemm_launches(si)[-1].grid
    device._num_sms = 66
    device.generation += 1
    gemm.fp8_gemm_nt(a, b, d)
    assert gemm_launches(si)[-1].grid != grid and gemm_launches(si)[-1].grid[0] <= 66


def test_the_stream_argument_is_honoured(si):
    a, b, d = dense()
    for stream in (None, 7, 9, None):
        gemm.fp8_gemm_nt(a, b, d, stream=stream)
    assert [x.stream for x in gemm_launches(si)] == [0, 7, 9, 0]


def test_weight_gradient_and_its_legacy_name(si):
    a = (torch.zeros(M, K, dtype=FP8), m_major(M, KB))
    b = (torch.zeros(N, K, dtype=FP8), m_major(N, KB))
    d = torch.zeros(M, N, dtype=F32)
    gemm.fp8_gemm_nt(a, b, d, c=d)
    gemm.fp8_gemm_nt(a, b, d, c=d)
    dgx.wgrad_gemm_fp8_fp8_fp32_nt(a, b, d)
    gemm.fp8_gemm_nt(a, b, d)
    accumulate = [params(x)["accumulate"] for x in gemm_launches(si)]
    assert accumulate == [1, 1, 1, 0]
    assert len(gemm._entries) == 2  # d += a.b^T (both spellings) and d = a.b^T
    with pytest.raises(ValueError, match="c .* needs a float32 d"):
        dgx.wgrad_gemm_fp8_fp8_fp32_nt(a, b, torch.zeros(M, N, dtype=BF16))


def test_without_patchable_maps_calls_with_new_addresses_take_the_full_path():
    """A driver whose tensor maps do not hold the address as a plain word: no relocation, the full path re-encodes
    for new addresses (only this call's maps), and the parameters are right."""
    with stand_in(map_address_word=15) as s:
        a, b, _ = dense()
        d1, d2 = torch.zeros(M, N, dtype=BF16), torch.zeros(M, N, dtype=BF16)
        gemm.fp8_gemm_nt(a, b, d1)
        entry = next(iter(gemm._entries.values()))
        assert entry.relocate is None
        encodes = s.driver.encodes
        gemm.fp8_gemm_nt(a, b, d1)
        assert s.driver.encodes == encodes
        gemm.fp8_gemm_nt(a, b, d2)
        assert s.driver.encodes == encodes + 4  # this call's maps
        raw = gemm_launches(s)[-1].params
        word15 = struct.unpack_from("<Q", raw, INTERFACE.offsets[2] + 8 * 15)[0]
        assert word15 == d2.data_ptr() >> 4


def test_non_torch_tensors_take_the_full_path(si):
    from fake_views import BASE, fake_view

    a = (fake_view((M, K), "float8_e4m3fn", ptr=BASE), fake_view((M, KB), "float32", strides=(1, M), ptr=BASE + 0x100000))
    b = (fake_view((N, K), "float8_e4m3fn", ptr=BASE + 0x200000), fake_view((N // 128, KB), ptr=BASE + 0x300000))
    d = fake_view((M, N), "bfloat16", ptr=BASE + 0x400000)
    for _ in range(2):
        gemm.fp8_gemm_nt(a, b, d)
    assert gemm._entries == {} and len(gemm_launches(si)) == 2


# --- scales converted on the GPU ------------------------------------------------------------------------------

def transpose_params(launch) -> dict:
    names = [p.name for p in scale_layout.INTERFACE.params]
    fmts = {"const float*": "Q", "float*": "Q", "long long": "q", "int": "i"}
    return {p.name: struct.unpack_from("<" + fmts[p.ctype], launch.params, off)[0]
            for p, off in zip(scale_layout.INTERFACE.params, scale_layout.INTERFACE.offsets) if p.name in names}


def test_row_major_sfa_is_converted_by_our_kernel_on_the_launch_stream(si, monkeypatch):
    monkeypatch.setattr(scales, "_warned", False)
    a, b, d = dense()
    sfa_rows = [torch.ones(M, KB), torch.ones(M, KB)]
    with pytest.warns(LayoutConversionWarning, match="get_mn_major_tma_aligned_tensor"):
        gemm.fp8_gemm_nt((a[0], sfa_rows[0]), b, d, stream=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LayoutConversionWarning)  # once per process
        for sfa in (sfa_rows[0], sfa_rows[1], sfa_rows[0]):
            gemm.fp8_gemm_nt((a[0], sfa), b, d, stream=5)
    launches = si.driver.launches
    assert [x.kernel.split("_")[1] for x in launches] == ["sf", "fp8"] * 4
    assert all(x.stream == 5 for x in launches)
    (workspace, size), = si.driver.allocs  # one workspace, made on the first call
    for (conv, gemm_launch), sfa in zip(zip(launches[::2], launches[1::2]), [sfa_rows[0]] + [sfa_rows[0], sfa_rows[1],
                                                                                           sfa_rows[0]]):
        t = transpose_params(conv)
        assert (t["src"], t["dst"]) == (sfa.data_ptr(), workspace)
        assert (t["src_group_stride"], t["src_row_stride"], t["src_col_stride"]) == (0, KB, 1)
        assert (t["rows"], t["cols"], t["dst_ld"]) == (M, KB, M)
        assert conv.grid == (2, 1, 1)
        p = params(gemm_launch)
        assert p["sfa"] == p["tmap_sfa"]["address"] == workspace
        assert p["tmap_sfa"]["dims"] == (M, KB) and p["tmap_sfa"]["strides"] == (M * 4,)
        assert p["sfa_stride"] == M
    assert size >= 4 * M * KB and si.driver.frees == []


def test_converted_scales_at_a_low_pool_address_take_the_fast_path(si, monkeypatch):
    """The driver's stream-ordered pool handed out 0x302000000 on the device (12 GB into the address space), below
    the amounts the relocation probes move addresses by: the probes move such an address up instead, so repeat
    calls with a row-major SFA still take the fast path (no tensor map encoded) with the same parameters."""
    monkeypatch.setattr(scales, "_warned", True)
    si.driver._next_alloc = 0x3_0200_0000
    a, b, d = dense()
    sfa = torch.ones(M, KB)
    gemm.fp8_gemm_nt((a[0], sfa), b, d, stream=5)
    first = si.driver.launches[-1]
    encodes = si.driver.encodes
    for _ in range(3):
        gemm.fp8_gemm_nt((a[0], sfa), b, d, stream=5)
    assert si.driver.encodes == encodes, "a repeat call encoded tensor maps: it took the full path"
    assert len(gemm._entries) == 1
    assert si.driver.launches[-1].params == first.params
    (workspace, _), = si.driver.allocs
    assert workspace == 0x3_0200_0000 and params(first)["sfa"] == workspace


def test_converted_scales_under_capture_are_the_graphs_own():
    with stand_in(capturing=True) as s:
        a, b, d = dense()
        sfa = torch.ones(M, KB)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LayoutConversionWarning)
            for _ in range(3):
                gemm.fp8_gemm_nt((a[0], sfa), b, d)
        assert len(s.driver.allocs) == 3 and s.driver.frees == [address for address, _ in s.driver.allocs]
        for (address, _), launch in zip(s.driver.allocs, gemm_launches(s)):
            assert params(launch)["sfa"] == address
        assert scales._workspaces == {}


def test_masked_row_major_scales_per_group(si):
    g, m_max = 3, 40
    a = (torch.zeros(g, m_max, K, dtype=FP8), torch.ones(g, m_max, KB))
    b = (torch.zeros(g, N, K, dtype=FP8), torch.ones(g, N // 128, KB))
    d = torch.zeros(g, m_max, N, dtype=BF16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LayoutConversionWarning)
        dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, torch.full((g,), 4, dtype=torch.int32), 4)
    conv, launch = si.driver.launches
    t = transpose_params(conv)
    assert (t["src_group_stride"], t["src_row_stride"], t["src_col_stride"]) == (m_max * KB, KB, 1)
    assert (t["rows"], t["cols"], t["dst_ld"]) == (m_max, KB, m_max) and conv.grid == (2, 1, g)
    p = params(launch)
    assert p["tmap_sfa"]["dims"] == (m_max, g * KB) and p["sfa_stride"] == m_max


def test_relocator_checks_residues_before_writing():
    words = [0] * 8
    relocate = fastpath._relocator([(1, 0, 0), (5, 1, -4), (6, 2, 0)], [0, 4], 3)
    assert relocate(None, 32, 20) and not relocate(None, 40, 20) and not relocate(None, 32, 16)
    assert not relocate(words, 40, 20, 0x1000) and words == [0] * 8
    assert relocate(words, 48, 36, 0x1000) and words[1] == 48 and words[5] == 32 and words[6] == 0x1000


def test_torch_tensor_guard_is_used_on_this_torch():
    """The C++ guard passes its self-test on the torch CI pins (else every call pays the Python check: 2 µs more)."""
    assert fastpath._guard_works()


def test_entries_keep_no_tensor_alive(si):
    import gc
    import weakref

    a, b, d = dense()
    gemm.fp8_gemm_nt(a, b, d)
    gemm.fp8_gemm_nt(a, b, d)
    refs = [weakref.ref(t) for t in (*a, *b, d)]
    del a, b, d
    gc.collect()
    assert gemm._entries and all(r() is None for r in refs)


@pytest.mark.parametrize("key", ["dense/fresh_out", "dense/engine", "contiguous/engine", "masked/engine",
                                 "wgrad/fresh_in"])
def test_fresh_tensor_patterns_take_the_fast_path_on_every_call_after_the_first(si, monkeypatch, key):
    """The engine patterns (fresh outputs, fresh slices at moving offsets, changing M, fresh masked_m / m_indices,
    fresh weight-gradient inputs): once every hint key has had its first (full-path) call, no call plans, checks
    through the full path or encodes a tensor map again; each still launches once, with its own addresses."""
    from dgx import launch

    pattern = next(p for p in all_patterns(dgx, "cpu", kinds=(key.split("/")[0],)) if p.key == key)
    for i in range(2 * 13):  # every M of the changing-M patterns, twice
        pattern.step(i)
    planned = []
    real_plan = launch.plan
    monkeypatch.setattr(launch, "plan", lambda *a, **k: planned.append(a) or real_plan(*a, **k))
    encodes, launches = si.driver.encodes, len(si.driver.launches)
    for i in range(26, 26 + 120):
        args = pattern.args(i)
        pattern.call(args)
        x = params(si.driver.launches[-1])
        (a, _), (b, _), d = args[:3]
        assert (x["tmap_a"]["address"], x["tmap_b"]["address"], x["tmap_d"]["address"]) == (
            a.data_ptr(), b.data_ptr(), d.data_ptr()), (key, i)
    assert planned == [], f"{key}: {len(planned)} of 120 calls took the full path"
    assert si.driver.encodes == encodes, f"{key}: tensor maps encoded in steady state"
    assert len(si.driver.launches) - launches == 120


def test_every_launch_cache_is_registered():
    """The launch path's per-process caches are made through dgx.caches, so the driver stand-in (and any tool) sets
    them all aside without a list of names: a module-level dict named like a cache must be registered."""
    import importlib
    import pkgutil

    import dgx
    from dgx import caches

    modules = []
    for info in pkgutil.walk_packages(dgx.__path__, "dgx."):
        if info.name.startswith(("dgx.cli", "dgx.bench", "dgx.deep_gemm", "dgx.examples", "dgx._build",
                                 "dgx.deep_gemm_alias", "dgx.torch_ops", "dgx.families")):
            continue
        try:
            modules.append((info.name, importlib.import_module(info.name)))
        except ImportError:
            continue
    registered = {id(c) for c in caches.registered()}  # after the imports: a module registers its caches on import
    unregistered = []
    for module_name, module in modules:
        for name in ("_plans", "_params", "_entries", "_fast", "_launchers", "_workspaces", "_maps", "_k_entries",
                     "_contiguous", "_masked", "_batched_plans", "_sum_plans", "_fits"):
            value = module.__dict__.get(name)
            if isinstance(value, dict) and id(value) not in registered:
                unregistered.append(f"{module_name}.{name}")
    assert not unregistered, f"caches made without dgx.caches.per_process: {unregistered}"
