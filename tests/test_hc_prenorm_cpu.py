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
    assert H.HcPrenormConfig(24, 28672, 64, 1, 16, 15).cluster == 16  # non-portable, allowed at launch


def test_threads_smem_and_ctas_per_sm():
    """Math warpgroups + the producer and rounding warps; three barriers a stage; two 64-row CTAs share an SM when
    their rings fit half of it, 128-row CTAs never (registers)."""
    c = H.HcPrenormConfig(24, 7168, 64, 1, 2, H.stages_for(24, 64, 2, 2))
    assert c.threads == 192 and c.ctas_per_sm == 2 and 2 * (c.smem_bytes + 1024) <= H.SM_SMEM
    assert c.smem_bytes == c.stages * (64 * 128 + 2 * 24 * 128) + 7 * 1024 + 3 * c.stages * 8
    big = H.HcPrenormConfig(24, 7168, 128, 1, 1, 4)
    assert big.threads == 320 and big.smem_bytes < H.SM_SMEM // 2 and big.ctas_per_sm == 1
    assert H.HcPrenormConfig(24, 7168, 64, 1, 1, 15).ctas_per_sm == 1


def test_resident_clusters_model():
    assert H.resident_clusters(1, 1, 132) == 132 and H.resident_clusters(1, 2, 132) == 264
    assert [H.resident_clusters(c, 1, 132) for c in (2, 4, 8, 16)] == [66, 30, 15, 7]
    assert [H.resident_clusters(c, 2, 132) for c in (2, 4, 8, 16)] == [132, 66, 30, 15]


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
    """M >= 4096: at least ~all SMs read (cluster over K where the row blocks alone are too few), in one wave of
    resident clusters (the first device run: 4096 x 28672 on 32 clusters of 4, of which 30 fit at once, ran at
    53% of the HBM peak against 72% for the same bytes in one wave)."""
    for m, k, splits in [(4096, 7168, 1), (4096, 28672, 1), (8192, 7168, 1), (8192, 28672, 1), (137, 28672, 16)]:
        c = H.choose_config(m, 24, k, splits, 132)
        assert c.grid(m) >= 96, c
        if c.cluster > 1:
            assert c.grid(m) // c.cluster <= H.resident_clusters(c.cluster, c.ctas_per_sm, 132), c
    small = H.choose_config(13, 24, 7168, 16, 132)
    assert small.grid(13) >= 32


def test_heuristic_spreads_small_m_without_splits_over_a_cluster_of_16():
    """M 13 / 137 at K 28672 without splits: one (three) row blocks, K over 16 CTAs each (a cluster of 8 gave 17
    µs, 1.7x the torch peer); with portable clusters only, 8."""
    for m in (13, 137):
        c = H.choose_config(m, 24, 28672, 1, 132)
        assert (c.block_m, c.cluster, c.ctas_per_sm) == (64, 16, 1), c
        portable = H.choose_config(m, 24, 28672, 1, 132, H.PORTABLE_CLUSTER)
        assert portable.cluster == 8 and portable in H.warmup_configs(24, 28672, 1, 8192) and c in H.warmup_configs(
            24, 28672, 1, 8192)
    with pytest.raises(ValueError, match="max_cluster"):
        H.choose_config(13, 24, 28672, 1, 132, 3)


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
    H.HcPrenormConfig(64, 7168, 128, 1, 8, 5),  # the widest N, the largest portable cluster
    H.HcPrenormConfig(24, 28672, 64, 1, 16, 15),  # a non-portable cluster of 16
    H.HcPrenormConfig(24, 7168, 64, 1, 2, 7),  # two CTAs an SM (__launch_bounds__ minimum 2)
]


@pytest.mark.parametrize("config", REPRESENTATIVE, ids=lambda c: c.kernel_name)
def test_kernel_compiles_to_tf32_wgmma_without_spills(config, tmp_path):
    from dgx import compiler

    src = config.render()
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options("sm_90a", ("--ptxas-options=-v",)))
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), result.log
    assert not re.search(r"C75\d\d", result.log), result.log  # no serialised wgmma (C7511-C7515)
    assert re.search(rf"Used \d+ registers", result.log)
    regs = int(re.search(r"Used (\d+) registers", result.log).group(1))
    assert regs * config.threads * config.ctas_per_sm <= 65536, "the CTAs an SM should hold fit its registers"
    text = sass_tools.disassemble(result.cubin)
    mma = re.findall(r"\bHGMMA\.64x(\d+)x8\.F32\.TF32\b", text)
    assert mma and {int(n) for n in mma} == {config.n_pad}, "the TF32 wgmma with A from registers"
    assert len(mma) == 16, "eight k8 steps per 64 of K, two loop bodies (one per fragment set)"
    assert len(re.findall(r"\bWARPGROUP\.DEPBAR\.LE gsb0, 0x1\b", text)) == 2, "one stage's MMAs left in flight"
    # b rounded to TF32 in shared memory: one F2FP per float of the rounding lane's share of a stage's b tile.
    assert len(re.findall(r"\bF2FP\.TF32\.F32\b", text)) == 2 * config.n_pad
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


def test_cluster_of_16_launches_non_portable_or_falls_back():
    """M 13 x K 28672 without splits takes a cluster of 16 where one fits (the kernel allowed non-portable clusters
    first); where none fits, the best portable config; an explicit config that cannot be placed is refused."""
    from dgx import runtime
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm

    m, n, k = 13, 24, 28672
    args = (torch.zeros(m, k, dtype=torch.bfloat16), torch.zeros(n, k), torch.zeros(m, n), torch.zeros(m))
    wide = H.choose_config(m, n, k, 1, 132)
    with stand_in() as si:
        tf32_hc_prenorm_gemm(*args)
    assert wide.cluster == 16 and si.driver.launches[0].kernel == wide.kernel_name
    assert si.non_portable == [wide.kernel_name]
    with stand_in() as si:
        runtime.max_active_clusters = lambda kernel, shape: 0 if shape.cluster[0] > 8 else 1 << 20
        tf32_hc_prenorm_gemm(*args)
        with pytest.raises(ValueError, match="no cluster of 16 CTAs fits"):
            tf32_hc_prenorm_gemm(*args, config=wide)
    portable = H.choose_config(m, n, k, 1, 132, H.PORTABLE_CLUSTER)
    assert [x.kernel for x in si.driver.launches] == [portable.kernel_name]


def test_empty_m_launches_nothing():
    from dgx.hc_prenorm import tf32_hc_prenorm_gemm

    with stand_in() as si:
        tf32_hc_prenorm_gemm(torch.zeros(0, 7168, dtype=torch.bfloat16), torch.zeros(24, 7168), torch.zeros(0, 24),
                             torch.zeros(0))
    assert si.driver.launches == []
