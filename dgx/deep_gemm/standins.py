"""Stand-ins for DeepGEMM names dgx cannot run: with DeepGEMM's signature (from the recorded API), so that a call with
wrong arguments fails as DeepGEMM's would (TypeError), and a well-formed call raises an error that says why.

- :func:`pending`: a kernel family dgx is building (FamilyMissingError, a NotImplementedError).
- :func:`sm100_only`: a name that exists for sm_100 only (Sm100OnlyError, a NotImplementedError).
"""

from __future__ import annotations

from typing import Callable

from ..errors import FamilyMissingError, Sm100OnlyError
from . import reference


def _standin(name: str, module: str, make_error: Callable[[], Exception]) -> Callable:
    sig = reference.signature(name, module)

    def standin(*args, **kwargs):
        sig.bind(*args, **kwargs)  # DeepGEMM's TypeError for a call its signature refuses
        raise make_error()

    standin.__name__ = standin.__qualname__ = name
    standin.__module__ = f"dgx.{module}"
    standin.__signature__ = sig
    return standin


def pending(name: str, family: str, module: str = "deep_gemm") -> Callable:
    """DeepGEMM's `module`.`name`, raising FamilyMissingError("dgx has no <family> family yet") when called."""
    fn = _standin(name, module, lambda: FamilyMissingError(
        f"{name}: dgx has no {family} family yet; this name exists with DeepGEMM {reference.commit()}'s signature so "
        f"that code importing it loads, and runs once the family lands"))
    fn.__doc__ = f"DeepGEMM's {name} (the {family} family, not in dgx yet): raises FamilyMissingError."
    fn.family = family
    return fn


def _sm100_message(name: str, what: str) -> str:
    return (f"{name}: {what} sm_100 (Blackwell) only, in DeepGEMM too; dgx's kernels are sm_90 (Hopper), where "
            f"DeepGEMM does not run it either")


def sm100_only(name: str, what: str, module: str = "deep_gemm") -> Callable:
    """DeepGEMM's `module`.`name`, raising Sm100OnlyError("<what> sm_100 only") when called."""
    fn = _standin(name, module, lambda: Sm100OnlyError(_sm100_message(name, what)))
    fn.__doc__ = f"DeepGEMM's {name}: {what} sm_100 only; raises Sm100OnlyError."
    return fn


def sm100_only_class(name: str, what: str, module: str = "deep_gemm") -> type:
    """A class named `name` whose constructor takes DeepGEMM's arguments and raises Sm100OnlyError."""
    sig = reference.signature(name, module)

    def __init__(self, *args, **kwargs):
        sig.bind(*args, **kwargs)
        raise Sm100OnlyError(_sm100_message(name, what))

    cls = type(name, (), {"__init__": __init__, "__module__": f"dgx.{module}",
                          "__doc__": f"DeepGEMM's {name}: {what} sm_100 only; constructing one raises Sm100OnlyError."})
    cls.__signature__ = sig  # what inspect.signature(cls) shows: the constructor's arguments, without self
    return cls
