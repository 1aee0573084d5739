"""``import deep_gemm`` served by dgx.deep_gemm when DGX_AS_DEEP_GEMM=1, without editing the engine that imports it.

dgx installs ``dgx-as-deep-gemm.pth`` next to itself in site-packages (``pip install .`` and ``pip install -e .``
alike); Python runs its one line at every interpreter start: it reads the variable and, only where it is set,
imports this module (and so the package dgx, not torch) and calls :func:`install`, which puts
:class:`DeepGemmFinder` first on ``sys.meta_path``; the finder answers only for ``deep_gemm`` and ``deep_gemm.*``,
and asks ``dgx.env.as_deep_gemm()`` (the one reader of the variable: a value dgx cannot use is an error there). So:

- DGX_AS_DEEP_GEMM=1: ``import deep_gemm``, ``import deep_gemm.utils``, ``from deep_gemm.testing import ...`` and
  ``importlib.util.find_spec("deep_gemm")`` give dgx.deep_gemm and its submodules (the same module objects:
  ``deep_gemm is dgx.deep_gemm``). dgx wins over a real DeepGEMM installed in the same environment, with a
  DeepGemmShadowedWarning that says where the hidden one is.
- unset or 0: the finder (if installed) answers None for everything, so ``import deep_gemm`` finds a real DeepGEMM,
  or fails, exactly as without dgx.

A process can also call install() itself (DeepGEMM's test runner does, for a checkout on PYTHONPATH).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings

NAME = "deep_gemm"
TARGET = "dgx.deep_gemm"
VARIABLE = "DGX_AS_DEEP_GEMM"
PTH_FILE = "dgx-as-deep-gemm.pth"
PTH_LINE = ('import os; os.environ.get("DGX_AS_DEEP_GEMM", "").strip() and '
            '__import__("dgx.deep_gemm_alias", fromlist=["install"]).install()\n')


class DeepGemmShadowedWarning(UserWarning):
    """DGX_AS_DEEP_GEMM=1 hides a real DeepGEMM installed in the same environment: `import deep_gemm` gets dgx's."""


class _AliasLoader(importlib.abc.Loader):
    """Loads deep_gemm[.x] as the already importable dgx.deep_gemm[.x] module itself."""

    def __init__(self, target: str):
        self.target = target
        self._own_spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # the import system set module.__spec__ to the alias's spec: give dgx's module its own back
        module.__spec__ = self._own_spec


class DeepGemmFinder(importlib.abc.MetaPathFinder):
    """Finds deep_gemm and deep_gemm.* as dgx.deep_gemm[.*] while dgx.env.as_deep_gemm() says so."""

    warned = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != NAME and not fullname.startswith(NAME + "."):
            return None
        from dgx import env  # only now: the first deep_gemm lookup of the process pays for importing dgx

        if not env.as_deep_gemm():
            return None
        target_name = TARGET + fullname[len(NAME):]
        target_spec = importlib.util.find_spec(target_name)
        if target_spec is None:
            return None  # a submodule dgx.deep_gemm does not have: ModuleNotFoundError as usual
        if fullname == NAME:
            self._warn_if_shadowing()
        return importlib.machinery.ModuleSpec(
            fullname, _AliasLoader(target_name), origin=target_spec.origin,
            is_package=target_spec.submodule_search_locations is not None)

    def _warn_if_shadowing(self) -> None:
        if DeepGemmFinder.warned:
            return
        real = None
        for finder in sys.meta_path:
            if isinstance(finder, DeepGemmFinder) or not hasattr(finder, "find_spec"):
                continue
            try:
                real = finder.find_spec(NAME, None)
            except Exception:  # noqa: BLE001 - a broken finder is not ours to report
                real = None
            if real is not None:
                break
        if real is not None:
            DeepGemmFinder.warned = True
            where = real.origin or ", ".join(real.submodule_search_locations or []) or "another finder"
            warnings.warn(
                f"{VARIABLE}=1: `import deep_gemm` gets dgx's drop-in (dgx.deep_gemm); the DeepGEMM installed at "
                f"{where} is hidden. Unset {VARIABLE} (or set it to 0) to use that one.",
                DeepGemmShadowedWarning, stacklevel=2)


def installed_finder() -> DeepGemmFinder | None:
    """The finder on sys.meta_path, if install() put it there."""
    return next((f for f in sys.meta_path if isinstance(f, DeepGemmFinder)), None)


def install() -> bool:
    """Puts the finder first on sys.meta_path when DGX_AS_DEEP_GEMM is present and not empty (dgx.env decides, at
    the first deep_gemm lookup, whether its value turns the alias on). Returns whether the finder is installed."""
    if installed_finder() is not None:
        return True
    if not os.environ.get(VARIABLE, "").strip():
        return False
    sys.meta_path.insert(0, DeepGemmFinder())
    return True


def uninstall() -> None:
    """Removes the finder from sys.meta_path (modules already imported stay in sys.modules)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, DeepGemmFinder)]
