"""The first-party backends, as the cross-backend tests (tests/plugins) name and read them."""

from __future__ import annotations

import csv_monitor
import mlflow_monitor
import tensorboard_monitor
import trackio_monitor
import wandb_monitor

#: The first-party backends, in the order the tests select them.
BACKENDS = ["trackio", "tensorboard", "wandb", "mlflow", "csv"]
#: Backend name -> its plugin's ``read_rows(run)``: ``[(tag, step, value)]`` from its storage.
READERS = {
    "trackio": trackio_monitor.read_rows,
    "tensorboard": tensorboard_monitor.read_rows,
    "wandb": wandb_monitor.read_rows,
    "mlflow": mlflow_monitor.read_rows,
    "csv": csv_monitor.read_rows,
}
