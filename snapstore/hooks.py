"""Lifecycle hooks and plugins.

Callables registered on a store run around its operations::

    store.hooks.register("before_snapshot", lambda store, **kw: ...)
    store.hooks.register("after_restore", notify)

==================  ===================================  =========================================
event               keyword arguments                    if the hook raises
==================  ===================================  =========================================
before_snapshot     message, task, tags, metadata        the snapshot is aborted, nothing written
after_snapshot      checkpoint                           reported in ``checkpoint.warnings``
before_restore      target, paths, dry_run, kind         the restore is aborted, nothing changed
after_restore       report                               reported in ``report.warnings``
==================  ===================================  =========================================

Each hook is called as ``hook(store, **kwargs)``.  A *before* hook that raises aborts the
operation cleanly with :class:`HookError` (exit code 11) and nothing changed; an *after* hook
that raises cannot undo committed work, so its error is reported as a warning instead.

Plugins are installed packages that declare an entry point in the group ``snapstore.plugins``;
each names a callable ``plugin(store)`` that registers hooks.  They are loaded once per store,
on the first hook dispatch.  Looking for them reads only the ``entry_points.txt`` files on
``sys.path`` (importlib.metadata is consulted only if one mentions the group), so a process
without plugins pays well under a millisecond.  ``SNAPSTORE_NO_PLUGINS=1`` disables them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from snapstore.errors import HookError

EVENTS = ("before_snapshot", "after_snapshot", "before_restore", "after_restore")
GROUP = "snapstore.plugins"


__all__ = ["EVENTS", "GROUP", "HookError", "HookRegistry"]


_plugins_present: bool | None = None


def _any_plugin_declared() -> bool:
    """Cheap check: does any installed distribution declare a snapstore plugin?"""
    global _plugins_present
    if _plugins_present is not None:
        return _plugins_present
    found = False
    marker = "[" + GROUP + "]"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(entry or ".", name, "entry_points.txt"), encoding="utf-8") as f:
                    if marker in f.read():
                        found = True
                        break
            except OSError:
                continue
        if found:
            break
    _plugins_present = found
    return found


class HookRegistry:
    """The hooks of one store."""

    def __init__(self, store) -> None:
        self._store = store
        self._hooks: dict[str, list[Callable]] = {e: [] for e in EVENTS}
        self._plugins_loaded = False
        self.plugin_errors: list[str] = []

    def register(self, event: str, hook: Callable) -> Callable:
        """Run ``hook(store, **kwargs)`` on ``event``; returns the hook (usable as a decorator
        factory: ``store.hooks.register("after_snapshot", fn)``)."""
        if event not in self._hooks:
            raise ValueError(f"unknown hook event {event!r}; known: {', '.join(EVENTS)}")
        self._hooks[event].append(hook)
        return hook

    def unregister(self, event: str, hook: Callable) -> None:
        self._hooks[event].remove(hook)

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        if os.environ.get("SNAPSTORE_NO_PLUGINS") or not _any_plugin_declared():
            return
        from importlib.metadata import entry_points

        for ep in entry_points(group=GROUP):
            try:
                ep.load()(self._store)
            except Exception as exc:  # a broken plugin must not break the store
                self.plugin_errors.append(f"plugin {ep.name} failed to load: {exc}")

    def before(self, event: str, **kwargs) -> None:
        """Run the hooks of a before-event; the first that raises aborts with HookError."""
        self._load_plugins()
        for hook in list(self._hooks[event]):
            try:
                hook(self._store, **kwargs)
            except Exception as exc:
                name = getattr(hook, "__name__", repr(hook))
                raise HookError(f"{event} hook {name} refused the operation: {exc}") from exc

    def after(self, event: str, **kwargs) -> list[str]:
        """Run the hooks of an after-event; returns the errors as warnings (never raises)."""
        self._load_plugins()
        warnings = list(self.plugin_errors)
        self.plugin_errors.clear()
        for hook in list(self._hooks[event]):
            try:
                hook(self._store, **kwargs)
            except Exception as exc:
                name = getattr(hook, "__name__", repr(hook))
                warnings.append(f"{event} hook {name} failed: {exc}")
        return warnings
