"""The per-call fast paths of dgx.einsum (all three forms), the fused epilogue calls of the FP8 GEMMs (dense,
contiguous, masked) and dgx.silu_mul_quant, on the CPU with the driver calls stood in (tests/driver_stand_in.py):
every launch a fast call makes carries exactly the parameters the full path packs for the same call (across new
addresses), steady state takes no full path and encodes no tensor map, and every kind of change (shape, dtype,
stride, option value, environment, an overlap, an unprepared weight, the SM count, capture) falls back to the full
path: its checks raise, or it launches what the new call needs."""

from __future__ import annotations

import struct

import pytest

torch = pytest.importorskip("torch")

import dgx  # noqa: E402
from dgx import bf16_einsum, device, fastpath, gemm, grouped, launch, moe_activation  # noqa: E402
from dgx.bench.host_patterns import all_patterns  # noqa: E402
from dgx.kernels import einsum as K  # noqa: E402
from dgx.kernels import silu_mul_quant as S  # noqa: E402
from dgx.kernels.bf16_gemm import INTERFACE as BF16_INTERFACE  # noqa: E402
from dgx.kernels.fp8_gemm import FUSED_INTERFACE  # noqa: E402
from driver_stand_in import decode_map, stand_in  # noqa: E402

FP8, BF16, F32 = torch.float8_e4m3fn, torch.bfloat16, torch.float32
KINDS = ("einsum", "fused", "silu")
_CACHES = ((gemm, "_entries"), (grouped, "_contiguous"), (grouped, "_masked"), (bf16_einsum, "_fast"),
           (moe_activation, "_fast"))


@pytest.fixture(params=["guard", "python"])
def si(request, monkeypatch):
    monkeypatch.setattr(fastpath, "_check_factory",
                        fastpath._guard_check if request.param == "guard" else fastpath._python_check)
    monkeypatch.delenv("DGX_BF16_PINGPONG", raising=False)
    with stand_in() as s:
        yield s


def full_path(s, fn):
    """(launches, result) of `fn` with every fast-path entry out of the way (the full path's), entries kept."""
    saved = [(module, name, getattr(module, name)) for module, name in _CACHES]
    for module, name, _ in saved:
        setattr(module, name, {})
    before = len(s.driver.launches)
    try:
        result = fn()
    finally:
        for module, name, cache in saved:
            setattr(module, name, cache)
    return s.driver.launches[before:], result


def member(launch, interface, name: str):
    names = [p.name for p in interface.params]
    off = interface.offsets[names.index(name)]
    p = interface.params[names.index(name)]
    if p.ctype == "dgx::TensorMap":
        return decode_map(launch.params[off:off + 128])
    fmt = "<Q" if p.ctype.endswith("*") else {"int": "<i", "float": "<f", "long long": "<q"}[p.ctype]
    return struct.unpack_from(fmt, launch.params, off)[0]


def _silu_outputs_masked(launch, result) -> bytes:
    """A silu_mul_quant launch's parameters with the y and sf words zeroed (a call that allocates gets new ones)."""
    raw = bytearray(launch.params)
    names = [p.name for p in S.INTERFACE.params]
    for name, t in (("y", result[0]), ("sf", result[1])):
        off = S.INTERFACE.offsets[names.index(name)]
        assert struct.unpack_from("<Q", raw, off)[0] == t.data_ptr()  # each call writes where it says it does
        raw[off:off + 8] = bytes(8)
    return bytes(raw)


def test_fast_parameters_equal_the_full_paths_for_every_pattern(si):
    """Every pattern of the three kinds (same tensors, fresh outputs, fresh slices at moving offsets, changing rows,
    a fresh masked_m each call), 40 calls each: byte for byte what the full path launches for the same arguments;
    steady state encodes no tensor map."""
    for pattern in all_patterns(dgx, "cpu", kinds=KINDS):
        for i in range(40):
            args = pattern.args(i)
            before = len(si.driver.launches)
            got = pattern.call(args)
            fast = si.driver.launches[before:]
            full, want = full_path(si, lambda: pattern.call(args))
            assert [(x.kernel, x.grid, x.stream) for x in fast] == [(x.kernel, x.grid, x.stream) for x in full]
            for x, y in zip(fast, full):
                if pattern.key in ("silu/alloc", "silu/masked_alloc"):
                    assert _silu_outputs_masked(x, got) == _silu_outputs_masked(y, want), (pattern.key, i)
                else:
                    assert x.params == y.params, (pattern.key, i)
        encodes = si.driver.encodes
        for i in range(40, 60):
            pattern.step(i)
        assert si.driver.encodes == encodes, f"{pattern.key}: tensor maps encoded in steady state"


@pytest.mark.parametrize("key", ["einsum/bhr_same", "einsum/bhd_same", "einsum/bhr_engine", "einsum/bmk_same",
                                 "einsum/bmk_fresh_out", "fused/dense_fp8", "fused/dense_alpha", "fused/dense_engine",
                                 "fused/contiguous_swiglu", "fused/masked_swiglu", "fused/masked_engine", "silu/same",
                                 "silu/alloc", "silu/masked_alloc"])
def test_steady_state_never_takes_the_full_path(si, monkeypatch, key):
    pattern = next(p for p in all_patterns(dgx, "cpu", kinds=(key.split("/")[0],)) if p.key == key)
    for i in range(26):  # every row count of the changing patterns, twice
        pattern.step(i)
    full = []
    for module, name in ((bf16_einsum, "_einsum"), (moe_activation, "_silu_mul_quant"), (launch, "plan")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, **k: full.append(a) or _real(*a, **k))
    launches = len(si.driver.launches)
    per_call = 2 if key.startswith("einsum/bmk") else 1
    for i in range(26, 26 + 60):
        pattern.step(i)
    assert full == [], f"{key}: {len(full)} of 60 calls took the full path"
    assert len(si.driver.launches) - launches == 60 * per_call


# --- einsum -----------------------------------------------------------------------------------------------------


def t(*shape, dtype=BF16):
    return torch.zeros(*shape, dtype=dtype)


def test_einsum_new_addresses_are_relocated(si):
    x, y = t(64, 8, 512), t(8, 128, 512)
    for i in range(4):
        xi = t(64, 8, 512) if i % 2 else x
        z = t(64, 8, 128)
        dgx.einsum("bhr,hdr->bhd", xi, y, z)
        run = si.driver.launches[-1]
        assert member(run, BF16_INTERFACE, "tmap_a")["address"] == xi.data_ptr()
        assert member(run, BF16_INTERFACE, "tmap_d")["address"] == member(run, BF16_INTERFACE, "d_ptr") == z.data_ptr()
    assert len(bf16_einsum._fast) == 1


def test_einsum_changes_fall_back(si, monkeypatch):
    x, y, z = t(64, 8, 512), t(8, 128, 512), t(64, 8, 128)
    dgx.einsum("bhr,hdr->bhd", x, y, z)
    dgx.einsum("bhr,hdr->bhd", x, y, z)
    with pytest.raises(ValueError, match=r"d: expected shape \(64, 8, 128\)"):
        dgx.einsum("bhr,hdr->bhd", x, y, t(64, 8, 136))
    with pytest.raises(TypeError, match="d: expected .*bfloat16.*got torch.float16"):
        dgx.einsum("bhr,hdr->bhd", x, y, z.view(torch.float16))
    with pytest.raises(ValueError, match="d: overlaps a"):  # same shapes and strides, z now inside x
        dgx.einsum("bhr,hdr->bhd", x, y, x.view(-1)[:64 * 8 * 128].view(64, 8, 128))
    wide = t(64, 8, 256)[:, :, :128]  # another stride: its own maps
    dgx.einsum("bhr,hdr->bhd", x, y, wide)
    assert member(si.driver.launches[-1], BF16_INTERFACE, "tmap_d")["strides"] == (8 * 256 * 2, 256 * 2)
    chosen = []
    real = K.choose_batched
    monkeypatch.setattr(bf16_einsum, "choose_batched", lambda *a: chosen.append(a) or real(*a))
    monkeypatch.setenv("DGX_BF16_PINGPONG", "1")
    dgx.einsum("bhr,hdr->bhd", x, y, z)
    assert chosen and chosen[-1][-1] is True  # the heuristic was asked again, with ping-pong weighed
    monkeypatch.setenv("DGX_BF16_PINGPONG", "maybe")
    with pytest.raises(dgx.errors.EnvError, match="DGX_BF16_PINGPONG"):
        dgx.einsum("bhr,hdr->bhd", x, y, z)


def test_einsum_batch_sum_entries(si):
    s, m, n, k = 64, 128, 256, 128
    a, b = t(s, m, k), t(s, n, k)
    d, c = t(m, n, dtype=F32), t(m, n, dtype=F32)
    ri = K.REDUCE_INTERFACE
    for _ in range(3):
        dgx.einsum("bmk,bnk->mn", a, b, d, d)
    gemm_run, reduce = si.driver.launches[-2:]
    assert member(reduce, ri, "d") == member(reduce, ri, "c") == d.data_ptr()
    dgx.einsum("bmk,bnk->mn", a, b, d, c)  # another c: its own entry, c read in place
    assert member(si.driver.launches[-1], ri, "c") == c.data_ptr()
    c2 = t(m, n, dtype=F32)
    dgx.einsum("bmk,bnk->mn", a, b, d, c2)
    assert member(si.driver.launches[-1], ri, "c") == c2.data_ptr()
    flat = t(m * n + 8, dtype=F32)
    with pytest.raises(ValueError, match="d: overlaps c"):  # the separate-c entry's shapes, c now over d
        dgx.einsum("bmk,bnk->mn", a, b, flat[:m * n].view(m, n), flat[8:].view(m, n))
    assert len(bf16_einsum._fast) == 2


def test_einsum_batch_sum_partials_under_capture_are_the_graphs():
    with stand_in(capturing=True) as si:
        a, b, d = t(64, 128, 128), t(64, 256, 128), t(128, 256, dtype=BF16)
        for _ in range(3):
            dgx.einsum("bmk,bnk->mn", a, b, d)
        assert len(si.driver.allocs) == 3 and si.driver.frees == [address for address, _ in si.driver.allocs]
        reduces = si.driver.launches[1::2]
        gemms = si.driver.launches[0::2]
        for (address, _), g, r in zip(si.driver.allocs, gemms, reduces):
            assert member(r, K.REDUCE_INTERFACE, "partials") == address
            assert member(g, BF16_INTERFACE, "tmap_d")["address"] == member(g, BF16_INTERFACE, "d_ptr") == address


def test_einsum_batch_sum_follows_a_grown_workspace(si):
    a, b, d = t(64, 128, 128), t(64, 256, 128), t(128, 256, dtype=BF16)
    dgx.einsum("bmk,bnk->mn", a, b, d)
    dgx.einsum("bmk,bnk->mn", a, b, d)
    bf16_einsum.scales._workspaces.clear()  # another call took the slot's memory elsewhere
    si.driver._next_alloc += 1 << 30
    dgx.einsum("bmk,bnk->mn", a, b, d)
    new = si.driver.allocs[-1][0]
    g, r = si.driver.launches[-2:]
    assert member(g, BF16_INTERFACE, "d_ptr") == member(r, K.REDUCE_INTERFACE, "partials") == new


# --- fused epilogues ----------------------------------------------------------------------------------------------

M, N, KK = 64, 256, 512


def m_major(rows: int, cols: int, groups: int | None = None):
    aligned = -(-rows // 4) * 4
    if groups is None:
        return torch.zeros(cols, aligned).t()[:rows]
    return torch.zeros(groups, cols, aligned).transpose(1, 2)[:, :rows]


def dense_operands():
    return ((torch.zeros(M, KK, dtype=FP8), m_major(M, KK // 128)),
            (torch.zeros(N, KK, dtype=FP8), torch.ones(N // 128, KK // 128)))


def fp8_out(rows=M, n=N):
    return torch.zeros(rows, n, dtype=FP8), m_major(rows, n // 128)


def test_fused_options_are_in_the_key(si):
    a, b = dense_operands()
    d = fp8_out()
    fi = FUSED_INTERFACE
    dgx.fp8_gemm_nt(a, b, d)
    dgx.fp8_gemm_nt(a, b, d)
    plain = si.driver.launches[-1]
    dgx.fp8_gemm_nt(a, b, d, alpha=2.0)
    assert member(si.driver.launches[-1], fi, "alpha") == 2.0
    dgx.fp8_gemm_nt(a, b, d, alpha=-0.0)
    assert struct.pack("<f", member(si.driver.launches[-1], fi, "alpha")) == struct.pack("<f", -0.0)
    dgx.fp8_gemm_nt(a, b, d, alpha=0.0)
    assert struct.pack("<f", member(si.driver.launches[-1], fi, "alpha")) == struct.pack("<f", 0.0)
    dgx.fp8_gemm_nt(a, b, d, alpha=3)
    assert member(si.driver.launches[-1], fi, "alpha") == 3.0
    dgx.fp8_gemm_nt(a, b, d, use_ue8m0=True)
    assert si.driver.launches[-1].kernel != plain.kernel
    w = torch.ones(M)
    dgx.fp8_gemm_nt(a, b, d, row_weight=w)
    dgx.fp8_gemm_nt(a, b, d, row_weight=w)
    assert member(si.driver.launches[-1], fi, "row_weight") == w.data_ptr()
    w2 = torch.ones(M)
    dgx.fp8_gemm_nt(a, b, d, row_weight=w2)
    assert member(si.driver.launches[-1], fi, "row_weight") == w2.data_ptr()
    dgx.fp8_gemm_nt(a, b, d)
    assert si.driver.launches[-1].params == plain.params
    for bad, error, message in ((dict(alpha=float("nan")), ValueError, "alpha: expected a finite float"),
                                (dict(alpha=True), TypeError, "alpha: expected a float"),
                                (dict(use_ue8m0=1), TypeError, "use_ue8m0: expected a bool"),
                                (dict(row_weight=torch.ones(M + 1)), ValueError, "row_weight: expected shape"),
                                (dict(row_weight=torch.ones(M, dtype=torch.float64)), TypeError, "row_weight")):
        with pytest.raises(error, match=message):
            dgx.fp8_gemm_nt(a, b, d, **bad)
    with pytest.raises(ValueError, match="d_sf: expected the layout"):
        dgx.fp8_gemm_nt(a, b, (d[0], torch.zeros(M, N // 128)))  # row-major scales: another stride
    with pytest.raises(ValueError, match="d_fp8: expected shape"):
        dgx.fp8_gemm_nt(a, b, fp8_out(M, 2 * N))
    with pytest.raises(TypeError, match="d: expected a tensor, or a"):
        dgx.fp8_gemm_nt(a, b, (d[0], d[1], d[1]))


def test_swiglu_needs_the_prepared_weight_on_the_fast_path_too(si):
    g, m_max, n, k = 2, 64, 256, 512
    bq, sfb = torch.zeros(g, n, k, dtype=FP8), torch.ones(g, n // 128, k // 128)
    prepared = dgx.prepare_gate_up(bq, sfb)
    a = (torch.zeros(g, m_max, k, dtype=FP8), m_major(m_max, k // 128, g))
    d = (torch.zeros(g, m_max, n // 2, dtype=FP8), m_major(m_max, n // 256, g))
    mm = torch.full((g,), 8, dtype=torch.int32)
    dgx.m_grouped_fp8_gemm_nt_masked(a, prepared, d, mm, 8, swiglu=True)
    dgx.m_grouped_fp8_gemm_nt_masked(a, prepared, d, mm, 8, swiglu=True)
    assert len(grouped._masked) == 1
    with pytest.raises(ValueError, match="b: swiglu=True reads the gate-up weight"):
        dgx.m_grouped_fp8_gemm_nt_masked(a, (bq, sfb), d, mm, 8, swiglu=True)  # same shapes, not prepared
    mm2 = torch.full((g,), 3, dtype=torch.int32)  # another counts tensor: read where it is
    dgx.m_grouped_fp8_gemm_nt_masked(a, prepared, d, mm2, 8, swiglu=True)
    assert member(si.driver.launches[-1], FUSED_INTERFACE, "grouped_layout") == mm2.data_ptr()
    with pytest.raises(ValueError, match="masked_m: expected shape"):
        dgx.m_grouped_fp8_gemm_nt_masked(a, prepared, d, torch.full((g + 1,), 3, dtype=torch.int32), 8, swiglu=True)
    with pytest.raises(ValueError, match="swiglu_limit: expected a positive float"):
        dgx.m_grouped_fp8_gemm_nt_masked(a, prepared, d, mm, 8, swiglu=True, swiglu_limit=-1.0)
    dgx.m_grouped_fp8_gemm_nt_masked(a, prepared, d, mm, 8, swiglu=True, swiglu_limit=7.0)
    dgx.m_grouped_fp8_gemm_nt_masked(a, prepared, d, mm, 8, swiglu=True, swiglu_limit=7.5)
    assert member(si.driver.launches[-1], FUSED_INTERFACE, "swiglu_limit") == 7.5
    dgx.m_grouped_fp8_gemm_nt_masked(a, prepared, d, mm, 16, swiglu=True)  # expected_m is part of the key
    assert len(grouped._masked) == 4


def test_fused_entries_retire_with_the_sm_count(si):
    a, b = dense_operands()
    a = (torch.zeros(4096, KK, dtype=FP8), m_major(4096, KK // 128))
    d = fp8_out(4096)
    dgx.fp8_gemm_nt(a, b, d)
    grid = si.driver.launches[-1].grid
    device._num_sms = 66
    device.generation += 1
    dgx.fp8_gemm_nt(a, b, d)
    assert si.driver.launches[-1].grid != grid and si.driver.launches[-1].grid[0] <= 66


# --- silu_mul_quant ---------------------------------------------------------------------------------------------


def test_silu_options_and_overlaps_fall_back(si):
    x = t(64, 512)
    out, sf = torch.zeros(64, 256, dtype=FP8), m_major(64, 2)
    dgx.silu_mul_quant(x, out=out, out_scales=sf)
    dgx.silu_mul_quant(x, out=out, out_scales=sf)
    first = si.driver.launches[-1]
    dgx.silu_mul_quant(x, out=out, out_scales=sf, swiglu_limit=5.0)
    assert member(si.driver.launches[-1], S.INTERFACE, "limit") == 5.0
    dgx.silu_mul_quant(x, out=out, out_scales=sf, swiglu_limit=6)
    assert member(si.driver.launches[-1], S.INTERFACE, "limit") == 6.0
    dgx.silu_mul_quant(x, out=out, out_scales=sf, use_ue8m0=True)
    assert si.driver.launches[-1].kernel != first.kernel
    with pytest.raises(ValueError, match="packed_ue8m0: packing needs UE8M0"):
        dgx.silu_mul_quant(x, out=out, out_scales=sf, packed_ue8m0=True)
    with pytest.raises(TypeError, match="use_ue8m0: expected a bool"):
        dgx.silu_mul_quant(x, out=out, out_scales=sf, use_ue8m0=1)
    dgx.silu_mul_quant(x, out=out, out_scales=sf)
    assert si.driver.launches[-1].params == first.params
    raw = torch.zeros(2 * 64 * 1024, dtype=torch.uint8)
    x_in = raw[:64 * 1024].view(BF16).view(64, 512)
    overlapping = raw[64 * 1024 - 256:64 * 1024 - 256 + 64 * 256].view(FP8).view(64, 256)  # out's start inside x
    with pytest.raises(ValueError, match="out: must not overlap x"):
        dgx.silu_mul_quant(x_in, out=overlapping, out_scales=sf)
    with pytest.raises(ValueError, match="x: expected a last dimension 2I"):
        dgx.silu_mul_quant(t(64, 384), out=out, out_scales=sf)
    with pytest.raises(ValueError, match="out_scales: expected the M-major"):
        dgx.silu_mul_quant(x, out=out, out_scales=torch.zeros(64, 2))


def test_silu_allocated_outputs_are_fresh_each_call(si):
    x = t(64, 512)
    mm = torch.full((4,), 3, dtype=torch.int32)
    xm = t(4, 32, 512)
    for _ in range(3):
        y, sf = dgx.silu_mul_quant(x)
        run = si.driver.launches[-1]
        assert (member(run, S.INTERFACE, "y"), member(run, S.INTERFACE, "sf")) == (y.data_ptr(), sf.data_ptr())
        assert y.shape == (64, 256) and y.dtype == FP8 and sf.shape == (64, 2) and sf.stride() == (1, 64)
        ym, sfm = dgx.silu_mul_quant(xm, masked_m=mm, use_ue8m0=True, packed_ue8m0=True)
        assert sfm.dtype == torch.int32 and sfm.shape == (4, 32, 1) and sfm.stride() == (32, 1, 32)
        assert member(si.driver.launches[-1], S.INTERFACE, "masked_m") == mm.data_ptr()
    mm2 = torch.full((4,), 5, dtype=torch.int32)
    dgx.silu_mul_quant(xm, masked_m=mm2, use_ue8m0=True, packed_ue8m0=True)
    assert member(si.driver.launches[-1], S.INTERFACE, "masked_m") == mm2.data_ptr()
    with pytest.raises(TypeError, match="masked_m: expected .*int32.*got torch.int64"):
        dgx.silu_mul_quant(xm, masked_m=mm2.long(), use_ue8m0=True, packed_ue8m0=True)
    assert len(moe_activation._fast) == 2
