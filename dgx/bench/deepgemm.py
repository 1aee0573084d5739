"""DeepGEMM itself as a peer: finding a real one, what it is, and its calls on the benchmark's problems.

:func:`find_deep_gemm` imports ``deep_gemm`` and accepts it only when it is DeepGEMM's own package: a module whose
file lies outside dgx (``DGX_AS_DEEP_GEMM=1`` makes ``import deep_gemm`` give dgx.deep_gemm, which must never be
timed against dgx). :func:`describe` says which version it is: ``__version__``, and the git commit where the
package exposes one (an installed distribution's local version ``+<commit>``, a git checkout around the package),
else the commit its release is known to be (:data:`RELEASE_COMMITS`), saying so.

:func:`prepare_deepgemm` calls DeepGEMM 2.6.1's API (sm_90) on a problem's tensors, converted once, outside the
timed call, where DeepGEMM takes another layout:

* per-row scales (SFA; SFB of the weight gradients) in DeepGEMM's TMA-aligned MN-major layout, made by DeepGEMM's
  own ``get_mn_major_tma_aligned_tensor`` (else the same layout made here), so its calls do not convert them;
* K-grouped: the scales as DeepGEMM's own test passes them, ``[Σk/128, M]`` contiguous seen as its transpose
  ``(M, Σk/128)`` with strides ``(1, M)``; ``ks`` on the host and as an int32 tensor; ``c`` is ``d``;
  ``recipe=(1, 1, 128)``;
* paged MQA: ``context_lens`` as DeepGEMM 2.6.1 takes them, ``[B, next_n]`` (query t of sequence b sees keys
  ``j < len_b - next_n + t + 1``: the same windows as dgx's ``[B]``), the schedule from DeepGEMM's own
  ``get_paged_mqa_logits_metadata`` on them, and the block table's unused slots (-1) as 0, as its test fills them.

Calls pass ``disable_ue8m0_cast=True`` (FP32 scales: sm_90 keeps them as they are), the weight gradients
``recipe=(1, 1, 128)``; the contiguous layout's row alignment is set to the 128 the benchmark builds. The MQA
calls allocate their logits (DeepGEMM's API has no ``out=``); torch's caching allocator makes that no GPU work.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Callable

from .mqa_problems import MqaProblem
from .mqa_suites import BLOCK_KV, MQA, PAGED_MQA
from .prepared import Prepared, Unavailable
from .problems import Problem

RELEASE_COMMITS = {"2.6.1": "54e2261"}
"""DeepGEMM releases and the git commit each was made at (for a package that does not say its own)."""

KERNEL_NAMES = {MQA: ("mqa_logits", "clean_logits"), PAGED_MQA: ("paged_mqa_logits",)}
"""Substrings of the kernels DeepGEMM's MQA calls launch on sm_90 (its own test's bench_kineto names): what the
kernel timer sums for one call."""

MK_ALIGNMENT = 128


@dataclasses.dataclass(frozen=True)
class DeepGemmInfo:
    """A real DeepGEMM found by :func:`find_deep_gemm`, or why there is none (``module`` None, ``reason``)."""

    module: Any = None
    reason: str = ""
    version: str | None = None
    commit: str | None = None
    commit_from: str = ""

    @property
    def found(self) -> bool:
        return self.module is not None

    def env(self) -> dict[str, Any]:
        """The run's metadata about DeepGEMM (flat keys, as the rest of the environment)."""
        if not self.found:
            return {"deep_gemm": f"not timed: {self.reason}"}
        return {"deep_gemm": self.version or "unknown version", "deep_gemm_commit": self.commit,
                "deep_gemm_commit_from": self.commit_from}


def _dgx_root() -> str:
    import dgx

    return os.path.dirname(os.path.abspath(dgx.__file__))


def is_dgx_module(module: Any) -> bool:
    """Whether `module` is dgx's (dgx.deep_gemm or any module whose file lies inside the dgx package)."""
    spec = getattr(module, "__spec__", None)
    if spec is not None and (spec.name == "dgx" or spec.name.startswith("dgx.")):
        return True
    path = getattr(module, "__file__", None)
    if not path:
        return False
    root = _dgx_root()
    return os.path.commonpath([os.path.abspath(path), root]) == root


def find_deep_gemm(importer: Callable[[str], Any] | None = None) -> DeepGemmInfo:
    """The real DeepGEMM importable here, described; or why there is none (not installed, fails to import, or
    ``import deep_gemm`` gives dgx's own alias)."""
    import importlib

    importer = importer or importlib.import_module
    try:
        module = importer("deep_gemm")
    except Exception as e:  # noqa: BLE001 - any failure means no peer, with the reason
        return DeepGemmInfo(reason=f"import deep_gemm failed: {type(e).__name__}: {_one_line(e)}")
    if is_dgx_module(module):
        return DeepGemmInfo(reason="import deep_gemm gives dgx's own deep_gemm (DGX_AS_DEEP_GEMM is set): dgx is "
                                   "never timed against itself; unset DGX_AS_DEEP_GEMM to time DeepGEMM")
    return describe(module)


def describe(module: Any) -> DeepGemmInfo:
    """Version and commit of a real DeepGEMM module."""
    version = getattr(module, "__version__", None)
    version = str(version) if version is not None else None
    commit, source = _commit_of(module, version)
    return DeepGemmInfo(module, "", version, commit, source)


_HEX = re.compile(r"^[0-9a-f]{7,40}$")


def _commit_of(module: Any, version: str | None) -> tuple[str | None, str]:
    for attr in ("__commit__", "__git_commit__", "git_commit"):
        value = getattr(module, attr, None)
        if isinstance(value, str) and _HEX.match(value):
            return value, f"the package's {attr}"
    local = _distribution_local_version(version)
    if local:
        return local, "the installed distribution's version"
    head = _git_head(getattr(module, "__file__", None))
    if head:
        return head, "the git checkout holding the package"
    public = (version or "").split("+")[0]
    if public in RELEASE_COMMITS:
        return RELEASE_COMMITS[public], f"the commit of release {public} (the package does not say its own)"
    return None, "unknown (the package does not say its commit)"


def _distribution_local_version(version: str | None) -> str | None:
    """The ``+<commit>`` of an installed deep_gemm distribution of this version, if it has one."""
    try:
        from importlib.metadata import version as dist_version

        full = dist_version("deep_gemm")
    except Exception:  # noqa: BLE001
        return None
    public, _, local = full.partition("+")
    if local and _HEX.match(local) and (version is None or version.split("+")[0] == public):
        return local
    return None


def _git_head(path: str | None) -> str | None:
    """The commit checked out in a git work tree holding `path` (read from .git, no git needed)."""
    if not path:
        return None
    d = os.path.dirname(os.path.abspath(path))
    for _ in range(4):
        d = os.path.dirname(d)
        git = os.path.join(d, ".git")
        if os.path.isfile(git):  # a worktree or submodule: "gitdir: <path>"
            try:
                with open(git, encoding="utf-8") as f:
                    line = f.read().strip()
            except OSError:
                return None
            if not line.startswith("gitdir:"):
                return None
            git = os.path.join(d, line[len("gitdir:"):].strip())
        if os.path.isdir(git):
            return _read_head(git)
    return None


def _read_head(git: str) -> str | None:
    try:
        with open(os.path.join(git, "HEAD"), encoding="utf-8") as f:
            head = f.read().strip()
        if head.startswith("ref:"):
            ref = head[4:].strip()
            ref_file = os.path.join(git, ref)
            if os.path.isfile(ref_file):
                with open(ref_file, encoding="utf-8") as f:
                    head = f.read().strip()
            else:
                with open(os.path.join(git, "packed-refs"), encoding="utf-8") as f:
                    head = next((ln.split()[0] for ln in f if ln.strip().endswith(" " + ref)), "")
    except OSError:
        return None
    return head[:12] if _HEX.match(head) else None


def _one_line(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------------------------------
# layouts


def tma_aligned_rows(rows: int) -> int:
    """Rows of FP32 scales padded to 16 bytes (DeepGEMM's get_tma_aligned_size for 4-byte elements)."""
    return (rows + 3) // 4 * 4


def mn_major_scales(dg, sf):
    """``sf [..., MN, KB]`` FP32 in DeepGEMM's TMA-aligned MN-major layout: strides ``(…, 1, aligned MN)``. DeepGEMM's
    own ``get_mn_major_tma_aligned_tensor`` where it has one, else the same layout made here."""
    convert = getattr(dg, "get_mn_major_tma_aligned_tensor", None)
    if convert is not None:
        return convert(sf)
    import torch

    batched = sf.unsqueeze(0) if sf.dim() == 2 else sf
    groups, mn, kb = batched.shape
    aligned = tma_aligned_rows(mn)
    out = torch.empty_strided((groups, mn, kb), (aligned * kb, 1, aligned), dtype=sf.dtype, device=sf.device)
    out.copy_(batched)
    return out[0] if sf.dim() == 2 else out


def k_grouped_scales(sf):
    """dgx's K-grouped scales ``[MN, Σk/128]`` as DeepGEMM's test passes them: ``[Σk/128, MN]`` contiguous, seen
    through its transpose ``(MN, Σk/128)`` with strides ``(1, MN)``."""
    return sf.t().contiguous().t()


def paged_context_lens(lens, next_n: int):
    """dgx's ``[B]`` context lengths as DeepGEMM 2.6.1's ``[B, next_n]`` (query t sees keys ``j < lens[b, t]``):
    ``len_b - next_n + t + 1``, the same windows."""
    import torch

    t = torch.arange(1, next_n + 1, dtype=torch.int32, device=lens.device)
    return (lens.to(torch.int32).unsqueeze(1) - next_n + t.unsqueeze(0)).contiguous()


# --------------------------------------------------------------------------------------------------
# calls


def _need(dg, *names: str):
    for name in names:
        fn = getattr(dg, name, None)
        if fn is not None:
            return fn
    raise Unavailable(f"deep_gemm has none of {', '.join(names)}")


def _mk_alignment(dg) -> str:
    """Sets DeepGEMM's contiguous-layout alignment to the benchmark's 128 rows (the default on sm_90)."""
    get = getattr(dg, "get_mk_alignment_for_contiguous_layout", None)
    if get is None or int(get()) == MK_ALIGNMENT:
        return ""
    setter = _need(dg, "set_mk_alignment_for_contiguous_layout")
    before = int(get())
    setter(MK_ALIGNMENT)
    return f"contiguous-layout alignment set from {before} to {MK_ALIGNMENT} rows"


def prepare_deepgemm(dg, problem: Problem | MqaProblem) -> Prepared:
    """DeepGEMM 2.6.1 on ``problem`` (the module docstring has the layouts and arguments)."""
    if isinstance(problem, MqaProblem):
        return prepare_deepgemm_mqa(dg, problem)
    t = problem.tensors
    s = problem.shape
    d = t["D"]

    def poison():
        d.fill_(float("nan"))

    if s.suite == "dense":
        f = _need(dg, "fp8_gemm_nt")
        a, b = (t["A"], mn_major_scales(dg, t["SFA"])), (t["B"], t["SFB"])
        return Prepared(lambda: f(a, b, d, disable_ue8m0_cast=True), lambda: problem.valid_rows(d), reset=poison,
                        note="fp8_gemm_nt(disable_ue8m0_cast=True), SFA MN-major TMA-aligned (converted once)")

    if s.suite == "wgrad":
        f = _need(dg, "fp8_gemm_nt")
        a = (t["A"], mn_major_scales(dg, t["SFA"]))
        b = (t["B"], mn_major_scales(dg, t["SFB"]))

        def reset():
            d.copy_(problem.c)

        return Prepared(lambda: f(a, b, d, c=d, recipe=(1, 1, 128), disable_ue8m0_cast=True),
                        lambda: problem.valid_rows(d), reset=reset, includes_c=True,
                        note="fp8_gemm_nt(c=d, recipe=(1, 1, 128)), scales MN-major TMA-aligned (converted once)")

    if s.suite == "contiguous":
        f = _need(dg, "m_grouped_fp8_gemm_nt_contiguous")
        how = _mk_alignment(dg)
        a, b, mi = (t["A"], mn_major_scales(dg, t["SFA"])), (t["B"], t["SFB"]), t["m_indices"]
        note = "m_grouped_fp8_gemm_nt_contiguous(m_indices, disable_ue8m0_cast=True)" + (f"; {how}" if how else "")
        return Prepared(lambda: f(a, b, d, mi, disable_ue8m0_cast=True), lambda: problem.valid_rows(d),
                        reset=poison, note=note)

    if s.suite == "masked":
        f = _need(dg, "m_grouped_fp8_gemm_nt_masked")
        a, b, mm, expected = (t["A"], mn_major_scales(dg, t["SFA"])), (t["B"], t["SFB"]), t["masked_m"], s.m
        return Prepared(lambda: f(a, b, d, mm, expected, disable_ue8m0_cast=True), lambda: problem.valid_rows(d),
                        reset=poison,
                        note=f"m_grouped_fp8_gemm_nt_masked(expected_m={expected}, as dgx), SFA MN-major (converted once)")

    if s.suite == "k_grouped":
        f = _need(dg, "k_grouped_fp8_gemm_nt_contiguous")
        how = _mk_alignment(dg)
        ks, layout = list(t["ks"]), t["ks_tensor"]
        a = (t["A"], k_grouped_scales(t["SFA"]))
        b = (t["B"], k_grouped_scales(t["SFB"]))

        def reset():
            d.copy_(problem.c)

        note = ("k_grouped_fp8_gemm_nt_contiguous(ks, ks tensor, c=d, recipe=(1, 1, 128)), scales [Σk/128, M] "
                "as its own test passes them (converted once)") + (f"; {how}" if how else "")
        return Prepared(lambda: f(a, b, d, ks, layout, c=d, recipe=(1, 1, 128)), lambda: problem.valid_rows(d),
                        reset=reset, includes_c=True, note=note)

    raise Unavailable(f"no DeepGEMM adapter for suite {s.suite!r}")


def prepare_deepgemm_mqa(dg, problem: MqaProblem) -> Prepared:
    """DeepGEMM's MQA logits on ``problem``: ``fp8_fp4_mqa_logits`` / ``fp8_fp4_paged_mqa_logits`` (FP8 Q: no Q
    scales), FP32 logits; prefill with ``clean_logits=True``, decode with ``clean_logits=False``, as dgx."""
    import torch

    t = problem.tensors
    s = problem.shape
    rows = problem.row_index()
    out: list = [None]

    def output():
        return out[0].index_select(0, rows)

    if s.suite == MQA:
        q, kv, w, ks, ke = t["q"], (t["kv"], t["kv_scales"]), t["weights"], t["ks"], t["ke"]
        new = getattr(dg, "fp8_fp4_mqa_logits", None)
        if new is not None:
            def run():
                out[0] = new((q, None), kv, w, ks, ke, clean_logits=True, max_seqlen_k=0, logits_dtype=torch.float32)

            note = "fp8_fp4_mqa_logits((q, None), clean_logits=True, FP32 logits)"
        else:
            legacy = _need(dg, "fp8_mqa_logits")

            def run():
                out[0] = legacy(q, kv, w, ks, ke, clean_logits=True)

            note = "fp8_mqa_logits(clean_logits=True)"
        return Prepared(run, output, note=note)

    if s.suite == PAGED_MQA:
        meta = _need(dg, "get_paged_mqa_logits_metadata")
        num_sms = int(_need(dg, "get_num_sms")())
        q, cache, w, table = t["q"], t["kv_cache"], t["weights"], t["block_table"].clamp(min=0)
        lens = paged_context_lens(t["context_lens"], s.next_n)
        schedule = meta(lens, BLOCK_KV, num_sms)
        width = s.max_context_len
        new = getattr(dg, "fp8_fp4_paged_mqa_logits", None)
        if new is not None:
            def run():
                out[0] = new((q, None), cache, w, lens, table, schedule, width, clean_logits=False,
                             logits_dtype=torch.float32)

            call = "fp8_fp4_paged_mqa_logits((q, None), clean_logits=False, FP32 logits)"
        else:
            legacy = _need(dg, "fp8_paged_mqa_logits")

            def run():
                out[0] = legacy(q, cache, w, lens, table, schedule, width, clean_logits=False)

            call = "fp8_paged_mqa_logits(clean_logits=False)"
        lens_rows = lens.reshape(-1).index_select(0, rows.to(lens.device)).unsqueeze(1)

        def paged_output():
            # clean_logits=False leaves positions past a query's window to the caller, who masks them (DeepGEMM's own
            # test does the same): its sm_90 kernel writes finite values at the window's last positions of earlier
            # queries in a next_n group. Masked here, outside the timed call; every position inside is checked.
            got = out[0].index_select(0, rows)
            positions = torch.arange(got.shape[1], device=got.device).unsqueeze(0)
            return got.masked_fill(positions >= lens_rows.to(got.device), float("-inf"))

        note = (f"{call}; context_lens as [B, next_n], schedule from its get_paged_mqa_logits_metadata({num_sms} "
                "SMs), both made once outside the timed call; positions past each query's window masked before the "
                "check (clean_logits=False)")
        return Prepared(run, paged_output, note=note)

    raise Unavailable(f"no DeepGEMM adapter for suite {s.suite!r}")
