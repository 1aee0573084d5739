"""Device script: the paged decode kernel eager and under CUDA-graph replay on one decode shape, each call
synchronised and checked against the first (for memcheck runs)."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import dgx  # noqa: E402
from dgx.kernels.mqa_logits import MqaLogitsConfig  # noqa: E402
from mqa_utils import make_paged  # noqa: E402

batch, avg, next_n = (int(x) for x in (sys.argv[1:4] if len(sys.argv) > 3 else (64, 8192, 1)))
wgs = int(os.environ.get("MATH_WGS", "3"))
cfg = MqaLogitsConfig(64, 128, next_n, 15 if wgs == 3 else 16, True, math_wgs=wgs)
q, cache, w, ctx, table, _, _ = make_paged(batch, next_n, [avg] * batch, spare_blocks=0)
sched = dgx.get_paged_mqa_logits_metadata(ctx, 64, dgx.get_num_sms())
out = torch.empty(batch * next_n, avg, device="cuda")
dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, avg, out=out, config=cfg)
torch.cuda.synchronize()
first = out.clone()
print("eager ok", flush=True)
stream = torch.cuda.Stream()
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph, stream=stream):
    dgx.fp8_paged_mqa_logits(q, cache, w, ctx, table, sched, avg, out=out, config=cfg)
for i in range(3):
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    print("replay", i, "equal" if torch.equal(out, first) else "DIFFERENT", flush=True)
