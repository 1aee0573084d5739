"""The instruction mix of a kernel's hottest MMA loop, read from its SASS (CPU only).

Given a cubin and a kernel name (or a unique part of it), disassembles that kernel, builds its basic blocks and
finds its natural loops (a branch to a block that dominates it), and picks the smallest loop that contains an
instruction matching --contains (default: QGMMA/HGMMA, the math warpgroups' k-loop; UTMALDG finds the
producer's). The blocks counted are the loop's from its header to its last back edge: barrier retries the
compiler placed out of line after the function's exit are left out. It prints the loop's static instruction count by category, per k-block (the loop's
QGMMA count divided by --mma-per-kblock, 4 for one m64 slice per warpgroup: four k32 MMAs per 128 of K), and
optionally the full opcode histogram and the listing. Static counts: code inside the loop that a branch skips
(a rare path) is counted; spin loops nested inside are counted once and can be excluded with --no-nested.

    python tests/device/sass_kloop.py kernel.cubin dgx_fp8_gemm_nt_wgrad_n2112 [--opcodes] [--list]
    python tests/device/sass_kloop.py kernel.cubin fp8_wgrad_gemm_kernel --contains UTMALDG

Kernels from a dgx config: `--config "GemmConfig(2112, 4096, 128, 104, 5, wgrad=True, defer=True)"` (or a
`Bf16GemmConfig(...)`) compiles it first (NVRTC, no SASS pass) instead of reading a cubin.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*(?:/\*.*)?$")
_LABEL = re.compile(r"^\s*(\.L_x_\d+|\.L_\w+):")
_FUNC = re.compile(r"^\s*\.text\.(\S+):|^\s*\.section\s+\.text\.([^\s,]+)")
_TARGET = re.compile(r"`\((\.L_[\w]+)\)")

# Categories, first match wins (matched against the opcode without its predicate).
CATEGORIES = [
    ("MMA (QGMMA/HGMMA)", re.compile(r"^(QGMMA|HGMMA|IGMMA|BGMMA)\b")),
    ("WARPGROUP arrive/wait", re.compile(r"^WARPGROUP\b")),
    ("FFMA", re.compile(r"^FFMA\b")),
    ("FMUL", re.compile(r"^FMUL\b")),
    ("FADD", re.compile(r"^FADD\b")),
    ("LDS", re.compile(r"^LDS\b|^LDSM\b")),
    ("LDG", re.compile(r"^LDG\b|^LD\b")),
    ("STS/STG", re.compile(r"^(STS|STG|ST|STSM|STL)\b")),
    ("SYNCS (mbarrier)", re.compile(r"^SYNCS\b")),
    ("BAR/MEMBAR/fences", re.compile(r"^(BAR|MEMBAR|FENCE|ERRBAR|CCTL|DEPBAR|WARPSYNC|UCGABAR\w*|CGAERRBAR)\b")),
    ("TMA (UTMA*/UBLKCP)", re.compile(r"^(UTMA\w*|UBLKCP|UBLKRED)\b")),
    ("R2UR", re.compile(r"^R2UR\b")),
    ("uniform datapath (U*)", re.compile(r"^U[A-Z0-9]+\b")),
    ("branch", re.compile(r"^(BRA|BRX|JMP|CALL|RET|EXIT|BSSY|BSYNC|YIELD|NANOSLEEP)\b")),
    ("integer/address (IADD3, IMAD, LEA, LOP3, SHF, ISETP, SEL, MOV...)",
     re.compile(r"^(IADD3|IMAD|LEA|LOP3|SHF|ISETP|SEL|MOV|IABS|IMNMX|PRMT|FLO|POPC|SGXT|BMSK|PLOP3|P2R|R2P|"
                r"S2R|S2UR|CS2R|VIADD|VIMNMX|IMAD\w*|ELECT|SHFL|VOTE|VOTEU)\b")),
]


@dataclass
class Instr:
    addr: int
    text: str
    pred: str
    opcode: str
    target: str | None = None


@dataclass
class Kernel:
    name: str
    instrs: list[Instr] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)  # label -> address of the next instruction


def _nvdisasm() -> str:
    from dgx import sass_tools
    path = sass_tools.nvdisasm_path()
    if path is None:
        raise SystemExit("nvdisasm not found: install the [test] or [inspect] extra (nvidia-cuda-nvdisasm)")
    return path


def parse(sass: str) -> dict[str, Kernel]:
    """Kernels of an nvdisasm --print-code listing, by (mangled) name."""
    kernels: dict[str, Kernel] = {}
    cur: Kernel | None = None
    pending: list[str] = []
    for line in sass.splitlines():
        f = _FUNC.match(line)
        if f:
            name = f.group(1) or f.group(2)
            cur = kernels.setdefault(name, Kernel(name))
            pending = []
            continue
        if cur is None:
            continue
        lab = _LABEL.match(line)
        if lab:
            pending.append(lab.group(1))
            continue
        m = _INSTR.match(line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        text = m.group(2).strip().rstrip(";").strip()
        pred = ""
        body = text
        if body.startswith("@"):
            pred, _, body = body.partition(" ")
            body = body.strip()
        opcode = body.split(" ", 1)[0]
        t = _TARGET.search(body)
        ins = Instr(addr, text, pred, opcode, t.group(1) if t and opcode.startswith("BRA") else None)
        for p in pending:
            cur.labels[p] = addr
        pending = []
        cur.instrs.append(ins)
    return kernels


def find_kernel(kernels: dict[str, Kernel], name: str) -> Kernel:
    if name in kernels:
        return kernels[name]
    hits = [k for k in kernels if name in k]
    if len(hits) != 1:
        raise SystemExit(f"kernel {name!r}: {'no match' if not hits else 'ambiguous: ' + ', '.join(hits)}; "
                         f"kernels: {', '.join(kernels)}")
    return kernels[hits[0]]


def _is_branch(ins: Instr) -> bool:
    return ins.opcode.split(".")[0] in ("BRA", "EXIT", "RET", "BRX", "JMP", "JMX")


def _conditional(ins: Instr) -> bool:
    return bool(ins.pred) and ins.pred not in ("@PT",)


def blocks(k: Kernel) -> tuple[list[tuple[int, int]], dict[int, list[int]]]:
    """Basic blocks as (first, last) instruction indices, and each block's successors."""
    index = {ins.addr: i for i, ins in enumerate(k.instrs)}
    leaders = {0}
    for i, ins in enumerate(k.instrs):
        if ins.target and ins.target in k.labels and k.labels[ins.target] in index:
            leaders.add(index[k.labels[ins.target]])
        if _is_branch(ins) and i + 1 < len(k.instrs):
            leaders.add(i + 1)
    starts = sorted(leaders)
    spans = [(a, (starts[j + 1] - 1) if j + 1 < len(starts) else len(k.instrs) - 1) for j, a in enumerate(starts)]
    block_of = {a: j for j, (a, _) in enumerate(spans)}
    succ: dict[int, list[int]] = {}
    for j, (a, b) in enumerate(spans):
        last = k.instrs[b]
        out = []
        if last.target and last.target in k.labels and k.labels[last.target] in index:
            out.append(block_of[index[k.labels[last.target]]])
        falls = not _is_branch(last) or _conditional(last) or last.opcode.startswith("CALL")
        if falls and j + 1 < len(spans):
            out.append(j + 1)
        succ[j] = out
    return spans, succ


def natural_loops(k: Kernel) -> list[tuple[int, set[int], set[int]]]:
    """(header block, body blocks, latch blocks) of every natural loop: the blocks of all back edges u -> h (h
    dominates u) into one header h, and the blocks u."""
    spans, succ = blocks(k)
    n = len(spans)
    pred: dict[int, list[int]] = {j: [] for j in range(n)}
    for u, vs in succ.items():
        for v in vs:
            pred[v].append(u)
    # Iterative dominators over the blocks reachable from the entry.
    reach, stack = {0}, [0]
    while stack:
        for v in succ[stack.pop()]:
            if v not in reach:
                reach.add(v)
                stack.append(v)
    dom = {j: set(reach) for j in reach}
    dom[0] = {0}
    changed = True
    while changed:
        changed = False
        for j in sorted(reach):
            if j == 0:
                continue
            ps = [dom[p] for p in pred[j] if p in reach]
            new = set.intersection(*ps) | {j} if ps else {j}
            if new != dom[j]:
                dom[j], changed = new, True
    loops_: dict[int, set[int]] = {}
    latches: dict[int, set[int]] = {}
    for u in reach:
        for h in succ[u]:
            if h in dom[u]:  # back edge u -> h
                body, work = {h, u}, [u]
                while work:
                    x = work.pop()
                    if x == h:
                        continue
                    for p in pred[x]:
                        if p in reach and p not in body:
                            body.add(p)
                            work.append(p)
                loops_.setdefault(h, set()).update(body)
                latches.setdefault(h, set()).add(u)
    return [(h, body, latches[h]) for h, body in sorted(loops_.items())]


def hottest_loop(k: Kernel, contains: re.Pattern) -> tuple[int, set[int], set[int], list[tuple[int, int]]]:
    """The smallest natural loop with an instruction matching `contains`: (header, body blocks, latch blocks, all
    blocks)."""
    spans, _ = blocks(k)
    size = lambda body: sum(spans[j][1] - spans[j][0] + 1 for j in body)
    cands = []
    for h, body, latch in natural_loops(k):
        if any(contains.search(k.instrs[i].opcode) for j in body for i in range(spans[j][0], spans[j][1] + 1)):
            cands.append((size(body), h, body, latch))
    if not cands:
        raise SystemExit(f"{k.name}: no loop contains an instruction matching {contains.pattern!r}")
    _, h, body, latch = min(cands, key=lambda c: c[0])
    return h, body, latch, spans


def category(opcode: str) -> str:
    for name, rx in CATEGORIES:
        if rx.search(opcode):
            return name
    return "other"


def report(k: Kernel, header: int, body: set[int], latch: set[int], spans: list[tuple[int, int]],
           mma_per_kblock: int, no_nested: bool, opcodes: bool, listing: bool, out=sys.stdout) -> dict:
    """Counts over the loop's blocks from its header to its last back edge. Blocks of the loop placed elsewhere
    (out-of-line barrier retries) are left out; with `no_nested`, so are the blocks of loops nested inside."""
    lo = spans[header][0]
    hi = max(spans[j][1] for j in latch)
    inline = {j for j in body if lo <= spans[j][0] <= hi}
    nested = [(h, b) for h, b, _ in natural_loops(k) if h in body and h != header and b <= body]
    skip = set().union(*(b for _, b in nested)) if no_nested and nested else set()
    chosen = sorted(j for j in inline if j not in skip)
    instrs = [k.instrs[i] for j in chosen for i in range(spans[j][0], spans[j][1] + 1)]
    outline = sum(spans[j][1] - spans[j][0] + 1 for j in body - inline)
    mma = sum(1 for x in instrs if category(x.opcode).startswith("MMA"))
    kblocks = mma / mma_per_kblock if mma else 0
    cats = collections.Counter(category(x.opcode) for x in instrs)
    print(f"kernel {k.name}", file=out)
    print(f"loop 0x{k.instrs[lo].addr:04x}..0x{k.instrs[hi].addr:04x}: {len(instrs)} instructions"
          f"{' (nested loops left out)' if no_nested else ''}, {mma} MMA -> {kblocks:g} k-blocks"
          f" ({mma_per_kblock} MMA per k-block); {len(nested)} nested loops; {outline} instructions of the loop"
          f" placed out of line (not counted)", file=out)
    per = (lambda n: f"{n / kblocks:7.1f}") if kblocks else (lambda n: "      -")
    print(f"  {'category':62s} {'total':>6s} {'per k-block':>11s}", file=out)
    for name, _ in CATEGORIES + [("other", None)]:
        if cats.get(name):
            print(f"  {name:62s} {cats[name]:6d} {per(cats[name])}", file=out)
    print(f"  {'all':62s} {len(instrs):6d} {per(len(instrs))}", file=out)
    if opcodes:
        ops = collections.Counter(x.opcode for x in instrs)
        print("  opcodes:", file=out)
        for op, n in ops.most_common():
            print(f"    {op:44s} {n:5d} {per(n)}", file=out)
    if listing:
        for x in instrs:
            print(f"    /*{x.addr:04x}*/ {x.text}", file=out)
    return {"instructions": len(instrs), "mma": mma, "kblocks": kblocks, "categories": dict(cats)}


def compile_config(expr: str) -> tuple[bytes, str]:
    from dgx import jit
    from dgx.kernels import bf16_gemm, fp8_gemm

    names = {n: getattr(m, n) for m in (bf16_gemm, fp8_gemm) for n in dir(m) if not n.startswith("_")}
    config = eval(expr, names)
    src = config.render()
    cubin, _ = jit.build_cubin(src, "sm_90a", jit.SassPassSettings(False))
    return cubin, src.name


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cubin", nargs="?", help="a cubin file (omit with --config)")
    ap.add_argument("kernel", nargs="?", default="", help="kernel name or a unique part of it")
    ap.add_argument("--config", help="a dgx GemmConfig(...) or Bf16GemmConfig(...) expression to compile instead of "
                    "reading a cubin")
    ap.add_argument("--contains", default=r"^(QGMMA|HGMMA)", help="regex on opcodes the loop must contain")
    ap.add_argument("--mma-per-kblock", type=int, default=4, help="MMA instructions per k-block (256-row: 8)")
    ap.add_argument("--no-nested", action="store_true", help="leave out loops nested in the chosen one")
    ap.add_argument("--opcodes", action="store_true", help="print the full opcode histogram")
    ap.add_argument("--list", action="store_true", help="print the loop's instructions")
    args = ap.parse_args(argv)

    if args.config:
        cubin, name = compile_config(args.config)
        args.kernel = args.kernel or name
        tmp = tempfile.NamedTemporaryFile(suffix=".cubin", delete=False)
        tmp.write(cubin)
        tmp.close()
        path = tmp.name
    elif args.cubin:
        path = args.cubin
    else:
        ap.error("give a cubin or --config")
    sass = subprocess.run([_nvdisasm(), "--print-code", path], capture_output=True, text=True, check=True).stdout
    k = find_kernel(parse(sass), args.kernel)
    header, body, latch, spans = hottest_loop(k, re.compile(args.contains))
    report(k, header, body, latch, spans, args.mma_per_kblock, args.no_nested, args.opcodes, args.list)
    return 0


if __name__ == "__main__":
    sys.exit(main())
