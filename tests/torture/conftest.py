"""Torture-suite fixtures: a marker that counts one test as one trial of a category."""

from __future__ import annotations

import pytest
import torture_tally


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "torture_case(category): this test is one trial of a torture category"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    marker = item.get_closest_marker("torture_case")
    if marker is None:
        return
    category = marker.args[0]
    # One trial per test: counted at the call phase, or at setup when setup itself failed.
    if report.when == "call" or (report.when == "setup" and report.failed):
        if report.skipped:
            return
        xfail = hasattr(report, "wasxfail")
        torture_tally.record(category, 1, int(report.failed or xfail))
