"""Device experiment: the fastest a kernel can read N bytes on this card, under the benchmark's flush and a clean one.

The decode GEMMs (#26) and the paged MQA decode kernel (#25) are judged by the share of the HBM peak they reach on
the bytes they must read. This script measures what a kernel that does nothing but read reaches on the same byte
counts: one CTA per SM, one thread issuing 1-D bulk copies (cp.async.bulk, the TMA's non-tensor form) of `chunk`
bytes into a ring of `stages` shared-memory slots, each slot re-filled as soon as its previous fill has landed, so
`stages x chunk` bytes are in flight per SM all the time. Nothing is computed and nothing is written. Two access
patterns: contiguous (each CTA one slice of the buffer: a GEMM's B; what `dgx bench`'s read floor,
ptx/read_stream.cuh, times with evict-first) and paged (8448-byte blocks, the paged cache's
64 tokens x 132 bytes, in a shuffled order: a block table's). Each with and without the L2 evict-first policy, after
the dirty flush (zero 1 GB: what `dgx bench` does) and the clean one (that, then read 256 MB).

    python read_floor.py [--precompile] [--tiles-only] [--json FILE]      (from tests/device/)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from dgx import jit  # noqa: E402
from dgx.kernels.interface import KernelInterface, Param  # noqa: E402

NUM_SMS = 132
HBM_PEAK_GBPS = 3350.0
ROUNDS = int(os.environ.get("PERF_ROUNDS", "2"))
PAGE = 8448  # one paged-cache block: 64 tokens x (128 FP8 values + one FP32 scale)

# ptx/read_stream.cuh's kernel (the benchmark's read floor), with the paged order and the L2 hint as options.
INTERFACE = KernelInterface(
    "ReadFloorParams",
    (
        Param("src", "const unsigned char*"),
        Param("pages", "const int*"),  # paged: the order of the blocks; contiguous: unused
        Param("chunks", "long long"),  # chunks in all
    ),
)

TILE_BODY = r"""
#include "mbarrier.cuh"
#include "tma.cuh"
namespace dgx {
// GEMM-like: CTA i reads rows [kRowsB * i, +kRowsB) of B [N, K] one 128-byte k-block at a time through a 2-D tensor
// map (128B swizzle, the GEMM's boxes), and with kRowsA > 0 also the whole of A [kRowsA, K] (each CTA re-reads it).
template <int kStages, int kRowsB, int kRowsA, bool kHint, typename View>
DGX_DEVICE void read_tiles_body(const View& p) {
    extern __shared__ __align__(1024) unsigned char smem[];
    constexpr int kStage = 128 * (kRowsB + kRowsA);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStage);
    if (threadIdx.x != 0) return;
    for (int s = 0; s < kStages; ++s) mbarrier_init(&full[s], 1);
    fence_barrier_init();
    const uint64_t policy = kHint ? l2_evict_first_policy() : 0;
    for (int k = 0; k < p.kblocks; ++k) {
        const int s = k % kStages;
        if (k >= kStages) mbarrier_wait(&full[s], ((k / kStages) - 1) & 1);
        mbarrier_arrive_expect_tx(&full[s], kStage);
        tma_load_2d<kHint>(&p.map_b, &full[s], smem + s * kStage, k * 128, blockIdx.x * kRowsB, policy);
        if constexpr (kRowsA > 0) tma_load_2d(&p.map_a, &full[s], smem + s * kStage + 128 * kRowsB, k * 128, 0);
    }
    const int n = p.kblocks;
    for (int i = n > kStages ? n - kStages : 0; i < n; ++i) mbarrier_wait(&full[i % kStages], (i / kStages) & 1);
}
}  // namespace dgx
"""

TILE_INTERFACE = KernelInterface(
    "ReadTilesParams",
    (Param("map_b", "dgx::TensorMap"), Param("map_a", "dgx::TensorMap"), Param("kblocks", "int")),
)


@dataclass(frozen=True)
class TileVariant:
    stages: int
    rows_b: int
    rows_a: int
    hint: bool

    @property
    def name(self) -> str:
        return f"dgx_read_tiles_s{self.stages}_b{self.rows_b}_a{self.rows_a}_{'ef' if self.hint else 'n'}"

    @property
    def smem(self) -> int:
        return self.stages * 128 * (self.rows_b + self.rows_a) + 8 * self.stages

    def render(self) -> jit.KernelSource:
        body = f"dgx::read_tiles_body<{self.stages}, {self.rows_b}, {self.rows_a}, {str(self.hint).lower()}>"
        return jit.KernelSource(name=self.name, source=TILE_BODY + TILE_INTERFACE.render_entry(self.name, 32, body),
                                dynamic_smem=self.smem)


# (label, N, K, rows of B per CTA, rows of A): the decode GEMMs' B read as the heuristic's tiles read it.
TILE_CASES = [("64x2112x7168", 2112, 7168, 16, 64), ("128x2112x7168", 2112, 7168, 16, 128),
              ("64x4096x7168", 4096, 7168, 32, 64)]


def tile_variants(rows_b: int, rows_a: int) -> list[TileVariant]:
    return [TileVariant(8, rows_b, 0, False), TileVariant(8, rows_b, 0, True), TileVariant(8, rows_b, rows_a, False),
            TileVariant(8, rows_b, rows_a, True)]


@dataclass(frozen=True)
class Variant:
    stages: int
    chunk: int
    hint: bool
    paged: bool

    @property
    def name(self) -> str:
        return f"dgx_read_floor_s{self.stages}_c{self.chunk}_{'ef' if self.hint else 'n'}_{'pg' if self.paged else 'ct'}"

    @property
    def smem(self) -> int:
        return self.stages * self.chunk + 8 * self.stages

    def render(self) -> jit.KernelSource:
        body = (f"dgx::read_stream_body<{self.stages}, {self.chunk}, {str(self.hint).lower()}, "
                f"{str(self.paged).lower()}>")
        return jit.KernelSource(name=self.name,
                                source='#include "read_stream.cuh"\n' + INTERFACE.render_entry(self.name, 32, body),
                                dynamic_smem=self.smem)


# Contiguous reads sized like the decode GEMMs' B (N x K bytes) and paged reads like the paged cache at B x 8K.
CONTIGUOUS_MB = {"B 2112x7168": 2112 * 7168, "B 4096x7168": 4096 * 7168, "B 7168x2048": 7168 * 2048,
                 "B 24576x1536": 24576 * 1536, "B 7168x16384": 7168 * 16384}
PAGED_BLOCKS = {"cache B64 8K": 64 * 128, "cache B256 8K": 256 * 128}


def variants(paged: bool) -> list[Variant]:
    chunk = PAGE if paged else 16384
    return [Variant(s, chunk, h, paged) for s in ((4, 8, 12) if paged else (4, 8)) for h in (False, True)]


def gemm_variants() -> dict:
    """The heuristic's config of the GEMMs the tile reads stand for, with the B stream evict-first or not, and
    with fewer stages (the tile reads use 8)."""
    import dataclasses

    from dgx.heuristics import choose_dense

    out = {}
    for m, n, k in ((64, 2112, 7168), (128, 2112, 7168), (64, 4096, 7168)):
        base = choose_dense(m, n, k, NUM_SMS).config
        out[(m, n, k)] = [("heuristic", base)] + [
            (f"s{stages}{' sb' if sb else ''}", dataclasses.replace(base, stages=stages, stream_b=sb))
            for stages in sorted({base.stages, 8, 6}) for sb in (False, True)
            if (stages, sb) != (base.stages, base.stream_b)]
    return out


def precompile() -> None:
    vs = variants(False) + variants(True) + [v for c in TILE_CASES for v in tile_variants(c[3], c[4])]
    vs += [c for configs in gemm_variants().values() for _, c in configs]
    for v in vs:
        jit.get_cubin(v.render(), "sm_90a")
    print(f"built {len(vs)} kernels", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--tiles-only", action="store_true", help="only the GEMM-like tile reads and the GEMMs")
    args = ap.parse_args()
    if args.precompile:
        precompile()
        return 0

    import torch

    from dgx import runtime
    from gpu_gemm_utils import kernel_rounds, l2_flushes

    flushes = l2_flushes()
    stream = torch.cuda.current_stream().cuda_stream
    results = []

    def launcher(v: Variant):
        kernel = jit.get_kernel(v.render(), torch.cuda.current_device())
        return runtime.Launcher(kernel, runtime.LaunchShape((NUM_SMS, 1, 1), (32, 1, 1), dynamic_smem=v.smem))

    def case(label: str, nbytes: int, paged: bool):
        chunk = PAGE if paged else 16384
        chunks = nbytes // chunk
        buf = torch.empty(chunks * chunk, dtype=torch.uint8, device="cuda")
        order = torch.randperm(chunks, device="cuda", dtype=torch.int64).to(torch.int32)
        fns = {}
        for v in variants(paged):
            lau = launcher(v)
            pack = INTERFACE.pack(src=buf.data_ptr(), pages=order.data_ptr(), chunks=chunks)
            fns[v.name] = (lambda lau=lau, pack=pack: lau.launch(stream, pack))
        samples = kernel_rounds(fns, flushes, ROUNDS)
        keys = list(samples)
        moved = chunks * chunk
        print(f"{label} ({moved / 1e6:.1f} MB, {'paged' if paged else 'contiguous'}): ideal "
              f"{moved / HBM_PEAK_GBPS / 1e3:.1f} us", flush=True)
        for name, f in keys:
            us = statistics.median(samples[(name, f)])
            gbps = moved / us / 1e3
            results.append({"case": label, "bytes": moved, "variant": name, "flush": f, "us": us,
                            "rounds": samples[(name, f)], "gbps": gbps})
            print(f"  {name:36s} {f:5s} {us:8.2f} us {gbps:6.0f} GB/s {100 * gbps / HBM_PEAK_GBPS:4.0f}%",
                  flush=True)
        del buf, order

    if not args.tiles_only:
        for label, nbytes in CONTIGUOUS_MB.items():
            case(label, nbytes, False)
        for label, blocks in PAGED_BLOCKS.items():
            case(label, blocks * PAGE, True)

    for label, n, k, rows_b, rows_a in TILE_CASES:
        b = torch.empty(n * k, dtype=torch.uint8, device="cuda")
        a = torch.empty(rows_a * k, dtype=torch.uint8, device="cuda")
        map_b = runtime.encode_tensor_map_2d("uint8", b.data_ptr(), k, n, k, 128, rows_b, runtime.Swizzle.B128)
        map_a = runtime.encode_tensor_map_2d("uint8", a.data_ptr(), k, rows_a, k, 128, rows_a, runtime.Swizzle.B128)
        fns = {}
        for v in tile_variants(rows_b, rows_a):
            kernel = jit.get_kernel(v.render(), torch.cuda.current_device())
            lau = runtime.Launcher(kernel, runtime.LaunchShape((n // rows_b, 1, 1), (32, 1, 1), dynamic_smem=v.smem))
            pack = TILE_INTERFACE.pack(map_b=map_b, map_a=map_a, kblocks=k // 128)
            fns[v.name] = (lambda lau=lau, pack=pack: lau.launch(stream, pack))
        samples = kernel_rounds(fns, flushes, ROUNDS)
        keys = list(samples)
        print(f"tiles {label}: B {n * k / 1e6:.1f} MB in {n // rows_b} CTAs of {rows_b} rows, A {rows_a} rows",
              flush=True)
        for name, f in keys:
            us = statistics.median(samples[(name, f)])
            results.append({"case": f"tiles {label}", "bytes": n * k, "variant": name, "flush": f, "us": us,
                            "rounds": samples[(name, f)], "gbps": n * k / us / 1e3})
            print(f"  {name:36s} {f:5s} {us:8.2f} us {n * k / us / 1e3:6.0f} GB/s of B", flush=True)
        del a, b

    import dgx
    from gpu_gemm_utils import make_dense

    for (m, n, k), configs in gemm_variants().items():
        _, _, a_fp8, b_fp8, d = make_dense(m, n, k, seed=1)
        a_fp8 = (a_fp8[0], dgx.get_mn_major_tma_aligned_tensor(a_fp8[1]))
        outs, fns = [], {}
        for name, cfg in configs:
            d.fill_(float("nan"))
            dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)
            torch.cuda.synchronize()
            outs.append(d.clone())
            fns[name] = (lambda cfg=cfg, a_fp8=a_fp8, b_fp8=b_fp8, d=d: dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg))
        if any(not torch.equal(o.view(torch.int16), outs[0].view(torch.int16)) for o in outs):
            raise SystemExit(f"gemm {m}x{n}x{k}: the variants' outputs differ")
        samples = kernel_rounds(fns, flushes, ROUNDS)
        keys = list(samples)
        for name, f in keys:
            us = statistics.median(samples[(name, f)])
            results.append({"case": f"gemm {m}x{n}x{k}", "bytes": n * k, "variant": name, "flush": f, "us": us,
                            "rounds": samples[(name, f)], "gbps": n * k / us / 1e3})
            print(f"gemm {m}x{n}x{k} {name:24s} {f:5s} {us:8.2f} us {n * k / us / 1e3:6.0f} GB/s of B", flush=True)
        del a_fp8, b_fp8, d, outs, fns

    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
