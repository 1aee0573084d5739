"""CPU only: the BF16 heuristic's choices with its decode terms (dgx.kernels.bf16_gemm_heuristics: the re-streamed B
of 64-row tiles at 64 < M <= 128 and the pairs' lockstep cost) against the same model without them, which is the model
before the decode recalibration. Prints every change as runs of M (``M=65..128 NxK: old -> new``) and how many
(kind, form, N, K, M) changed at M <= 64, 64 < M <= 128 and M > 128.

Problems: dense in each form of ``--forms`` on the (N, K) of the dense anchor shapes and of the presets' BF16 layers
(dgx.bench.bf16_suites), masked on the masked suite's (groups, N, K); M in ``--ms`` (default 1..256, 512, 1024, 4096,
8192; masked: rows per group).

Run from the repository root with it on PYTHONPATH:
    python tests/device/bf16_choice_diff.py [--forms nt,nn,tn,tt] [--kinds dense,masked] [--ms 1-256,512] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dgx.bench.bf16_suites import DENSE, FORM_MAJORS, MASKED, PRESET_BF16_NK  # noqa: E402
from dgx.kernels import bf16_gemm_heuristics as model  # noqa: E402

DEFAULT_MS = "1-256,512,1024,4096,8192"
KINDS = ("dense", "masked")


@contextmanager
def decode_terms_off():
    """The model without its decode terms (both at 0), its choice cache cleared on the way in and out."""
    saved = model.RESTREAMED_B_HBM_SHARE, model.PAIR_FIXED_CLK
    model.RESTREAMED_B_HBM_SHARE, model.PAIR_FIXED_CLK = 0.0, 0
    model._choose.cache_clear()
    try:
        yield
    finally:
        model.RESTREAMED_B_HBM_SHARE, model.PAIR_FIXED_CLK = saved
        model._choose.cache_clear()


def parse_ms(text: str) -> list[int]:
    """"1-256,512" -> [1, ..., 256, 512] (sorted, distinct); ValueError naming a bad item."""
    out: set[int] = set()
    for item in (x for x in text.split(",") if x):
        lo, _, hi = item.partition("-")
        try:
            first, last = int(lo), int(hi or lo)
        except ValueError:
            raise ValueError(f"--ms: expected N or N-M items, comma-separated; got {item!r}") from None
        if first < 1 or last < first:
            raise ValueError(f"--ms: expected 1 <= N <= M in {item!r}")
        out.update(range(first, last + 1))
    if not out:
        raise ValueError("--ms: expected at least one M")
    return sorted(out)


def problems(forms, kinds) -> list[tuple[str, str, int, int, int]]:
    """(kind, form, groups, N, K) of every problem, in a fixed order, each once."""
    out = []
    if "dense" in kinds:
        nks = list(dict.fromkeys([(n, k) for _, n, k in DENSE] + [(n, k) for n, k, _ in PRESET_BF16_NK]))
        out += [("dense", form, 1, n, k) for form in forms for n, k in nks]
    if "masked" in kinds:
        out += list(dict.fromkeys(("m_grouped_masked", "nt", g, n, k) for g, _, n, k in MASKED))
    return out


def label(c) -> str:
    return (f"{c.block_m}x{c.block_n} s{c.stages} p{c.pair}" + (f" ka{c.k_atoms}" if c.k_atoms > 1 else "")
            + (f" sk{c.split_k}" if c.split_k > 1 else "") + (" pp" if c.schedule == "pingpong" else ""))


def choices(probs, ms, num_sms: int) -> dict[tuple, str]:
    out = {}
    for kind, form, groups, n, k in probs:
        major_a, major_b = FORM_MAJORS[form]
        for m in ms:
            c = model.choose(kind, m, n, k, groups, num_sms, major_a=major_a, major_b=major_b, pingpong=False)
            out[kind, form, groups, n, k, m] = label(c)
    return out


def diff(before: dict, after: dict) -> list[dict]:
    """Runs of consecutive M (in the order asked) over which one problem's choice changed the same way."""
    runs: list[dict] = []
    last_m: dict[tuple, int] = {}
    for key, old in before.items():
        *problem, m = key
        new = after[key]
        problem = tuple(problem)
        if old != new:
            run = runs[-1] if runs else None
            if run and run["problem"] == problem and (run["old"], run["new"]) == (old, new) and \
                    last_m.get(problem) == run["m_last"]:
                run["m_last"] = m
            else:
                runs.append({"problem": problem, "m_first": m, "m_last": m, "old": old, "new": new})
        last_m[problem] = m
    return runs


def band(m: int) -> str:
    return "M<=64" if m <= 64 else f"64<M<={model.DECODE_MAX_M}" if m <= model.DECODE_MAX_M else \
        f"M>{model.DECODE_MAX_M}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--forms", default="nt", help="dense forms, comma-separated: nt,nn,tn,tt")
    p.add_argument("--kinds", default="dense,masked", help=f"comma-separated: {', '.join(KINDS)}")
    p.add_argument("--ms", default=DEFAULT_MS, help=f"M values: N or N-M items (default {DEFAULT_MS})")
    p.add_argument("--num-sms", type=int, default=132)
    p.add_argument("--json", default=None, help="also write the changes as JSON here")
    args = p.parse_args()
    forms = [f for f in args.forms.split(",") if f]
    if not forms or any(f not in FORM_MAJORS for f in forms):
        p.error(f"--forms: expected some of {', '.join(FORM_MAJORS)}; got {args.forms!r}")
    kinds = [x for x in args.kinds.split(",") if x]
    if not kinds or any(x not in KINDS for x in kinds):
        p.error(f"--kinds: expected some of {', '.join(KINDS)}; got {args.kinds!r}")
    try:
        ms = parse_ms(args.ms)
    except ValueError as exc:
        p.error(str(exc))

    probs = problems(forms, kinds)
    with decode_terms_off():
        before = choices(probs, ms, args.num_sms)
    after = choices(probs, ms, args.num_sms)
    runs = diff(before, after)
    counts = {b: 0 for b in ("M<=64", f"64<M<={model.DECODE_MAX_M}", f"M>{model.DECODE_MAX_M}")}
    for key, old in before.items():
        if after[key] != old:
            counts[band(key[-1])] += 1
    for run in runs:
        kind, form, groups, n, k = run["problem"]
        what = f"{form} {n}x{k}" if kind == "dense" else f"masked {groups}g {n}x{k}"
        print(f"M={run['m_first']}..{run['m_last']} {what}: {run['old']} -> {run['new']}")
    print(f"{len(before)} choices over {len(probs)} problems; changed: "
          + ", ".join(f"{b} {c}" for b, c in counts.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"changed": counts, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
