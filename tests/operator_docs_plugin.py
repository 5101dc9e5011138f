"""The docs' runner's conftest on the host (tests/operator_docs.py): a failed block reports its output.

pytest-codeblocks reports a block that exits non-zero by its exit status alone; this adds the block,
its standard output and its standard error, so that the outer test shows why it failed.
"""

import subprocess

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    failed = call.excinfo and call.excinfo.errisinstance(subprocess.CalledProcessError)
    if report.when == "call" and failed:
        error = call.excinfo.value
        report.longrepr = (
            f"{item.name}: exit status {error.returncode}\n```\n{error.cmd}```\n"
            f"standard output:\n{(error.stdout or b'').decode(errors='replace')[-4000:]}\n"
            f"standard error:\n{(error.stderr or b'').decode(errors='replace')[-4000:]}"
        )
    return report
