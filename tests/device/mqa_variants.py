"""Device script: MQA-logits variants (math warpgroups, N = queries x heads per wgmma) checked, then timed side
by side, graphed: prefill on the causal anchors and decode, order reversed every other round.
Usage: python tests/device/mqa_variants.py (VARIANTS=name,... and ROUNDS=n to narrow)"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import dgx  # noqa: E402
from dgx.kernels.mqa_logits import MqaLogitsConfig, _stages  # noqa: E402
from gpu_gemm_utils import bench_cold_l2, round_order  # noqa: E402
from mqa_utils import causal_anchor, compare, graphed, make_prefill, ref_prefill, windows  # noqa: E402

VARIANTS = {
    "w3-n128": MqaLogitsConfig(64, 128, 2, 15),
    "w2-n256": MqaLogitsConfig(64, 128, 4, 14, math_wgs=2),
    "w2-n128": MqaLogitsConfig(64, 128, 2, 16, math_wgs=2),
}
only = os.environ.get("VARIANTS")
if only:
    VARIANTS = {k: v for k, v in VARIANTS.items() if k in only.split(",")}

q, kv, sc, w = make_prefill(300, 3000, seed=4)
ks, ke = windows("random", 300, 3000, seed=4)
ref = ref_prefill(q, kv, sc, w, ks, ke)
for name, cfg in VARIANTS.items():
    compare(dgx.fp8_mqa_logits(q, (kv, sc), w, ks, ke, config=cfg), ref)
    print("correct:", name, flush=True)

rounds = int(os.environ.get("ROUNDS", "2"))
for skv in (8192, 65536):
    s = 4096
    q, kv, sc, w, ks, ke, out, flops = causal_anchor(s, skv)
    names = list(VARIANTS)
    res = {n: [] for n in names}
    for r in range(rounds):
        for i in round_order(len(names), r):
            cfg = VARIANTS[names[i]]
            call = graphed(lambda: dgx.fp8_mqa_logits(q, (kv, sc), w, ks, ke, out=out, config=cfg))
            res[names[i]].append(bench_cold_l2(call, reps=10))
    for n in names:
        t = min(res[n])
        print(f"S_kv={skv:6d} {n:16s} {t:9.1f} us {flops / t / 1e6:7.1f} TFLOPS  rounds {['%.1f' % x for x in res[n]]}", flush=True)

# Paged decode variants, graphed (serving replays decode in CUDA graphs), GB/s on the bytes that must move.
from mqa_utils import make_paged  # noqa: E402

PAGED = {
    "w3-s15": lambda n: MqaLogitsConfig(64, 128, n, 15, True),
    "w3-deep": lambda n: MqaLogitsConfig(64, 128, n, _stages(64 * n, 128, 3, most=32), True),
    "w2-s16": lambda n: MqaLogitsConfig(64, 128, n, 16, True, math_wgs=2),
    "w2-deep": lambda n: MqaLogitsConfig(64, 128, n, _stages(64 * n, 128, 2, most=32), True, math_wgs=2),
}
if os.environ.get("PAGED"):
    PAGED = {k: v for k, v in PAGED.items() if k in os.environ["PAGED"].split(",")}
for batch, avg, next_n in ((64, 8192, 1), (64, 8192, 2), (256, 8192, 1), (1024, 8192, 2), (64, 65536, 1)):
    q, cache, w, ctx, table, _, _ = make_paged(batch, next_n, [avg] * batch, spare_blocks=0)
    sched = dgx.get_paged_mqa_logits_metadata(ctx, 64, dgx.get_num_sms())
    out = torch.empty(batch * next_n, avg, device="cuda")
    moved = batch * avg * 132 + out.numel() * 4
    line, first = [], None
    for name, make in PAGED.items():
        cfg = make(next_n)
        call = graphed(lambda: dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, avg, out=out, config=cfg))
        if first is None:
            first = out.clone()
        elif not torch.equal(out, first):  # same function: every variant must give the same bits
            raise SystemExit(f"paged variant {name} differs from {next(iter(PAGED))}")
        t = bench_cold_l2(call, reps=10)
        line.append(f"{name} {t:7.1f} us {moved / t / 1e3:6.0f} GB/s")
    print(f"paged B={batch:5d} ctx={avg:6d} n={next_n}: " + " | ".join(line), flush=True)
