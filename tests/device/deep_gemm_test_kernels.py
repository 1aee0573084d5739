"""Precompiles (CPU, no GPU needed) the GEMM kernels DeepGEMM's test files pick through dgx.deep_gemm, so a device
run of tests/device/run_deep_gemm_tests.py spends its time testing instead of compiling.

    DGX_CACHE_DIR=DIR python tests/device/deep_gemm_test_kernels.py [--num-sms 132] [-j N] [--list] [--gpu-tests]

The shapes are those of DeepGEMM's tests/test_core.py at 3fc6728 and the sm_90 cases of tests/test_fp8_fp4.py
(its generators.py) and the FP8 einsum of tests/test_einsum.py at 54e2261, with every M (contiguous: every M_sum) their random group sizes can produce; each
distinct config the heuristics pick is compiled into the kernel cache, plus the prefix-sum twins of the contiguous
ones and the UE8M0 unpack kernel; with --gpu-tests also the kernels of tests/test_gpu_deep_gemm.py. Ship the cache
to the GPU machine with ``dgx cache export`` / ``dgx cache import`` (or point DGX_CACHE_DIR at a copy). The configs
depend on the SM count: 132 is an H100/H200 SXM.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _align(x: int, y: int) -> int:
    return -(-x // y) * y


def _contiguous_ms(groups: int, expected: int) -> range:
    """Every M_sum of `groups` groups of int(expected * U(0.7, 1.3)) rows, each padded to 128."""
    return range(groups * _align(int(expected * 0.7), 128), groups * _align(int(expected * 1.3) + 1, 128) + 1, 128)


def configs(num_sms: int) -> list:
    from dgx.grouped_psum import psum_config
    from dgx.heuristics import choose_dense, choose_grouped, choose_wgrad
    from dgx.kinds import Layout

    out: dict = {}

    def add(config, why: str) -> None:
        out.setdefault(config, why)

    def dense(m, n, k, why):
        add(choose_dense(m, n, k, num_sms).config, why)

    def wgrad(m, n, k, why):
        add(choose_wgrad(m, n, k, num_sms).config, why)

    def contiguous(groups, expected, n, k, why, psum=False):
        for m in _contiguous_ms(groups, expected):
            add(choose_grouped(Layout.CONTIGUOUS, m, n, k, groups, num_sms).config, why)
            if psum:
                add(psum_config(m, n, k, groups, num_sms, 128), why + " (psum)")

    def masked(groups, expected, n, k, why, max_m=4096):
        add(choose_grouped(Layout.MASKED, min(expected, max_m), n, k, groups, num_sms).config, why)

    def k_grouped(groups, m, n, k_lo, k_hi, why):
        for kb in range(max(1, k_lo // 128), k_hi // 128 + 2):
            add(choose_wgrad(m, n, kb * 128, num_sms, Layout.K_GROUPED, groups).config, why)

    # test_core.py at 3fc6728 (DeepGEMM 1.x names)
    for m in (64, 128, 4096):
        for k, n in [(576, 7168), (7168, 2112), (1536, 24576), (512, 32768), (16384, 7168), (7168, 4096), (2048, 7168)]:
            dense(m, n, k, "test_core gemm")
    for groups, expected, k, n in ((4, 8192, 7168, 4096), (4, 8192, 2048, 7168), (8, 4096, 7168, 4096),
                                   (8, 4096, 2048, 7168), (32, 256, 7168, 4096), (32, 256, 2048, 7168)):
        contiguous(groups, expected, n, k, "test_core contiguous")
    for groups, expected in ((1, 1024), (2, 512), (4, 256)):
        for k, n in ((7168, 4096), (2048, 7168)):
            masked(groups, expected, n, k, "test_core masked")
    for k in (4096, 8192):
        for m, n in ((7168, 2112), (1536, 24576), (512, 32768), (16384, 7168), (7168, 4096), (2048, 7168)):
            wgrad(m, n, k, "test_core wgrad")
    for groups, base_k in ((4, 4096), (4, 8192), (8, 4096)):
        for m, n in ((7168, 4096), (2048, 7168)):
            k_grouped(groups, m, n, base_k, base_k, "test_core k_grouped")

    # test_fp8_fp4.py / generators.py at 54e2261, sm_90 cases
    nk = [(2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
    for m in (1, 128, 4096):
        for n, k in nk:
            dense(m, n, k, "test_fp8_fp4 gemm")
    for n, k in nk:
        dense(4096, k, n, "test_fp8_fp4 gemm (dgrad)")
        wgrad(n, 4096, k, "test_fp8_fp4 gemm (wgrad, FP32)")
        dense(n, 4096, k, "test_fp8_fp4 gemm (wgrad shape, BF16)")
    grouped_nk = [(6144, 7168), (7168, 3072), (4096, 4096), (4096, 2048)]
    for groups, expected in [(4, 8192), (8, 4096)]:
        for n, k in grouped_nk:
            contiguous(groups, expected, n, k, "test_fp8_fp4 contiguous", psum=True)
    for groups, expected in [(32, 192), (6, 1024), (32, 20), (6, 20)]:
        for n, k in grouped_nk:
            masked(groups, int(expected * 1.2), n, k, "test_fp8_fp4 masked")
            heuristic_m = min(groups * 4096, int(expected * 1.2) * groups)
            add(psum_config(heuristic_m, n, k, groups, num_sms, 128), "test_fp8_fp4 masked (psum)")
    for groups, m, n, expected_k in ((4, 4096, 7168, 8192), (4, 7168, 2048, 8192), (8, 4096, 7168, 4096),
                                     (8, 7168, 2048, 4096), (16, 4096, 7168, 2048), (16, 7168, 2048, 2048)):
        k_grouped(groups, m, n, int(expected_k * 0.7), _align(int(expected_k * 1.3) + 1, 128),
                  "test_fp8_fp4 k_grouped")

    # test_einsum.py at 54e2261, its sm_90 FP8 case (test_fp8_bhr_hdr_bhd: h 8, d 1024, r 4096)
    from dgx.heuristics import choose_batched

    for b in (4, 32, 128, 4096, 8192):
        add(choose_batched(b, 1024, 4096, 8, num_sms).config, "test_einsum fp8_bhr_hdr_bhd")
    return list(out.items())


def _layout_m(group_rows, align=128, extra=0) -> int:
    """M of tests/test_gpu_deep_gemm.py's _layouts for these groups."""
    start = 0
    for rows in group_rows:
        start = _align(start + rows, align)
    return _align(start + extra, 128)


def gpu_test_configs(num_sms: int) -> list:
    """The kernels tests/test_gpu_deep_gemm.py builds (the same shapes; a test changed since compiles the rest)."""
    from dataclasses import replace

    from dgx.grouped_psum import psum_config
    from dgx.heuristics import choose_dense, choose_grouped, choose_wgrad, pipeline_stages
    from dgx.kernels.fp8_gemm import GemmConfig
    from dgx.kinds import Layout

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from test_gpu_deep_gemm import PSUM_CASES

    out: dict = {}
    why = "test_gpu_deep_gemm"

    def psum_pair(m, n, k, groups, alignment=128, heuristic_m=None):
        config = psum_config(heuristic_m or m, n, k, groups, num_sms, alignment)
        out.setdefault(config, why)
        out.setdefault(replace(config, layout=int(Layout.CONTIGUOUS)), why)
        out.setdefault(choose_grouped(Layout.CONTIGUOUS, m, n, k, groups, num_sms).config, why)

    for rows, n, k in PSUM_CASES:
        psum_pair(_layout_m(rows, extra=200), n, k, len(rows))
    for rows, n, k in PSUM_CASES[1:3]:
        for bm, bn, defer in ((64, 96, True), (128, 160, False)):
            config = GemmConfig(n, k, bm, bn, pipeline_stages(bm, bn), layout=int(Layout.CONTIGUOUS), defer=defer)
            out.setdefault(config, why)
            out.setdefault(replace(config, layout=int(Layout.CONTIGUOUS_PSUM)), why)
    psum_pair(896, 1024, 1024, 4)
    for m in (640, 768):
        out.setdefault(choose_grouped(Layout.CONTIGUOUS, m, 1024, 1024, 4, num_sms).config, why)
    out.setdefault(psum_config(512, 512, 1024, 5, num_sms, 64), why)
    m = _layout_m([3000, 20, 900])
    out.setdefault(psum_config(min(m, 3000), 2048, 2048, 3, num_sms, 128), why)
    out.setdefault(psum_config(512, 256, 512, 3, num_sms, 128), why)
    for m, n, k in ((1, 2112, 7168), (128, 576, 7168), (4096, 7168, 2048), (300, 4096, 640), (256, 512, 1024)):
        out.setdefault(choose_dense(m, n, k, num_sms).config, why)
    for m, n, k in ((512, 384, 1024), (256, 512, 1024)):
        out.setdefault(choose_wgrad(m, n, k, num_sms).config, why)
    out.setdefault(choose_grouped(Layout.MASKED, 128, 512, 1024, 3, num_sms).config, why)
    psum_pair(_layout_m([200, 0, 300]), 512, 1024, 3)
    out.setdefault(choose_wgrad(256, 384, 320, num_sms, Layout.K_GROUPED, 3).config, why)
    return list(out.items())


def _build(source_arch):
    from dgx import warmup

    source, arch = source_arch
    return source.name, warmup.build_one(source, arch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-sms", type=int, default=132)
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--list", action="store_true", help="print the kernels, compile nothing")
    parser.add_argument("--gpu-tests", action="store_true", help="also the kernels of tests/test_gpu_deep_gemm.py")
    args = parser.parse_args(argv)
    os.environ["DGX_JIT_STRICT"] = "0"
    from dgx.kernels.ue8m0 import Ue8m0UnpackConfig
    from dgx.limits import SUPPORTED_ARCH

    found = dict(configs(args.num_sms))
    if args.gpu_tests:
        for config, why in gpu_test_configs(args.num_sms):
            found.setdefault(config, why)
    sources = [(c.render(), why) for c, why in found.items()] + [(Ue8m0UnpackConfig().render(), "packed scales")]
    for src, why in sources:
        print(f"{src.name}  ({why})")
    print(f"{len(sources)} kernels")
    if args.list:
        return 0
    failed = 0
    with ProcessPoolExecutor(args.jobs) as pool:
        for i, (name, (compiled, error)) in enumerate(pool.map(_build, [(s, SUPPORTED_ARCH) for s, _ in sources])):
            state = "FAILED " + error if error else ("compiled" if compiled else "cached")
            failed += bool(error)
            print(f"[{i + 1}/{len(sources)}] {name}: {state}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
