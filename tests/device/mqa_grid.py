"""Device script: MQA prefill on the causal anchors with the grid sized to 132 and to 128 CTAs (128: 2048 query
blocks make 16 zig-zag rounds, 8 whole pairs), graphed, alternating rounds."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import dgx  # noqa: E402
from gpu_gemm_utils import bench_cold_l2, round_order  # noqa: E402
from mqa_utils import make_prefill, windows  # noqa: E402


def graphed(fn):
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
        fn()
    return graph.replay


for skv in (8192, 65536):
    s = 4096
    q, kv, sc, w = make_prefill(s, skv)
    ks, ke = windows("causal", s, skv)
    flops = 2 * 64 * 128 * (ke.long() - ks.long()).sum().item()
    out = torch.empty(s, skv, device="cuda")
    calls = {}
    for sms in (132, 128, 120):
        dgx.set_num_sms(sms)
        calls[sms] = graphed(lambda: dgx.fp8_mqa_logits(q, (kv, sc), w, ks, ke, out=out))
    res = {k: [] for k in calls}
    names = list(calls)
    for r in range(3):
        for i in round_order(len(names), r):
            res[names[i]].append(bench_cold_l2(calls[names[i]], reps=10))
    for k in names:
        t = min(res[k])
        print(f"S_kv={skv} grid {k}: {t:.1f} us {flops / t / 1e6:.1f} TFLOPS rounds {['%.1f' % x for x in res[k]]}", flush=True)
