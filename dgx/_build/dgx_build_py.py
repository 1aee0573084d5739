"""Build step (setuptools' build_py, named in pyproject.toml): installs ``dgx-as-deep-gemm.pth`` at the root of
site-packages, the one line that lets DGX_AS_DEEP_GEMM=1 serve ``import deep_gemm`` from dgx (dgx/deep_gemm_alias.py).

A regular build writes it into the build tree, whose root becomes the wheel's root (site-packages). An editable
build (PEP 660) ignores the build tree: the file goes to the editable wheel's root instead, which setuptools keeps
in the install command's install_lib while it assembles that wheel. pip records the file either way, so
``pip uninstall dgx`` removes it. Not part of the installed package (dgx/_build is the build backend's path).
"""

from __future__ import annotations

import os

from setuptools.command.build_py import build_py

PTH_FILE = "dgx-as-deep-gemm.pth"
# As dgx.deep_gemm_alias.PTH_LINE: dgx is imported at start-up only where the variable is set.
PTH_LINE = ('import os; os.environ.get("DGX_AS_DEEP_GEMM", "").strip() and '
            '__import__("dgx.deep_gemm_alias", fromlist=["install"]).install()\n')


class BuildPyWithDeepGemmHook(build_py):
    """build_py that also writes dgx-as-deep-gemm.pth where the wheel's root is assembled."""

    def run(self) -> None:
        super().run()
        root = self.build_lib
        if getattr(self, "editable_mode", False):
            root = self.get_finalized_command("install").install_lib
        os.makedirs(root, exist_ok=True)
        path = os.path.join(root, PTH_FILE)
        with open(path, "w", encoding="utf-8") as f:
            f.write(PTH_LINE)
        self._pth_outputs = [path]

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return list(super().get_outputs(include_bytecode)) + list(getattr(self, "_pth_outputs", []))
