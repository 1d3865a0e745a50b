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

Trust model.  A plugin is code that runs with the user's rights on every snapshot and restore,
so it may come only from where the user installed software, never from the data snapstore
handles: the tree may be a downloaded project.  Discovery and loading therefore skip every
``sys.path`` entry that is the current directory (``''``, ``'.'``, or the cwd by its path, which
``python -m`` and ``python -c`` put first) or lies inside the store's tree, except entries of the
running Python environment itself (``sys.prefix``: a virtualenv kept in the project, whose
interpreter the user is already running).  While a plugin's module is imported those entries are
taken off ``sys.path`` too, so a file in the tree cannot shadow an installed plugin's module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from snapstore.errors import HookError
from snapstore.tree.paths import is_inside

EVENTS = ("before_snapshot", "after_snapshot", "before_restore", "after_restore")
GROUP = "snapstore.plugins"


__all__ = ["EVENTS", "GROUP", "HookError", "HookRegistry"]


Hook = Callable[..., Any]

#: Whether a plugin is declared, per tuple of trusted sys.path entries (the answer is cached
#: because looking costs a directory listing per entry).
_plugins_present: dict[tuple[str, ...], bool] = {}


class _HasRoot(Protocol):
    @property
    def root(self) -> str: ...


def trusted_path(root: str | None) -> list[str]:
    """The ``sys.path`` entries plugins may come from (see the trust model above)."""
    cwd = os.path.realpath(os.getcwd())
    tree = os.path.realpath(root) if root else None
    envs = {os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix)}
    out = []
    for entry in sys.path:
        if not entry or entry == os.curdir:
            continue
        real = os.path.realpath(entry)
        if real == cwd:
            continue
        if tree is not None and is_inside(real, tree) and not any(is_inside(real, e) for e in envs):
            continue
        out.append(entry)
    return out


def _any_plugin_declared(entries: list[str]) -> bool:
    """Cheap check: does any distribution on ``entries`` declare a snapstore plugin?"""
    key = tuple(entries)
    cached = _plugins_present.get(key)
    if cached is not None:
        return cached
    found = False
    marker = "[" + GROUP + "]"
    for entry in entries:
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(entry, name, "entry_points.txt"), encoding="utf-8") as f:
                    if marker in f.read():
                        found = True
                        break
            except OSError:
                continue
        if found:
            break
    _plugins_present[key] = found
    return found


@contextmanager
def _only(entries: list[str]) -> Iterator[None]:
    """Import with ``sys.path`` restricted to ``entries`` (restored afterwards), so a module in
    the tree or the cwd cannot shadow the plugin's own."""
    saved = sys.path[:]
    sys.path[:] = [e for e in saved if e in entries]
    try:
        yield
    finally:
        sys.path[:] = saved


class HookRegistry:
    """The hooks of one store."""

    def __init__(self, store: _HasRoot) -> None:
        self._store = store
        self._hooks: dict[str, list[Hook]] = {e: [] for e in EVENTS}
        self._plugins_loaded = False
        self.plugin_errors: list[str] = []

    def register(self, event: str, hook: Hook) -> Hook:
        """Run ``hook(store, **kwargs)`` on ``event``; returns the hook (usable as a decorator
        factory: ``store.hooks.register("after_snapshot", fn)``)."""
        if event not in self._hooks:
            raise ValueError(f"unknown hook event {event!r}; known: {', '.join(EVENTS)}")
        self._hooks[event].append(hook)
        return hook

    def unregister(self, event: str, hook: Hook) -> None:
        """Stop running ``hook`` on ``event``."""
        self._hooks[event].remove(hook)

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        if os.environ.get("SNAPSTORE_NO_PLUGINS"):
            return
        entries = trusted_path(getattr(self._store, "root", None))
        if not _any_plugin_declared(entries):
            return
        from importlib.metadata import distributions

        seen: set[str] = set()
        for dist in distributions(path=entries):
            name = dist.metadata["Name"] or ""
            if name in seen:  # the first on the path wins, as for imports
                continue
            seen.add(name)
            for ep in dist.entry_points.select(group=GROUP):
                try:
                    with _only(entries):
                        plugin = ep.load()
                    plugin(self._store)
                except Exception as exc:  # a broken plugin must not break the store
                    self.plugin_errors.append(f"plugin {ep.name} failed to load: {exc}")

    def before(self, event: str, **kwargs: Any) -> None:
        """Run the hooks of a before-event; the first that raises aborts with HookError."""
        self._load_plugins()
        for hook in list(self._hooks[event]):
            try:
                hook(self._store, **kwargs)
            except Exception as exc:
                name = getattr(hook, "__name__", repr(hook))
                raise HookError(f"{event} hook {name} refused the operation: {exc}") from exc

    def after(self, event: str, **kwargs: Any) -> list[str]:
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
