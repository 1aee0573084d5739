"""dgx's build backend: setuptools' own (PEP 517 and 660 hooks unchanged), loaded from this folder so that the
build step pyproject.toml names (dgx_build_py, beside this file) is importable while building. Not installed."""

from setuptools.build_meta import *  # noqa: F401,F403 - the backend's hooks are setuptools'
from setuptools.build_meta import __all__  # noqa: F401
