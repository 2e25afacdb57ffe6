"""What MLflow prints on its own, and keeping it off the terminal (the ``quiet`` option).

MLflow writes two things to a training script's terminal through this plugin: INFO log lines
when it creates a local SQLite store (``Creating initial MLflow database tables...``, logger
``mlflow.store.db.utils``), and, for a tracking server, two lines on stdout when a run ends
(``🏃 View run ... at: http://...``, unless ``MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT`` is set).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator

#: MLflow's switch for the run-URL lines (read when a run ends).
URL_ENV = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"
#: The logger of MLflow's "creating database tables" lines.
DB_LOGGER = "mlflow.store.db.utils"

_lock = threading.Lock()
_depth = 0  # hidden() blocks running now (several backends may close at once)
_saved: tuple[int, str | None] = (logging.NOTSET, None)


@contextlib.contextmanager
def hidden(quiet: bool) -> Iterator[None]:
    """While the block runs, MLflow's own lines above are not shown (``quiet``): the database
    logger's level is WARNING and ``MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT`` is ``true``,
    unless the user set it. Both are process-wide, so a run the script itself ends with MLflow
    during the block prints no URL either. Errors and warnings still show."""
    global _depth, _saved
    if not quiet:
        yield
        return
    with _lock:
        if _depth == 0:
            db = logging.getLogger(DB_LOGGER)
            _saved = (db.level, os.environ.get(URL_ENV))
            db.setLevel(logging.WARNING)
            os.environ.setdefault(URL_ENV, "true")
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                level, url = _saved
                logging.getLogger(DB_LOGGER).setLevel(level)
                if url is None:
                    os.environ.pop(URL_ENV, None)
