"""Device experiment: time variants of the kernel headers against each other in one process.

Each variant is a set of text replacements applied to the in-memory headers (the cache key covers the
headers, so every variant is its own kernel). Diagnostic variants compute wrong results on purpose and
are marked so; the others are checked before timing. Rounds alternate variants so drift hits all alike.

    python perf_variants.py [rounds]      (from tests/device/, with the repository on PYTHONPATH)
"""

import statistics
import subprocess
import sys
from pathlib import Path

import torch

import dgx
from dgx import ptx
from dgx import launch
from dgx.heuristics import choose_dense, max_stages
from dgx.kernels.fp8_gemm import GemmConfig
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # tests/: gpu_gemm_utils
from gpu_gemm_utils import bench_cold_l2, check_dense, make_dense

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
BASE = ptx.headers()


def from_git(rev: str, name: str) -> bytes:
    """A header as of an older commit: from git, or from <repository>/.dev/<stem>_<rev>.cuh where git is absent."""
    saved = Path(__file__).resolve().parents[2] / ".dev" / f"{Path(name).stem}_{rev}.cuh"
    if saved.exists():
        return saved.read_bytes()
    return subprocess.run(["git", "show", f"{rev}:ptx/{name}"], check=True, capture_output=True).stdout


def patched(replacements: dict[str, list[tuple[str, str]]]) -> dict[str, bytes]:
    out = dict(BASE)
    for name, pairs in replacements.items():
        text = out[name].decode()
        for old, new in pairs:
            if old not in text:
                raise SystemExit(f"variant patch not found in {name}: {old!r}")
            text = text.replace(old, new)
        out[name] = text.encode()
    return out


# name -> (headers, diagnostic?)
VARIANTS: dict[str, tuple[dict[str, bytes], bool]] = {
    "current": (BASE, False),
    "noscale": (patched({"fp8_gemm.cuh": [
        ("sa[mm][h] = ld_shared_f32(sfa_base + s * T::kSmemSfa + sfa_offset[mm][h]);", "sa[mm][h] = 1.0f;"),
        ("const float lo = ld_global_nc(sfb0 + kb);\n            return SfbPair{lo, T::kSingleSfb ? lo : ld_global_nc(sfb1 + kb)};",
         "return SfbPair{1.0f, 1.0f};"),
    ]}), True),
    # No FFMA promotion: the accumulators of the last k-block are the result (wrong on purpose).
    "nopromo": (patched({"fp8_gemm.cuh": [
        (f"result[mm][i * 4 + {j}] = fmaf(accum[mm][i * 4 + {j}], {v}, result[mm][i * 4 + {j}]);",
         f"result[mm][i * 4 + {j}] = accum[mm][i * 4 + {j}];") for j, v in ((0, "lo"), (1, "lo"), (2, "hi"), (3, "hi"))
    ]}), True),
}
for name in sys.argv[2:]:  # extra variants: header copies saved as <repository>/.dev/fp8_gemm_<name>.cuh
    VARIANTS[name] = ({**BASE, "fp8_gemm.cuh": from_git(name, "fp8_gemm.cuh")}, False)

bench = bench_cold_l2


def use(headers):
    ptx.headers = lambda: headers
    launch._plans.clear()
    launch._params.clear()


PAIRS = (0,)
SHAPES = [(64, 2112, 7168), (128, 7168, 16384), (4096, 4096, 7168), (4096, 7168, 16384)]
results = {}
for (m, n, k) in SHAPES:
    a, b, a_fp8, b_fp8, d = make_dense(m, n, k)
    cfgs = [choose_dense(m, n, k, dgx.get_num_sms()).config]
    if m == 4096:
        cfgs += [GemmConfig(n, k, 128, 128, max_stages(128, 128), pair=p) for p in PAIRS]
    for cfg in dict.fromkeys(cfgs):
        for name, (headers, diag) in VARIANTS.items():
            use(headers)
            d.fill_(float("nan"))
            dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg)
            torch.cuda.synchronize()
            if not diag:
                check_dense(d, a, b, a_fp8, b_fp8)
        for r in range(ROUNDS):
            for name, (headers, diag) in VARIANTS.items():
                use(headers)
                t = bench(lambda: dgx.fp8_gemm_nt(a_fp8, b_fp8, d, config=cfg))
                tag = f"{cfg.block_m}x{cfg.block_n}s{cfg.stages}p{cfg.pair}"
                results.setdefault((m, n, k, tag, name), []).append(t)
                print(f"  {m} {n} {k} {tag} {name} round {r}: {t:.1f} us", flush=True)
    del a, b, a_fp8, b_fp8, d
use(BASE)

print(f"{'M':>5} {'N':>6} {'K':>6} {'cfg':>12} {'variant':>10} {'us (runs)':>28} {'TFLOPS':>7}")
for (m, n, k, cfg, name), ts in results.items():
    med = statistics.median(ts)
    print(f"{m:>5} {n:>6} {k:>6} {cfg:>12} {name:>10} {' '.join(f'{t:.1f}' for t in ts):>28} {2 * m * n * k / med / 1e6:>7.0f}"
          + ("  (diagnostic)" if VARIANTS[name][1] else ""))
