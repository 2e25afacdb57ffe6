"""``core_monitor.output.hidden``: the one silencer behind every backend's ``quiet``."""

from __future__ import annotations

import io
import logging
import os
import sys
import threading

from core_monitor.output import hidden

VARIABLE = "CORE_MONITOR_TEST_QUIET"


def test_quiet_false_changes_nothing():
    logger = logging.getLogger("core_monitor_test.sdk")
    before = sys.stdout
    with hidden(False, loggers=[logger.name], env={VARIABLE: "1"}, stdout=True):
        assert sys.stdout is before and logger.level == logging.NOTSET
        assert VARIABLE not in os.environ


def test_overlapping_blocks_restore_only_when_the_last_leaves():
    """Two backends starting at once on two threads: the first to leave must not put the
    SDK's output back while the other is still inside (``redirect_stdout`` would, or would
    restore the other's sink for good)."""
    logger = logging.getLogger("core_monitor_test.overlap")
    before = sys.stdout
    first, second = hidden(True, loggers=[logger.name], env={VARIABLE: "1"}, stdout=True), \
        hidden(True, loggers=[logger.name], env={VARIABLE: "1"}, stdout=True)
    first.__enter__()
    sink = sys.stdout
    second.__enter__()
    assert isinstance(sink, io.StringIO) and sys.stdout is sink
    first.__exit__(None, None, None)  # out of order: the first leaves while the second runs
    assert sys.stdout is sink and logger.level == logging.WARNING
    assert os.environ[VARIABLE] == "1"
    second.__exit__(None, None, None)
    assert sys.stdout is before and logger.level == logging.NOTSET
    assert VARIABLE not in os.environ


def test_a_variable_the_user_set_is_kept():
    os.environ[VARIABLE] = "user"
    try:
        with hidden(True, env={VARIABLE: "1"}):
            assert os.environ[VARIABLE] == "user"
        assert os.environ[VARIABLE] == "user"
    finally:
        del os.environ[VARIABLE]


def test_blocks_on_many_threads_leave_everything_as_it_was():
    logger = logging.getLogger("core_monitor_test.threads")
    logger.setLevel(logging.INFO)
    before = sys.stdout

    def work():
        for _ in range(200):
            with hidden(True, loggers=[logger.name], stdout=True):
                print("hidden")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sys.stdout is before and logger.level == logging.INFO
