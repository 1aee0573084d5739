"""Device script: GEMM kernels of this tree against cubins of the same configs built from an older tree (same
parameters): outputs compared bitwise, then timed in alternating rounds. For source changes that alter SASS.

    python tests/device/old_vs_new.py masked DIR    the masked anchors (the heuristics' configs)
    python tests/device/old_vs_new.py dense DIR     dense shapes with the configs listed in DENSE below
DIR holds <kernel name>.cubin files built from the older tree.
"""

import os
import random
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import dgx  # noqa: E402
from dgx import runtime  # noqa: E402
from gpu_gemm_utils import bench_cold_l2, round_order  # noqa: E402

from dgx.kernels.fp8_gemm import GemmConfig  # noqa: E402

mode, old_dir = sys.argv[1], sys.argv[2]
# (M, N, K, config or None for the heuristic's)
DENSE = [(4096, 7168, 2048, None), (64, 7168, 2048, None), (64, 7168, 2048, GemmConfig(7168, 2048, 64, 56, 10, defer=True)),
         (4096, 7168, 4096, GemmConfig(7168, 4096, 256, 96, 3))]
captured = {}
_launch = runtime.Launcher.launch


def capture(self, stream, params):
    captured["call"] = (self, stream, params)
    return _launch(self, stream, params)


runtime.Launcher.launch = capture
rounds = int(os.environ.get("ROUNDS", "4"))


def compare(label: str, run, out) -> None:
    """Runs `run` (this tree's kernel, captured), then the older cubin with the same launch, and times both."""
    run()
    torch.cuda.synchronize()
    new, stream, pack = captured["call"]
    kernel = runtime.load_kernel(open(os.path.join(old_dir, new.kernel.name + ".cubin"), "rb").read(),
                                 new.kernel.name, 0, new.kernel.dynamic_smem)
    old = runtime.Launcher(kernel, new.shape)
    ref = out.clone()
    out.zero_()
    old.launch(stream, pack)
    torch.cuda.synchronize()
    same = torch.equal(out, ref)
    times = {"new": [], "old": []}
    impls = [("new", new), ("old", old)]
    for r in range(rounds):
        for i in round_order(2, r):
            name, launcher = impls[i]
            times[name].append(bench_cold_l2(lambda: _launch(launcher, stream, pack), reps=30))
    t_new, t_old = statistics.median(times["new"]), statistics.median(times["old"])
    print(f"{label} {new.kernel.name}: bitwise {'equal' if same else 'DIFFERENT'}; new {t_new:.1f} us, old {t_old:.1f} us, "
          f"new/old {t_new / t_old:.3f} (rounds new {['%.1f' % x for x in times['new']]}, "
          f"old {['%.1f' % x for x in times['old']]})", flush=True)


if mode == "dense":
    for m, n, k, cfg in DENSE:
        a = dgx.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
        b = dgx.per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
        d = torch.zeros(m, n, device="cuda", dtype=torch.bfloat16)
        compare(f"dense {m}x{n}x{k}", lambda: dgx.fp8_gemm_nt(a, b, d, config=cfg), d)
else:
    for groups, expected in ((1, 1024), (2, 512), (4, 256)):
        for n, k in ((4096, 7168), (7168, 2048)):
            rng = random.Random(groups * n)
            m_max = 4096
            a = dgx.per_token_cast_to_fp8(torch.randn(groups * m_max, k, device="cuda", dtype=torch.bfloat16))
            a = (a[0].view(groups, m_max, k), dgx.get_mn_major_tma_aligned_tensor(a[1].view(groups, m_max, -1).contiguous()))
            bs = [dgx.per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16)) for _ in range(groups)]
            b = (torch.stack([x[0] for x in bs]), torch.stack([x[1] for x in bs]))
            masked = torch.tensor([int(expected * rng.uniform(0.7, 1.3)) for _ in range(groups)], dtype=torch.int32,
                                  device="cuda")
            d = torch.zeros(groups, m_max, n, device="cuda", dtype=torch.bfloat16)
            compare(f"masked {groups}g x {expected} N={n} K={k}",
                    lambda: dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked, expected), d)
