"""The quick tier (tests/tiers.py) stays whole: every heavy file exists, and every package of
snapstore keeps at least one quick test file importing it (docs/test-map.md's reading)."""

from __future__ import annotations

import re

import tiers
from testmap import PACKAGES, TESTS, collect, package_of


def test_every_heavy_file_exists():
    assert sorted(n for n in tiers.HEAVY if not (TESTS / n).is_file()) == []



def test_every_portable_file_exists_and_every_platform_aware_file_is_portable():
    assert sorted(n for n in tiers.PORTABLE if not (TESTS / n).is_file()) == []
    marks = re.compile(r"^(?:from platform_marks import|import platform_marks)", re.MULTILINE)
    aware = {p.name for p in TESTS.glob("test_*.py") if marks.search(p.read_text(encoding="utf-8"))}
    assert sorted(aware - tiers.PORTABLE) == []


def test_every_package_has_a_quick_test_file():
    quick: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for module, files in collect().items():
        package = package_of(module)
        for name in files:
            if package in quick and not tiers.is_heavy(name):
                quick[package].add(name)
    assert [p for p, files in quick.items() if not files] == []


def test_torture_files_and_named_files_are_heavy():
    assert tiers.is_heavy("/x/tests/torture/test_torture_crash.py")
    assert tiers.is_heavy("tests/test_service.py") and not tiers.is_heavy("tests/test_cli.py")
