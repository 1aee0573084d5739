"""dgx's public ops as torch operators, ``torch.ops.dgx.<name>``, for torch.compile and CUDA graphs.

Importing this module (``import dgx.torch_ops``, or touching ``dgx.torch_ops``) imports torch and registers
the operators of every family (each family's ``torch_ops`` module, dgx/families) once per process; ``import dgx``
alone never imports torch. Each operator takes flat tensors (the ``(tensor, scales)`` pairs spelled out), declares
in its schema the argument it writes (``Tensor(a!) d``), and has a fake implementation giving the output's shape,
dtype and device, so torch.compile traces it without a graph break; its real implementation is the plain dgx
function. This module's functions of the same names (the families' own, gathered here) take the plain functions'
arguments (pairs included) and call the operators: use them in code that is compiled.

Registration goes through ``torch.library.Library`` (define + impl + register_fake) rather than the
``torch.library.custom_op`` decorator: the decorator's Python autograd and in-place kernels cost 13-31 µs per
call on a CPU where this path costs about 3 µs (tests/torch_op_timing.py measures both).
"""

from __future__ import annotations

import importlib

import torch

from . import families

NAMESPACE = "dgx"

# The kernels read the layouts they are given (scale layouts, row strides): compiled code must pass every
# tensor with the strides it has in eager mode.
TAGS = (torch.Tag.needs_exact_strides,)

_LIB = torch.library.Library(NAMESPACE, "DEF")  # must stay alive for the operators to stay registered
SCHEMAS: dict[str, str] = {}  # name -> schema (arguments and returns, without the name)
LEGACY: tuple[str, ...] = ()
for _family in families.FAMILIES:
    if not _family.torch_ops:
        continue
    for _op in importlib.import_module(_family.torch_ops).TORCH_OPS:
        _LIB.define(_op.name + _op.schema, tags=TAGS)
        # Every device: dgx's own checks then name a tensor on the wrong device, rather than the dispatcher.
        _LIB.impl(_op.name, _op.real, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{_op.name}", _op.fake, lib=_LIB)
        SCHEMAS[_op.name] = _op.schema
    # The family's functions of the plain signatures (and legacy names), as this module's.
    _module = importlib.import_module(_family.torch_ops)
    globals().update({name: getattr(_module, name) for name in _module.__all__ if name != "TORCH_OPS"})
    LEGACY += tuple(_module.LEGACY)

__all__ = ["NAMESPACE", "SCHEMAS", *SCHEMAS, *LEGACY]
