"""What MLflow prints on its own, and keeping it off the terminal (the ``quiet`` option).

MLflow writes two things to a training script's terminal through this plugin: INFO log lines
when it creates a local SQLite store (``Creating initial MLflow database tables...``, logger
``mlflow.store.db.utils``), and, for a tracking server, two lines on stdout when a run ends
(``🏃 View run ... at: http://...``, unless ``MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT`` is set).
"""

from __future__ import annotations

import contextlib

from core_monitor.output import hidden as _hidden

#: MLflow's switch for the run-URL lines (read when a run ends).
URL_ENV = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"
#: The logger of MLflow's "creating database tables" lines.
DB_LOGGER = "mlflow.store.db.utils"


def hidden(quiet: bool) -> contextlib.AbstractContextManager[None]:
    """While the block runs, MLflow's own lines above are not shown (``quiet``): the database
    logger's level is WARNING and ``MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT`` is ``true``,
    unless the user set it (``core_monitor.output.hidden``). Both are process-wide, so a run
    the script itself ends with MLflow during the block prints no URL either. Errors and
    warnings still show."""
    return _hidden(quiet, loggers=[DB_LOGGER], env={URL_ENV: "true"})
