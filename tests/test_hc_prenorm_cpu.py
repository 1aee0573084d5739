"""The HyperConnection pre-norm GEMM without a GPU: configs and the heuristic, NVRTC compiles checked in the SASS,
every bad argument refused before a launch, and the launch the per-call path makes (driver stood in)."""

from __future__ import annotations

import re
import struct

import pytest

from dgx.kernels import hc_prenorm as H
from fake_views import fake_view

torch = pytest.importorskip("torch")
sass_tools = pytest.importorskip("sass_tools")

from driver_stand_in import decode_map, stand_in  # noqa: E402

# --- configs and the heuristic ---------------------------------------------------------------------------------


def test_config_rejects_what_the_kernel_cannot_do():
    for kwargs, match in [
        (dict(n=65), "n must be in"), (dict(n=0), "n must be in"), (dict(block_m=256), "block_m"),
        (dict(splits=0), "splits"), (dict(cluster=3), "cluster"), (dict(stages=1), "stages"), (dict(k=0), "k must"),
    ]:
        args = dict(n=24, k=7168, block_m=64, splits=1, cluster=1, stages=4) | kwargs
        with pytest.raises(ValueError, match=match):
            H.HcPrenormConfig(**args)
    with pytest.raises(ValueError, match="shared memory"):
        H.HcPrenormConfig(64, 7168, 128, 1, 8, 7)


@pytest.mark.parametrize("m", [1, 13, 64, 65, 137, 1000, 4096, 8192, 20000])
@pytest.mark.parametrize("k", [7168, 7680, 28672, 100])
@pytest.mark.parametrize("splits", [1, 16])
def test_heuristic_fits_and_keeps_clustered_ctas_busy(m, k, splits):
    c = H.choose_config(m, 24, k, splits, 132)
    assert (c.n, c.k, c.splits) == (24, k, splits)
    assert c.smem_bytes <= H.SMEM_LIMIT
    if c.cluster > 1:  # every clustered CTA runs at least MIN_K_BLOCKS_PER_CTA k-blocks
        assert c.k_blocks // (splits * c.cluster) >= H.MIN_K_BLOCKS_PER_CTA
    if m <= 64:
        assert c.block_m == 64


def test_heuristic_spreads_the_large_anchors_over_the_sms():
    """M >= 4096: at least ~all SMs read (cluster over K where the row blocks alone are too few)."""
    for m, k in [(4096, 7168), (4096, 28672), (8192, 7168), (8192, 28672)]:
        c = H.choose_config(m, 24, k, 1, 132)
        assert c.grid(m) >= 128, c
    small = H.choose_config(13, 24, 7168, 16, 132)
    assert small.grid(13) >= 32


def test_warmup_configs_cover_every_m():
    configs = H.warmup_configs(24, 7168, 1, 8192)
    assert len(set(configs)) == len(configs) >= 2
    for m in (1, 64, 137, 4096, 8192):
        assert H.choose_config(m, 24, 7168, 1, 132) in configs


def test_render_names_the_tf32_wgmma_and_checks_the_layout():
    c = H.HcPrenormConfig(20, 7168, 64, 16, 4, 6)
    src = c.render()
    assert "wgmma.mma_async.sync.aligned.m64n24k8.f32.tf32.tf32" in src.source  # N 20 runs as 24
    assert f"::kSmemBytes == {c.smem_bytes}" in src.source
    assert src.name == c.kernel_name == "dgx_hc_prenorm_n20_k7168_bm64_sp16_c4_s6"
    with pytest.raises(ValueError, match="N in 8..256"):
        H.render_wgmma_tf32_rs(20)


# --- NVRTC compiles, checked in the SASS -----------------------------------------------------------------------

REPRESENTATIVE = [
    H.HcPrenormConfig(24, 7168, 64, 1, 1, 6),  # one math warpgroup, no cluster
    H.HcPrenormConfig(24, 28672, 128, 1, 2, 9),  # two math warpgroups sharing b, a cluster of 2
    H.HcPrenormConfig(20, 7176, 64, 16, 4, 6),  # N padded to 24, a K tail, splits and a cluster of 4
    H.HcPrenormConfig(64, 7168, 128, 1, 8, 5),  # the widest N, the largest cluster
]


@pytest.mark.parametrize("config", REPRESENTATIVE, ids=lambda c: c.kernel_name)
def test_kernel_compiles_to_tf32_wgmma_without_spills(config, tmp_path):
    from dgx import compiler

    src = config.render()
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options("sm_90a", ("--ptxas-options=-v",)))
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), result.log
    assert "C7514" not in result.log and "C7515" not in result.log, result.log  # no serialised wgmma
    text = sass_tools.disassemble(result.cubin)
    mma = re.findall(r"\bHGMMA\.64x(\d+)x8\.F32\.TF32\b", text)
    assert mma and {int(n) for n in mma} == {config.n_pad}, "the TF32 wgmma with A from registers"
    assert len(mma) == 8, "eight k8 steps per 64 of K, one loop body"
    assert not re.search(r"\b(LDL|STL)(\.|\s)", text), "local-memory traffic"
    assert "UTMALDG" in text
    assert bool(re.search(r"\bUCGABAR_(ARV|WAIT)\b", text)) == (config.cluster > 1), "cluster barriers only in clusters"


# --- input checks ---------------------------------------------------------------------------------------------


def fake(shape, dtype="float32", **kw):
    return fake_view(shape, dtype, **kw)


def _args(m=100, n=24, k=7168, splits=None):
    lead = () if splits is None else (splits,)
    return dict(a=fake((m, k), "bfloat16"), b=fake((n, k)), d=fake(lead + (m, n)), s=fake(lead + (m,)),
                num_splits=splits)


@pytest.mark.parametrize(
    "change,error,match",
    [
        (dict(a=fake((100, 7168), "float32")), TypeError, "a: expected dtype bfloat16"),
        (dict(a=fake((100, 7168, 1), "bfloat16")), ValueError, "a: expected a 2-D tensor"),
        (dict(a=fake((100, 7168), "bfloat16", strides=(1, 100))), ValueError, "a: expected contiguous rows"),
        (dict(a=fake((100, 7168), "bfloat16", strides=(7172, 1))), ValueError, "multiple of 16 bytes"),
        (dict(a=fake((100, 7168), "bfloat16", ptr=(1 << 40) + 8)), ValueError, "a: expected a 16-byte aligned"),
        (dict(b=fake((24, 7168), "bfloat16")), TypeError, "b: expected dtype float32"),
        (dict(b=fake((24, 7000))), ValueError, "b: expected K = 7168"),
        (dict(b=fake((65, 7168))), ValueError, "b: expected 1 to 64 rows"),
        (dict(d=fake((100, 24), "bfloat16")), TypeError, "d: expected dtype float32"),
        (dict(d=fake((100, 25))), ValueError, "d: expected shape"),
        (dict(d=fake((100, 24), strides=(48, 2))), ValueError, "d: expected its last dimension contiguous"),
        (dict(s=fake((101,))), ValueError, "s: expected shape"),
        (dict(s=fake((100,), device=1)), ValueError, "cuda:0 like the others"),
        (dict(num_splits=0), ValueError, "num_splits: expected None or an int"),
        (dict(num_splits=True), ValueError, "num_splits"),
        (dict(num_splits=4), ValueError, "d: expected shape \\(4, 100, 24\\)"),
    ],
)
def test_bad_inputs_are_refused_before_a_launch(change, error, match):
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm

    args = {**_args(), **change}
    with pytest.raises(error, match=match):
        tf32_hc_prenorm_gemm(**args)


def test_split_shapes_and_configs_are_checked():
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm

    with pytest.raises(ValueError, match="s: expected shape \\(16, 100\\)"):
        tf32_hc_prenorm_gemm(**{**_args(splits=16), "s": fake((100,))})
    with pytest.raises(ValueError, match="does not fit this call"):
        tf32_hc_prenorm_gemm(**_args(), config=H.HcPrenormConfig(24, 7168, 64, 2, 1, 4))
    with pytest.raises(TypeError, match="config: expected an HcPrenormConfig"):
        tf32_hc_prenorm_gemm(**_args(), config="fast")


# --- the launch (driver stood in) ------------------------------------------------------------------------------


def _params(launch) -> dict:
    out = {}
    for p, off in zip(H.INTERFACE.params, H.INTERFACE.offsets):
        if p.ctype == "dgx::TensorMap":
            out[p.name] = decode_map(launch.params[off:off + 128])
        else:
            fmt = "Q" if p.ctype.endswith("*") else {"int": "i", "long long": "q"}[p.ctype]
            out[p.name] = struct.unpack_from("<" + fmt, launch.params, off)[0]
    return out


@pytest.mark.parametrize("m,splits", [(137, 16), (4096, None), (1, None)])
def test_launch_carries_the_maps_strides_and_grid(m, splits):
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm

    k, n = 7168, 24
    a = torch.zeros(m, k, dtype=torch.bfloat16)
    b = torch.zeros(n, k)
    lead = () if splits is None else (splits,)
    d = torch.zeros(lead + (m, n))
    s = torch.zeros(lead + (m,))
    with stand_in() as si:
        tf32_hc_prenorm_gemm(a, b, d, s, num_splits=splits)
        tf32_hc_prenorm_gemm(a, b, d, s, num_splits=splits)  # the packed parameters are reused
    assert len(si.driver.launches) == 2 and si.driver.encodes == 2
    launch = si.driver.launches[0]
    config = H.choose_config(m, n, k, splits or 1, 132)
    assert launch.kernel == config.kernel_name and launch.grid == (config.grid(m), 1, 1)
    p = _params(launch)
    assert p["m"] == m and p["d"] == d.data_ptr() and p["s"] == s.data_ptr()
    assert p["d_row_stride"] == n and p["d_split_stride"] == (m * n if splits else 0)
    assert p["s_split_stride"] == (m if splits else 0)
    assert p["tmap_a"]["address"] == a.data_ptr() and p["tmap_a"]["dims"] == (k, m)
    assert p["tmap_a"]["box"] == (64, config.block_m)
    assert p["tmap_b"]["dims"] == (k, n) and p["tmap_b"]["box"] == (32, 24) and p["tmap_b"]["strides"] == (k * 4,)


def test_empty_m_launches_nothing():
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm

    with stand_in() as si:
        tf32_hc_prenorm_gemm(torch.zeros(0, 7168, dtype=torch.bfloat16), torch.zeros(24, 7168), torch.zeros(0, 24),
                             torch.zeros(0))
    assert si.driver.launches == []
