"""The test tiers: which test files ``make test-quick`` leaves out (marked ``heavy``).

``make test`` runs everything.  ``make test-quick`` (``-m "not slow and not heavy"``) is the loop
a developer runs after each edit: at most two minutes on the 2-core machine.  A file is heavy
when a ``make test`` run spends more than ~6 s in it (or a quick run under load ~14 s) (killed processes, SeaweedFS, Chromium,
many replays, big trees), or it is a torture file; ``tests/test_tiers.py`` checks that every
package of snapstore still has a quick test file, so the quick tier never stops covering one.
``make test`` then runs the files of ``PORTABLE`` again under ``SNAPSTORE_PLATFORM=portable``
(the macOS/BSD path: polling watcher, no /proc, no syncfs; ~1 min), so that path cannot drift
between runs of the whole ``make test-portable``.
Figures: the per-file times of a ``make test`` run's JUnit report (docs/test-map.md has the map).
"""

from __future__ import annotations

HEAVY = frozenset({
    "test_agent.py", "test_agent_adapters.py", "test_agent_integrate.py",
    "test_attribution_differential.py", "test_autostart.py", "test_background.py", "test_bombs.py",
    "test_checkpoint_cost.py", "test_claude_rewind.py", "test_consolidate.py",
    "test_conversation_gather_crash.py", "test_durability_crash.py", "test_durability_power.py",
    "test_gc_crash.py", "test_gemini.py", "test_generations.py", "test_hook_claude_code.py",
    "test_hook_root.py", "test_hostile_payloads.py", "test_http_hooks_other_user.py",
    "test_integrate.py", "test_integrate_any_path.py", "test_maintenance.py",
    "test_maintenance_size.py", "test_manifest_cut.py", "test_mcp.py", "test_mcp_attribution.py",
    "test_mcp_inspector.py", "test_mcp_root.py", "test_mcp_startup.py", "test_memory.py",
    "test_native_client.py", "test_native_fuzz.py", "test_no_space.py", "test_packs.py",
    "test_pathlog.py", "test_planted_store.py", "test_remote_aws.py", "test_remote_browse.py",
    "test_remote_crypt.py", "test_remote_failures.py", "test_remote_heads.py",
    "test_remote_history.py", "test_remote_history_hostile.py", "test_remote_hostile.py",
    "test_remote_outage.py", "test_remote_progress.py", "test_remote_protocol.py",
    "test_remote_ranges.py", "test_remote_resume.py", "test_remote_retention.py",
    "test_remote_volume_down.py", "test_repair.py", "test_repair_same_pack.py",
    "test_restore_crash.py", "test_roundtrip.py", "test_service.py", "test_service_once.py",
    "test_service_silent.py", "test_small_address_space.py", "test_snapshot_memory.py",
    "test_store_creation_race.py", "test_store_files.py", "test_terminal_escapes.py",
    "test_textdiff_ends.py", "test_ui_access.py", "test_ui_bounded.py", "test_ui_browser.py",
    "test_ui_browser_flows.py", "test_ui_browser_lazy.py", "test_ui_other_user.py",
    "test_ui_remote.py", "test_ui_undo_since.py", "test_watch_differential.py",
    "test_watch_first_checkpoint.py", "test_watch_million.py", "test_watch_partial.py", "test_watch_trust.py",
    "test_wheel_install.py",
})  # fmt: skip

#: Run again under SNAPSTORE_PLATFORM=portable by ``make test``: every file that knows a
#: Linux-only facility (imports tests/platform_marks.py: tests/test_tiers.py checks it), and the
#: platform layer's own, the watcher's, the service's and restore's core files.
PORTABLE = frozenset({
    "test_durability.py", "test_durability_crash.py", "test_hook_cost.py", "test_idle_check.py",
    "test_mapped_cache.py", "test_mapped_queries.py", "test_mapping_scan_thread.py", "test_native_client.py",
    "test_platform_layer.py", "test_polling_source.py", "test_restore.py", "test_restore_crash.py",
    "test_restore_settle.py", "test_restore_speed.py", "test_restore_speed_plan.py",
    "test_restore_watch_patch.py", "test_service.py", "test_snapshot_memory.py",
    "test_snapshot_ordered.py", "test_ui_other_user.py", "test_watch_differential.py",
    "test_watch_partial.py", "test_watch_trust.py", "test_watcher.py",
})  # fmt: skip


def is_heavy(path: str) -> bool:
    """Whether the test file at ``path`` (any form of its path) is left out of the quick tier."""
    parts = path.replace("\\\\", "/").split("/")
    return "torture" in parts[:-1] or parts[-1] in HEAVY


if __name__ == "__main__":
    # ``python tests/tiers.py portable``: the portable pass's files, for the Makefile.
    import sys

    if sys.argv[1:] == ["portable"]:
        print(" ".join(f"tests/{name}" for name in sorted(PORTABLE)))
