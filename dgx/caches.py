"""The per-process caches of the launch path (plans, packed parameters, fast-path entries, loaded launchers,
workspaces), registered where they are made, so a tool or a test can set every one aside without naming them.

A module makes its cache as ``_plans: dict[...] = caches.per_process({})``; :func:`registered` lists them all.
"""

from __future__ import annotations

_registered: list[dict] = []


def per_process(cache: dict) -> dict:
    """Registers `cache` (a dict the caller keeps as a module global) and returns it."""
    _registered.append(cache)
    return cache


def registered() -> list[dict]:
    """Every registered cache, in registration order."""
    return list(_registered)
