"""Device script: the masked M-grouped kernel of this tree against cubins of the same configs built from an older
tree (same parameters), on the masked anchors: outputs compared bitwise, then timed in alternating rounds.

    python tests/device/masked_old_vs_new.py DIR     (DIR holds <kernel name>.cubin files of the older tree)
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

old_dir = sys.argv[1]
captured = {}
_launch = runtime.Launcher.launch


def capture(self, stream, params):
    captured["call"] = (self, stream, params)
    return _launch(self, stream, params)


runtime.Launcher.launch = capture
rounds = int(os.environ.get("ROUNDS", "4"))
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
        dgx.m_grouped_fp8_gemm_nt_masked(a, b, d, masked, expected)
        torch.cuda.synchronize()
        new, stream, pack = captured["call"]
        kernel = runtime.load_kernel(open(os.path.join(old_dir, new.kernel.name + ".cubin"), "rb").read(),
                                     new.kernel.name, 0, new.kernel.dynamic_smem)
        old = runtime.Launcher(kernel, new.shape)
        ref = d.clone()
        d.zero_()
        old.launch(stream, pack)
        torch.cuda.synchronize()
        same = torch.equal(d, ref)
        times = {"new": [], "old": []}
        impls = [("new", new), ("old", old)]
        for r in range(rounds):
            for i in round_order(2, r):
                name, launcher = impls[i]
                times[name].append(bench_cold_l2(lambda: _launch(launcher, stream, pack), reps=30))
        t_new, t_old = statistics.median(times["new"]), statistics.median(times["old"])
        print(f"masked {groups}g x {expected} N={n} K={k} {new.kernel.name}: bitwise {'equal' if same else 'DIFFERENT'}; "
              f"new {t_new:.1f} us, old {t_old:.1f} us, new/old {t_new / t_old:.3f} "
              f"(rounds new {['%.1f' % x for x in times['new']]}, old {['%.1f' % x for x in times['old']]})", flush=True)
