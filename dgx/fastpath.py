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

Relocation. The kernel's parameters are one struct laid out by its interface (dgx.kernels.interface), so the
words that hold addresses are known from it: each pointer member, and the global-address word of each tensor map
(the sm_90 driver's encode stores it as a plain 64-bit word: learnt from the entry's own maps, every map at the
same position, not assumed). When an entry is made, each such word is attributed to the one call address it lies
within 16 bytes of (a map of the B scales starts at the 16-byte boundary below them); words that lie near none
(a null pointer, dgx's own buffers) stay as they are. A map layout without such a word, or a word near two
addresses (overlapping tensors), leaves the entry without relocations: it then serves only calls with its own
addresses, and other calls take the full path.

Scales the kernels cannot read as they are (a row-major SFA) are converted on every call, on the fast path too:
the entry launches the scale-layout kernel into dgx.scales' memory for the stream (allocated on the capturing
stream under CUDA-graph capture, and freed after the GEMM), then the GEMM with that address relocated in.

Entry points whose checks also depend on where tensors lie relative to one another (an output that must not overlap
an input: dgx.einsum, dgx.silu_mul_quant) name those pairs when they register; a call with new addresses re-checks
them (from the byte spans the entry's shapes and strides fix) before anything is written, and takes the full path,
whose checks raise, where two of them overlap.

Entries are per thread (a launch reads parameters another thread could be rewriting otherwise) and their number
is bounded (:data:`CACHE_LIMIT` per entry point; the cache starts over when full). dgx.set_num_sms retires them
all (device.generation).
"""

from __future__ import annotations

import sys
from typing import Callable, Sequence

from . import device as device_module
from . import pdl as _pdl
from . import runtime
from . import scales as scales_module
from .kernels import scale_layout
from .kernels.interface import TENSOR_MAP, KernelInterface
from .streams import resolve_stream

CACHE_LIMIT = 4096


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
                 "current_stream", "conversions", "launch_kernel", "function", "params", "disjoint")

    def run(self, ptrs: tuple[int, ...], stream) -> bool:
        """Launches with the tensors' data pointers `ptrs` (in the entry's order) on `stream` (None: torch's
        current stream); False, having launched nothing, when this entry cannot serve them."""
        if self.generation != device_module.generation:
            return False
        if ptrs != self.ptrs:
            if self.disjoint is not None and not self.disjoint(ptrs):
                return False  # tensors that must not overlap now do: the full path's checks say so
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
        config = (launcher.pdl_configs if _pdl._enabled else launcher.configs).get(s)
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
    have the `residues` modulo 16; else it writes every relocated word (word index, address index, addend) into
    ``words`` (unless None) and returns True."""
    residues = tuple(residues)
    relocations = tuple(relocations)

    def relocate(words, *ptrs) -> bool:
        for ptr, residue in zip(ptrs, residues):
            if ptr & 15 != residue:
                return False
        if words is None:
            return True
        ptrs += (0,) * (count - len(ptrs))  # converted scales' addresses not given: 0
        for word, index, addend in relocations:
            words[word] = ptrs[index] + addend
        return True

    return relocate


def _address_words(interface: KernelInterface, image: Sequence[int], addresses: Sequence[int]) -> list[int] | None:
    """The word indices of the parameter image that hold addresses: every pointer member's, and each tensor map's
    global-address word (found in the maps themselves: the one word at the same position in every map that lies
    within 16 bytes of a call address); None if the maps hold no such word."""
    words = [off // 8 for p, off in zip(interface.params, interface.offsets) if p.ctype.endswith("*")]
    maps = [off // 8 for p, off in zip(interface.params, interface.offsets) if p.ctype == TENSOR_MAP]
    if maps:
        positions = [w for w in range(16) if all(len(_near(image[base + w], addresses)) == 1 for base in maps)]
        if len(positions) != 1:
            return None
        words += [base + positions[0] for base in maps]
    return sorted(words)


def _near(value: int, addresses: Sequence[int]) -> list[int]:
    """The indices of the addresses `value` lies within 16 bytes of."""
    return [i for i, a in enumerate(addresses) if -16 < value - a < 16]


def _relocations(interface: KernelInterface, image: Sequence[int],
                 addresses: Sequence[int]) -> tuple[tuple[int, int, int], ...] | None:
    """(word, address index, addend) for every address word of the parameters that lies at one of the call's
    `addresses` (see the module docstring); None where the parameters cannot be relocated."""
    words = _address_words(interface, image, addresses)
    if words is None:
        return None
    relocations = []
    for word in words:
        value = image[word]
        near = _near(value, addresses)
        if len(near) > 1:
            return None  # overlapping tensors: which one the word follows is not known
        if near:
            relocations.append((word, near[0], value - addresses[near[0]]))
    return tuple(relocations)


def _disjoint(pairs: Sequence[tuple[int, int]], spans: Sequence[int]) -> Callable[[Sequence[int]], bool]:
    """A function of the call's data pointers: whether, for every pair (i, j) of `pairs`, tensor i's bytes
    [p_i, p_i + spans[i]) and tensor j's share none."""
    checks = tuple((i, j, spans[i], spans[j]) for i, j in pairs)

    def disjoint(ptrs) -> bool:
        for i, j, span_i, span_j in checks:
            pi, pj = ptrs[i], ptrs[j]
            if pi < pj + span_j and pj < pi + span_i:
                return False
        return True

    return disjoint


def _span(t) -> int:
    """Bytes from a torch tensor's data pointer to the end of its last element (0 if empty; strides >= 0)."""
    if t.numel() == 0:
        return 0
    return (sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1) * t.element_size()


def number_key(value):
    """A float option as part of a hint key that tells apart every value a kernel would see differently (-0.0 from
    0.0); an int or None stays itself; False for a type the fast path does not take (the full path checks it)."""
    kind = type(value)
    if kind is float:
        return value.hex()
    if kind is int or value is None:
        return value
    return False


def register(cache: dict, key: tuple, tensors: Sequence[object], plan, pack: runtime.ParamPack,
             conversions: Sequence[tuple[int, scales_module.Conversion]] = (), *,
             interface: KernelInterface | None = None, disjoint: Sequence[tuple[int, int]] = ()) -> None:
    """Remembers the launch the full path just made for `tensors` (torch tensors, in the entry point's order) with
    the parameters `pack` (laid out by the plan's kernel interface), under `key`. `conversions` are the scales the
    call converted: (index of the tensor converted, the conversion), whose copies' addresses follow the tensors'.
    `plan` is anything with the kernel's ``launcher`` (and ``config.interface`` unless `interface` is given).
    `disjoint`: pairs of indices of `tensors` whose memory the full path checked does not overlap (re-checked on
    every call with new addresses).

    Called after the launch: a failure here only leaves the call without an entry (the next one takes the full
    path again), it never fails a call that has launched."""
    try:
        _register(cache, key, tensors, plan, pack, conversions, interface, disjoint)
    except Exception:  # noqa: BLE001 - see the docstring
        cache.pop(key, None)


def register_converted(cache: dict, key: tuple, tensors: Sequence[object], plan, pack: runtime.ParamPack,
                       conversion: scales_module.Conversion | None) -> None:
    """:func:`register` of an FP8 GEMM's launch where every one of `tensors` is a torch tensor, with the conversion
    of its A scales (tensor 1) where the call made one."""
    if torch_tensors(*tensors):
        register(cache, key, tensors, plan, pack, [(1, conversion)] if conversion else ())


def _register(cache: dict, key: tuple, tensors: Sequence[object], plan, pack: runtime.ParamPack,
              conversions: Sequence[tuple[int, scales_module.Conversion]], interface: KernelInterface | None,
              disjoint: Sequence[tuple[int, int]]) -> None:
    ptrs = tuple(t.data_ptr() for t in tensors)
    addresses = ptrs + tuple(c.address for _, c in conversions)
    if interface is None:
        interface = plan.config.interface
    entry = Entry()
    entry.check = make_check(tensors)
    entry.device = ops_device = _device_of(tensors)
    entry.current_stream = sys.modules["torch"]._C._cuda_getCurrentRawStream
    entry.generation = device_module.generation
    own = runtime.ParamPack.of_members(pack.image(), interface.offsets)  # the entry's own copy, relocated in place
    entry.pack, entry.words = own, own.words()
    entry.launcher = plan.launcher
    entry.launch_kernel = plan.launcher.driver_launch
    entry.function, entry.params = plan.launcher.kernel.function, own.address
    entry.ptrs, entry.addresses = ptrs, addresses
    relocations = _relocations(interface, tuple(entry.words), addresses)
    entry.relocate = None if relocations is None else _relocator(relocations, [p & 15 for p in ptrs], len(addresses))
    entry.conversions = tuple(_Conversion(source, made, ops_device) for source, made in conversions)
    entry.disjoint = _disjoint(disjoint, [_span(t) for t in tensors]) if disjoint else None
    if entry.conversions and entry.relocate is None:
        return  # converted scales move with the stream: such an entry could never be used
    if len(cache) >= CACHE_LIMIT:
        cache.clear()
    cache[key] = entry


def _device_of(tensors) -> int:
    index = tensors[0].device.index
    return 0 if index is None else index
