"""The BF16 GEMM entry points on the CPU: valid calls launch the kernel the heuristic picks with tensor maps that say
what the kernel reads and writes; every bad input raises its typed error before anything is queued (the driver is
stood in: tests/driver_stand_in.py)."""

from __future__ import annotations

import re

import pytest
import torch

from dgx import bf16
from dgx.kernels.bf16_gemm import INTERFACE, Bf16GemmConfig
from driver_stand_in import decode_map, stand_in

BF16, F32, I32 = torch.bfloat16, torch.float32, torch.int32
DTYPE_CODES = {"bfloat16": 9, "float32": 7}  # CUtensorMapDataType


def t(*shape, dtype=BF16):
    return torch.zeros(*shape, dtype=dtype)


def maps_of(launch) -> dict:
    names = [p.name for p in INTERFACE.params]
    out = {}
    for name in ("tmap_a", "tmap_b", "tmap_d"):
        off = INTERFACE.offsets[names.index(name)]
        out[name] = decode_map(launch.params[off:off + 128])
    return out


def scalar(launch, name: str, fmt: str = "<i") -> int:
    import struct

    off = INTERFACE.offsets[[p.name for p in INTERFACE.params].index(name)]
    return struct.unpack_from(fmt, launch.params, off)[0]


@pytest.fixture
def gpu():
    with stand_in() as state:
        yield state


def launched(gpu, count: int = 1):
    assert len(gpu.driver.launches) == count, [l.kernel for l in gpu.driver.launches]
    return gpu.driver.launches[-1]


# --- valid calls ---------------------------------------------------------------------------------------------------

M, N, K = 256, 512, 1024


@pytest.mark.parametrize("form", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("out", [BF16, F32])
def test_dense_forms_read_the_operands_as_they_lie(gpu, form, out):
    a = t(M, K) if form[0] == "n" else t(K, M)
    b = t(N, K) if form[1] == "t" else t(K, N)
    d = t(M, N, dtype=out)
    getattr(bf16, f"bf16_gemm_{form}")(a, b, d)
    run = launched(gpu)
    assert run.kernel.startswith(f"dgx_bf16_gemm_{form}_{'bf16' if out == BF16 else 'f32'}_n{N}_k{K}_")
    maps = maps_of(run)
    # A: K-major as (K, M), rows K apart; M-major as (M, K), lines of K M apart. B likewise, N-major in 3-D.
    assert maps["tmap_a"]["address"] == a.data_ptr()
    assert maps["tmap_a"]["dims"] == ((K, M) if form[0] == "n" else (M, K))
    assert maps["tmap_a"]["strides"] == ((K * 2,) if form[0] == "n" else (M * 2,))
    assert maps["tmap_b"]["dims"] == ((K, N) if form[1] == "t" else (N, K, 1))
    assert maps["tmap_b"]["strides"][0] == (K * 2 if form[1] == "t" else N * 2)
    assert maps["tmap_d"]["address"] == d.data_ptr() and maps["tmap_d"]["dims"] == (N, M)
    assert maps["tmap_d"]["dtype"] == DTYPE_CODES["bfloat16" if out == BF16 else "float32"]
    assert maps["tmap_d"]["strides"] == (N * d.element_size(),)
    assert scalar(run, "m") == M
    assert not gpu.driver.copies and not gpu.driver.memsets


def test_either_major_ness_in_any_form(gpu):
    a_t = t(K, M).T  # a [M, K] stored M-major: the nt form reads it as is
    bf16.bf16_gemm_nt(a_t, t(N, K), t(M, N))
    assert launched(gpu).kernel.startswith("dgx_bf16_gemm_tt_")


def test_c_is_added_in_place_or_copied_first(gpu):
    a, b, d = t(M, K), t(N, K), t(M, N, dtype=F32)
    bf16.bf16_gemm_nt(a, b, d, c=d)
    assert "_f32_c_" in launched(gpu).kernel and not gpu.driver.copies
    c = t(M, N, dtype=F32)
    bf16.bf16_gemm_nt(a, b, d, c=c)
    assert "_f32_c_" in launched(gpu, 2).kernel
    assert gpu.driver.copies == [(d.data_ptr(), N * 4, c.data_ptr(), N * 4, N * 4, M)]  # c into d, then the kernel
    bf16.bf16_gemm_nt(a, b, t(M, N), c=t(M, N))  # BF16 d with a BF16 c
    assert "_bf16_c_" in launched(gpu, 3).kernel


def test_empty_problems(gpu):
    bf16.bf16_gemm_nt(t(0, K), t(N, K), t(0, N))
    bf16.bf16_gemm_nt(t(M, K), t(0, K), t(M, 0))
    assert not gpu.driver.launches
    d = t(M, N, dtype=F32)
    bf16.bf16_gemm_nt(t(M, 0), t(N, 0), d)  # K = 0: d = 0
    assert gpu.driver.memsets == [(d.data_ptr(), N * 4, 0, N * 4, M)] and not gpu.driver.launches
    c = t(M, N, dtype=F32)
    bf16.bf16_gemm_nt(t(M, 0), t(N, 0), d, c=c)  # K = 0: d = c
    assert len(gpu.driver.copies) == 1 and not gpu.driver.launches


def test_odd_shapes_within_the_alignment(gpu):
    bf16.bf16_gemm_nt(t(17, 72), t(8, 72), t(17, 8))
    run = launched(gpu)
    assert maps_of(run)["tmap_a"]["dims"] == (72, 17) and scalar(run, "m") == 17
    bf16.bf16_gemm_nt(t(1, 7168), t(2112, 7168), t(1, 2112))
    assert scalar(launched(gpu, 2), "m") == 1


def test_a_given_config_must_fit(gpu):
    good = Bf16GemmConfig(n=N, k=K, block_m=128, block_n=128, stages=4)
    bf16.bf16_gemm_nt(t(M, K), t(N, K), t(M, N), config=good)
    assert launched(gpu).kernel == good.kernel_name
    with pytest.raises(ValueError, match=re.escape("major_b k (needs mn)")):
        bf16.bf16_gemm_nn(t(M, K), t(K, N), t(M, N), config=good)
    with pytest.raises(ValueError, match=re.escape("n 512 (needs 256)")):
        bf16.bf16_gemm_nt(t(M, K), t(256, K), t(M, 256), config=good)
    with pytest.raises(TypeError, match="config: expected a Bf16GemmConfig"):
        bf16.bf16_gemm_nt(t(M, K), t(N, K), t(M, N), config="128x128")
    assert len(gpu.driver.launches) == 1


G = 4


def test_contiguous_with_m_indices(gpu):
    a, b, d, idx = t(G * 256, K), t(G, N, K), t(G * 256, N), t(G * 256, dtype=I32)
    bf16.m_grouped_bf16_gemm_nt_contiguous(a, b, d, idx)
    run = launched(gpu)
    assert "_nt_contiguous_bf16_" in run.kernel
    maps = maps_of(run)
    assert maps["tmap_a"]["dims"] == (K, G * 256) and maps["tmap_b"]["dims"] == (K, G * N)
    assert scalar(run, "grouped_layout", "<Q") == idx.data_ptr() and scalar(run, "num_groups") == G
    bf16.m_grouped_bf16_gemm_nn_contiguous(a, t(G, K, N), d, idx)  # b [G, K, N]: N-major, 3-D map
    maps = maps_of(launched(gpu, 2))
    assert "_nn_contiguous_" in launched(gpu, 2).kernel
    assert maps["tmap_b"]["dims"] == (N, K, G) and maps["tmap_b"]["strides"] == (N * 2, K * N * 2)


def test_contiguous_with_prefix_sums(gpu):
    a, b, d, psum = t(G * 256, K), t(G, N, K), t(G * 256, N), t(G, dtype=I32)
    bf16.m_grouped_bf16_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True, expected_m_for_psum_layout=200)
    run = launched(gpu)
    assert "_nt_contiguous_psum_" in run.kernel and "_bm128_" in run.kernel
    bf16.m_grouped_bf16_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True, alignment=64)
    assert "_bm64_" in launched(gpu, 2).kernel


def test_masked(gpu):
    a, b, d, mm = t(G, 512, K), t(G, N, K), t(G, 512, N), t(G, dtype=I32)
    bf16.m_grouped_bf16_gemm_nt_masked(a, b, d, mm, 200)
    run = launched(gpu)
    assert "_nt_masked_bf16_" in run.kernel and scalar(run, "m") == 512 and scalar(run, "num_groups") == G
    maps = maps_of(run)
    assert maps["tmap_a"]["dims"] == (K, G * 512) and maps["tmap_d"]["dims"] == (N, G * 512)
    assert scalar(run, "ld_d", "<q") == N
    bf16.m_grouped_bf16_gemm_nt_masked(t(G, 1, K), b, t(G, 1, N), mm, 1)  # M_max 1: the groups are the rows
    assert maps_of(launched(gpu, 2))["tmap_a"]["strides"] == (K * 2,)


def test_k_grouped(gpu):
    ks = [256, 0, 512, 128]
    kt = sum(ks)
    a, b, d = t(kt, M), t(kt, N), t(G, M, N, dtype=F32)
    ks_tensor = torch.tensor(ks, dtype=I32)
    bf16.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ks_tensor, d)
    run = launched(gpu)
    assert "_tn_k_grouped_f32_c_" in run.kernel and not gpu.driver.memsets
    maps = maps_of(run)
    assert maps["tmap_a"]["dims"] == (M, kt) and maps["tmap_b"]["dims"] == (N, kt, 1)
    assert maps["tmap_d"]["dims"] == (N, M, G) and maps["tmap_d"]["strides"] == (N * 4, M * N * 4)
    assert scalar(run, "grouped_layout", "<Q") == ks_tensor.data_ptr() and scalar(run, "m") == M
    # Without c: d = a^T b per group, the empty group's d zeroed.
    bf16.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ks_tensor)
    assert "_tn_k_grouped_f32_n" in launched(gpu, 2).kernel
    assert gpu.driver.memsets == [(d.data_ptr() + M * N * 4, N * 4, 0, N * 4, M)]
    c = t(G, M, N, dtype=F32)
    bf16.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ks_tensor, c)
    assert gpu.driver.copies == [(d.data_ptr(), N * 4, c.data_ptr(), N * 4, N * 4, G * M)]


# --- bad inputs: typed errors, nothing queued ---------------------------------------------------------------------


def _dense_case(**over):
    args = dict(a=t(M, K), b=t(N, K), d=t(M, N), c=None)
    args.update(over)
    return args


@pytest.mark.parametrize(
    "over, error, message",
    [
        (dict(a=t(M, K, dtype=F32)), TypeError, "a: expected dtype bfloat16; got float32"),
        (dict(b=t(N, K, dtype=torch.int32)), TypeError, "b: expected dtype bfloat16; got int32"),
        (dict(d=t(M, N, dtype=torch.uint8)), TypeError, "d: expected dtype bfloat16 or float32; got uint8"),
        (dict(a=t(1, M, K)), ValueError, "a: expected a 2-D tensor"),
        (dict(d=t(M * N)), ValueError, "d: expected a 2-D tensor [M, N]"),
        (dict(b=t(N, K + 8)), ValueError, f"b: expected K = {K} like a; got {K + 8}"),
        (dict(d=t(M, N + 8)), ValueError, f"d: expected shape ({M}, {N})"),
        (dict(b=t(12, K), d=t(M, 12)), ValueError, "d: N must be a multiple of 8"),
        (dict(a=t(M, 2 * K)[:, ::2]), ValueError, "a: expected K contiguous (strides (S, 1)) or M contiguous"),
        (dict(a=t(M, K + 4)[:, :K]), ValueError, "a: TMA needs rows (stride along M) that are a multiple of 16 bytes"),
        (dict(b=t(K, N + 4)[:, :N].T), ValueError, "b: TMA needs lines of K (stride along K) that are a multiple"),
        (dict(a=t(M * K + 1)[1:].view(M, K)), ValueError, "a: TMA needs a 16-byte aligned base address"),
        (dict(d=t(M, 2 * N)[:, ::2]), ValueError, "d: expected contiguous rows (last stride 1)"),
        (dict(d=t(M * N + 1)[1:].view(M, N)), ValueError, "d: TMA needs a 16-byte aligned base address"),
        (dict(d=t(M, N, dtype=F32), c=t(M, N)), TypeError, "c: expected dtype float32 like d; got bfloat16"),
        (dict(c=t(M, N + 8)), ValueError, f"c: expected shape ({M}, {N})"),
        (dict(c=t(M, 2 * N)[:, ::2]), ValueError, "c: expected contiguous rows"),
    ],
)
def test_dense_input_checks(gpu, over, error, message):
    args = _dense_case(**over)
    with pytest.raises(error, match=re.escape(message)):
        bf16.bf16_gemm_nt(args["a"], args["b"], args["d"], c=args["c"])
    assert not gpu.driver.launches and not gpu.driver.copies and not gpu.driver.memsets and not gpu.kernels


def test_other_dense_arguments(gpu):
    with pytest.raises(TypeError, match="compiled_dims: expected a str"):
        bf16.bf16_gemm_nt(t(M, K), t(N, K), t(M, N), None, 3)
    with pytest.raises(ValueError, match=re.escape(f"b: expected K = {K} like a; got {N}")):
        bf16.bf16_gemm_nn(t(M, K), t(N, K), t(M, N))  # nn takes b [K, N]
    with pytest.raises(TypeError, match="a: expected a tensor"):
        bf16.bf16_gemm_nt([[1.0]], t(N, K), t(M, N))
    buffer = t(M * (N + 8))
    d, c = buffer[: M * N].view(M, N), torch.as_strided(buffer, (M, N), (N + 8, 1))  # one address, two layouts
    with pytest.raises(ValueError, match="c: is d's memory with other strides"):
        bf16.bf16_gemm_nt(t(M, K), t(N, K), d, c=c)
    assert not gpu.driver.launches


@pytest.mark.parametrize(
    "over, kwargs, error, message",
    [
        (dict(a=t(G * 256, K).T.contiguous().T), {}, ValueError, "a: the M-grouped GEMMs take a K-major a"),
        (dict(a=t(G * 256 - 64, K), d=t(G * 256 - 64, N), idx=t(G * 256 - 64, dtype=I32)), {}, ValueError,
         "a: M_sum must be a multiple of the contiguous-layout alignment 128"),
        (dict(b=t(N, K)), {}, ValueError, "b: expected a 3-D tensor"),
        (dict(b=t(G, N, K + 8)), {}, ValueError, f"b: expected K = {K} like a"),
        (dict(b=t(G, N + 8, K)[:, :N]), {}, ValueError, "b: expected the groups stored one after another"),
        (dict(d=t(G * 256, N, dtype=F32)), {}, TypeError, "d: expected dtype bfloat16; got float32"),
        (dict(idx=t(G * 256, dtype=torch.int64)), {}, TypeError, "grouped_layout"),
        (dict(idx=t(G * 256 + 1, dtype=I32)), {}, ValueError, f"grouped_layout: expected shape ({G * 256},)"),
        (dict(idx=t(G, dtype=I32)), dict(use_psum_layout=True, alignment=96), ValueError,
         "alignment: the prefix-sum layout needs groups aligned to a multiple of 64 rows"),
        (dict(idx=t(G + 1, dtype=I32)), dict(use_psum_layout=True), ValueError, f"grouped_layout: expected shape ({G},)"),
        (dict(idx=t(G, dtype=I32)), dict(use_psum_layout=True, expected_m_for_psum_layout=0), ValueError,
         "expected_m_for_psum_layout: expected None or a positive int"),
        ({}, dict(expected_m_for_psum_layout=64), ValueError, "expected_m_for_psum_layout: only for use_psum_layout"),
        ({}, dict(use_psum_layout=1), TypeError, "use_psum_layout: expected a bool"),
        (dict(a=t(G * 256, 0), b=t(G, N, 0)), {}, ValueError, "a: K must be positive for the M-grouped GEMMs"),
    ],
)
def test_contiguous_input_checks(gpu, over, kwargs, error, message):
    args = dict(a=t(G * 256, K), b=t(G, N, K), d=t(G * 256, N), idx=t(G * 256, dtype=I32))
    args.update(over)
    with pytest.raises(error, match=re.escape(message)):
        bf16.m_grouped_bf16_gemm_nt_contiguous(args["a"], args["b"], args["d"], args["idx"], **kwargs)
    assert not gpu.driver.launches and not gpu.kernels


@pytest.mark.parametrize(
    "over, expected_m, error, message",
    [
        (dict(a=t(G, 512, K).transpose(1, 2).contiguous().transpose(1, 2)), 64, ValueError,
         "a: the masked GEMM takes a K-major a"),
        (dict(b=t(G, K, N).transpose(1, 2)), 64, ValueError, "b: the masked GEMM takes a K-major b"),
        (dict(b=t(G + 1, N, K)), 64, ValueError, f"b: expected {G} groups like a"),
        (dict(a=t(G, 520, K)[:, :512]), 64, ValueError, "a: expected the groups stored one after another"),
        (dict(d=t(G, 520, N)[:, :512]), 64, ValueError, "d: expected the groups stored one after another"),
        (dict(d=t(G, 512, N, dtype=F32)), 64, TypeError, "d: expected dtype bfloat16; got float32"),
        (dict(mm=t(G, 1, dtype=I32)), 64, ValueError, "masked_m: expected a 1-D tensor"),
        (dict(mm=t(G + 1, dtype=I32)), 64, ValueError, f"masked_m: expected shape ({G},)"),
        ({}, 0, ValueError, "expected_m: expected a positive int; got 0"),
        ({}, 64.0, ValueError, "expected_m: expected a positive int; got 64.0"),
    ],
)
def test_masked_input_checks(gpu, over, expected_m, error, message):
    args = dict(a=t(G, 512, K), b=t(G, N, K), d=t(G, 512, N), mm=t(G, dtype=I32))
    args.update(over)
    with pytest.raises(error, match=re.escape(message)):
        bf16.m_grouped_bf16_gemm_nt_masked(args["a"], args["b"], args["d"], args["mm"], expected_m)
    assert not gpu.driver.launches and not gpu.kernels


KS = [256, 0, 512, 128]


@pytest.mark.parametrize(
    "over, error, message",
    [
        (dict(ks=[256, 0, 500, 128]), ValueError, "ks[2]: expected a non-negative multiple of 128; got 500"),
        (dict(ks=[256, -128, 512, 256]), ValueError, "ks[1]: expected a non-negative multiple of 128"),
        (dict(ks="abc"), TypeError, "ks: expected a sequence of ints"),
        (dict(ks=[]), ValueError, "ks: expected at least one group"),
        (dict(a=t(896 + 128, M)), ValueError, f"a: expected shape (896, {M})"),
        (dict(b=t(896, N).T.contiguous().T), ValueError, "b: expected contiguous rows"),
        (dict(d=t(G, M, N)), TypeError, "d: expected dtype float32; got bfloat16"),
        (dict(d=t(G + 1, M, N, dtype=F32)), ValueError, f"d: expected {G} groups like ks"),
        (dict(d=t(G, M + 8, N, dtype=F32)[:, :M]), ValueError, "d: expected the groups stored one after another"),
        (dict(c=t(G, M, N)), TypeError, "c: expected dtype float32 like d; got bfloat16"),
        (dict(ks_tensor=t(G + 1, dtype=I32)), ValueError, f"ks_tensor: expected shape ({G},)"),
        (dict(ks_tensor=t(G, dtype=F32)), TypeError, "ks_tensor: expected dtype int32"),
        (dict(use_psum_layout=True), ValueError, "use_psum_layout: the K-grouped GEMM takes the groups' K"),
    ],
)
def test_k_grouped_input_checks(gpu, over, error, message):
    args = dict(a=t(896, M), b=t(896, N), d=t(G, M, N, dtype=F32), ks=KS, ks_tensor=t(G, dtype=I32), c=None,
                use_psum_layout=False)
    args.update(over)
    with pytest.raises(error, match=re.escape(message)):
        bf16.k_grouped_bf16_gemm_tn_contiguous(args["a"], args["b"], args["d"], args["ks"], args["ks_tensor"],
                                               args["c"], use_psum_layout=args["use_psum_layout"])
    assert not gpu.driver.launches and not gpu.driver.memsets and not gpu.driver.copies and not gpu.kernels
