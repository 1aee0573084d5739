"""The per-call fast path of the GEMM entry points for torch tensors.

A call with torch tensors first looks for an :class:`Entry` made by an earlier call of the same structure: the
same tensor types, dtypes, devices, shapes and strides, and the same data pointers modulo 16 bytes (every check
of dgx depends on the tensors through these alone, and on nothing else: see below). An entry holds what the full
path built for that structure: the plan (the loaded kernel and its grid) and the kernel's parameters. When the
data pointers differ from the entry's last call (a fresh output from the allocator, a fresh slice of a token
buffer), the new addresses are written into the parameters in place; no tensor map is encoded again.

How a call finds its entry, cheaply:

- a hint key: the first tensor's rows (``shape[0]``: M changes between calls), the weight tensor's shape, the
  call's non-tensor arguments, the thread. Not the weight's identity: layers of one shape share an entry (their
  weights' addresses are relocated like any other), so the entries stay as few as the distinct problems, and a
  weight or gradient made afresh every step still finds its entry;
- the entry's *check*: torch's C++ tensor guard (``torch._C._dynamo.guards.TensorGuards``, the one
  ``torch.compile`` checks its inputs with) over all the call's tensors: exact Python type, dispatch keys (so the
  device type), dtype, device index, ``requires_grad``, sizes and strides. About 0.6 µs for five tensors, where
  reading those attributes in Python costs 2.5 µs or more. Where that guard is missing or does not behave as
  expected (a self-test with CPU tensors on first use), a Python check of the same attributes stands in;
- the data pointers (``data_ptr()``), compared with the last call's; on a change, their residues modulo 16 must
  equal those the entry was made with (else the full path runs), and the addresses are relocated.

The hint key is only a hint: an entry is used only when its check passes, so a call of another structure under
the same key, or a tensor changed in place (``.data =``, ``t_()``, ``resize_()``), reaches the full path and its
checks (which then make that call's entry the key's).

Relocation. When an entry is made, the kernel's parameters are packed three times: with the call's addresses, and
twice with every tensor's address moved by a distinct amount (multiples of 2 MB and of 8 GB, so that every residue
stays).
Each 64-bit word of the parameter struct that differs between the packings must have moved by exactly one
tensor's amount in both: it holds that tensor's address plus a constant (a raw pointer parameter, or the global
address of a tensor map, which the sm_90 driver's encode stores as a plain word: learnt from the driver itself
here, not assumed). Anything else (a driver that stores addresses otherwise) leaves the entry without
relocations: it then serves only calls with its own addresses, and other calls take the full path, as before
this module existed.

Scales the kernels cannot read as they are (a row-major SFA) are converted on every call, on the fast path too:
the entry launches the scale-layout kernel into dgx.scales' memory for the stream (allocated on the capturing
stream under CUDA-graph capture, and freed after the GEMM), then the GEMM with that address relocated in.

Entries are per thread (a launch reads parameters another thread could be rewriting otherwise) and their number
is bounded (:data:`CACHE_LIMIT` per entry point; the cache starts over when full). dgx.set_num_sms retires them
all (device.generation).
"""

from __future__ import annotations

import struct
import sys
from typing import Callable, Sequence

from . import device as device_module
from . import pdl as _pdl
from . import runtime
from . import scales as scales_module
from .kernels import scale_layout
from .kernels.fp8_gemm import INTERFACE
from .kernels.fp8_gemm_args import Operands, pack_operands
from .streams import resolve_stream

CACHE_LIMIT = 4096
_MASK = (1 << 64) - 1
# Tensor i moves by -(i + 1) << shift in the two probe packings: by 2 MB steps, and by 8 GB steps (up to 64 GB, so
# the address bits that differ between allocations of one process are moved too).
_PROBE_SHIFTS = (21, 33)


# --- the tensor check ---------------------------------------------------------------------------------

def _python_check(tensors: Sequence[object]) -> Callable[..., bool]:
    """A check of the tensors' type, dtype, device, shape and strides, in Python."""
    meta = tuple((type(t), t.dtype, t.device, t.shape, t.stride()) for t in tensors)
    count = len(meta)

    def check(*ts) -> bool:
        if len(ts) != count:
            return False
        for t, (kind, dtype, dev, shape, stride) in zip(ts, meta):
            if type(t) is not kind or t.dtype != dtype or t.device != dev or t.shape != shape or t.stride() != stride:
                return False
        return True

    return check


def _guard_check(tensors: Sequence[object]) -> Callable[..., bool]:
    from torch._C._dynamo.guards import TensorGuards

    return TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                        dynamic_dims_strides=[list(t.stride()) for t in tensors]).check


def _guard_works() -> bool:
    """Whether torch's tensor guard is there and tells apart what dgx's checks tell apart (CPU tensors)."""
    try:
        import torch

        class Sub(torch.Tensor):
            pass

        x = torch.zeros(4, 8)
        y = torch.zeros(4, 8, dtype=torch.int32)
        check = _guard_check((x, y))
        same = check(x[:, :8], y.view(4, 8)) and check(torch.zeros(4, 8), torch.ones(4, 8, dtype=torch.int32))
        differs = (
            check(x.t(), y), check(x[:2], y), check(x.double(), y), check(x, y.float()),
            check(torch.zeros(4, 16)[:, :8], y), check(torch.zeros(4, 8, device="meta"), y),
            check(x.unsqueeze(0), y), check(x.as_subclass(Sub), y), check(x, None), check(x.numpy(), y),
        )
        return bool(same) and not any(differs)
    except Exception:  # noqa: BLE001 - a torch without the guard, or with another signature
        return False


_check_factory: Callable[[Sequence[object]], Callable[..., bool]] | None = None


def make_check(tensors: Sequence[object]) -> Callable[..., bool]:
    """The check an entry for `tensors` uses (the C++ guard where it works, else the Python one)."""
    global _check_factory
    if _check_factory is None:
        _check_factory = _guard_check if _guard_works() else _python_check
    return _check_factory(tensors)


def torch_tensors(*objs) -> bool:
    """Whether every object is a torch tensor (nn.Parameter included; an entry's check then wants that type)."""
    torch = sys.modules.get("torch")
    return torch is not None and all(isinstance(o, torch.Tensor) for o in objs)


# --- entries ------------------------------------------------------------------------------------------

class _Conversion:
    """Per call of an entry with scales to convert: the scale-layout kernel's launch, with its own parameters."""

    __slots__ = ("source", "slot", "nbytes", "launcher", "pack", "words", "src_word", "dst_word")

    def __init__(self, source: int, made: scales_module.Conversion, device: int):
        self.source = source  # index of the scales among the call's tensors
        self.slot = made.slot
        self.nbytes = made.nbytes
        self.launcher = scale_layout.launcher(device, made.rows, made.cols, made.groups)
        self.pack = scale_layout.pack(0, 0, made.strides, made.rows, made.cols, made.dst_ld)
        self.words = self.pack.words()
        self.src_word, self.dst_word = scale_layout.SRC_OFFSET // 8, scale_layout.DST_OFFSET // 8


class Entry:
    """What the full path built for one structure of call; :meth:`run` launches it with new addresses."""

    __slots__ = ("check", "ptrs", "addresses", "relocate", "launcher", "pack", "words", "device", "generation",
                 "current_stream", "conversions", "launch_kernel", "function", "params")

    def run(self, ptrs: tuple[int, ...], stream) -> bool:
        """Launches with the tensors' data pointers `ptrs` (in the entry's order) on `stream` (None: torch's
        current stream); False, having launched nothing, when this entry cannot serve them."""
        if self.generation != device_module.generation:
            return False
        if ptrs != self.ptrs:
            # New addresses with the entry's residues (else the full path): written into the parameters now, or,
            # where scales are converted, with the converted copy's address in _run_converting.
            if self.relocate is None or not self.relocate(None if self.conversions else self.words, *ptrs):
                return False
            self.ptrs = ptrs
        s = self.current_stream(self.device) if stream is None else resolve_stream(stream, self.device)
        if self.conversions:
            self._run_converting(ptrs, s)
            return True
        # Launcher.launch, inlined: the launcher's own (immutable) config for the stream, from its table for the
        # programmatic-dependent-launch setting in force (dgx.pdl, read per call as Launcher.launch reads it).
        launcher = self.launcher
        config = (launcher._pdl_configs if _pdl._enabled else launcher._configs).get(s)
        if config is None:
            config = launcher.config_for(s)
        (err,) = self.launch_kernel(config, self.function, self.params, 0)
        if err != 0:
            runtime.check(err, f"cuLaunchKernelEx({launcher.kernel.name})")
        return True

    def _run_converting(self, ptrs: tuple[int, ...], s: int) -> None:
        captured = []
        try:
            addresses = ptrs
            for conv in self.conversions:
                address, owned = scales_module.buffer(self.device, s, conv.slot, conv.nbytes)
                if owned:
                    captured.append(address)
                conv.words[conv.src_word] = ptrs[conv.source]
                conv.words[conv.dst_word] = address
                conv.launcher.launch(s, conv.pack)
                addresses += (address,)
            if addresses != self.addresses:
                self.relocate(self.words, *addresses)
                self.addresses = addresses
            self.launcher.launch(s, self.pack)
        finally:
            for address in captured:
                runtime.free_async(address, s)


def _relocator(relocations: Sequence[tuple[int, int, int]], residues: Sequence[int], count: int) -> Callable:
    """A function ``(words, p0, p1, ...)`` of the `count` addresses: False if the first len(residues) of them do not
    have the `residues` modulo 16; else it writes every relocated word into ``words`` (unless None) and returns
    True. Made as straight-line code (one line per word, the addends inlined), the cheapest form of it in Python."""
    names = [f"p{i}" for i in range(count)]
    zero = [names[i] for i, r in enumerate(residues) if r == 0]
    tests = [f"({' | '.join(zero)}) & 15"] if zero else []
    tests += [f"{names[i]} & 15 != {r}" for i, r in enumerate(residues) if r]
    params = names[:len(residues)] + [f"{name}=0" for name in names[len(residues):]]  # converted scales' addresses
    lines = [f"def relocate(words, {', '.join(params)}):",
             f"    if {' or '.join(tests) or 'False'}:",
             "        return False",
             "    if words is None:",
             "        return True"]
    lines += [f"    words[{word}] = {names[index]}{addend:+d}" if addend else f"    words[{word}] = {names[index]}"
              for word, index, addend in relocations]
    lines.append("    return True")
    scope: dict = {}
    exec("\n".join(lines), scope)  # noqa: S102 - source built above from ints only
    return scope["relocate"]


def _image_words(pack: runtime.ParamPack) -> tuple[int, ...]:
    image = pack.image()
    return struct.unpack(f"<{len(image) // 8}Q", image)


_patchable = True  # False once the driver's tensor maps were found not to hold the address as a plain word


def _relocations(config, ops: Operands, sources: dict[str, int], ptrs: tuple[int, ...],
                 image: tuple[int, ...]) -> tuple[tuple[int, int, int], ...] | None:
    """(word, pointer index, addend) for every word of the parameters that is an address plus a constant, found
    by packing with moved addresses (see the module docstring); None if the parameters are not all so (and
    from then on without packing again: a driver's map layout is the same for every map)."""
    global _patchable
    if not _patchable:
        return None
    probes = []
    for shift in _PROBE_SHIFTS:
        # Each address moves down by its own amount, or up where it lies too low to move down (memory from the
        # driver's stream-ordered pool, where converted scales live, can sit a few GB into the address space).
        moves = {}
        for index in set(sources.values()):
            move = (index + 1) << shift
            moves[index] = move if ptrs[index] - move >= (1 << 20) else -move
        moved = ops._replace(**{field: getattr(ops, field) - moves[index] for field, index in sources.items()})
        try:
            words = _image_words(pack_operands(config, moved))
        except Exception:  # noqa: BLE001 - a driver that refuses an address it never sees used: no relocation
            return None
        probes.append((moves, words))
    relocations = []
    (moves1, words1), (moves2, words2) = probes
    if len(words1) != len(image) or len(words2) != len(image):
        return None
    for word, (w0, w1, w2) in enumerate(zip(image, words1, words2)):
        if w0 == w1 == w2:
            continue
        d1, d2 = (w0 - w1) & _MASK, (w0 - w2) & _MASK
        owner = [index for index in moves1 if moves1[index] & _MASK == d1 and moves2[index] & _MASK == d2]
        if len(owner) != 1:
            _patchable = False
            return None
        index = owner[0]
        relocations.append((word, index, ((w0 - ptrs[index] + (1 << 63)) & _MASK) - (1 << 63)))
    return tuple(relocations)


def register(cache: dict, key: tuple, tensors: Sequence[object], sources: dict[str, int], plan, ops: Operands,
             conversions: Sequence[tuple[int, scales_module.Conversion]] = ()) -> None:
    """Remembers the launch the full path just made for `tensors` (torch tensors, in the entry point's order),
    under `key`. `sources` names, for each address field of `ops`, the tensor it is the address of (an index
    into `tensors`; len(tensors) + j for the j-th of `conversions`, the converted copy of tensor `source`).

    Called after the launch: a failure here only leaves the call without an entry (the next one takes the full
    path again), it never fails a call that has launched."""
    try:
        _register(cache, key, tensors, sources, plan, ops, conversions)
    except Exception:  # noqa: BLE001 - see the docstring
        cache.pop(key, None)


def _register(cache: dict, key: tuple, tensors: Sequence[object], sources: dict[str, int], plan, ops: Operands,
              conversions: Sequence[tuple[int, scales_module.Conversion]]) -> None:
    ptrs = tuple(t.data_ptr() for t in tensors)
    addresses = ptrs + tuple(c.address for _, c in conversions)
    if any(getattr(ops, field) != addresses[index] for field, index in sources.items()):
        return  # not the addresses this module would supply: leave this call to the full path
    entry = Entry()
    entry.check = make_check(tensors)
    entry.device = ops_device = _device_of(tensors)
    entry.current_stream = sys.modules["torch"]._C._cuda_getCurrentRawStream
    entry.generation = device_module.generation
    pack = runtime.ParamPack.of_members(_launched_image(plan.config, ops), INTERFACE.offsets)
    entry.pack, entry.words = pack, pack.words()
    entry.launcher = plan.launcher
    entry.launch_kernel = plan.launcher._drv.cuLaunchKernelEx
    entry.function, entry.params = plan.launcher.kernel.function, pack.address
    entry.ptrs, entry.addresses = ptrs, addresses
    relocations = _relocations(plan.config, ops, sources, addresses, tuple(entry.words))
    entry.relocate = None if relocations is None else _relocator(relocations, [p & 15 for p in ptrs], len(addresses))
    entry.conversions = tuple(_Conversion(source, made, ops_device) for source, made in conversions)
    if entry.conversions and entry.relocate is None:
        return  # converted scales move with the stream: such an entry could never be used
    if len(cache) >= CACHE_LIMIT:
        cache.clear()
    cache[key] = entry


def _launched_image(config, ops: Operands) -> bytes:
    from .launch import pack

    return pack(config, ops).image()


def _device_of(tensors) -> int:
    index = tensors[0].device.index
    return 0 if index is None else index
