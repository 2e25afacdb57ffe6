"""The first-party plugins installed from wheels, seen through the ``monitors`` CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Venv

FIRST_PARTY = {"trackio": "trackio-monitor", "tensorboard": "tensorboard-monitor",
               "wandb": "wandb-monitor", "mlflow": "mlflow-monitor"}


def test_monitors_list_json_names_each_plugin_with_distribution_and_version(
    full_venv: Venv, tmp_path: Path
) -> None:
    rows = json.loads(full_venv.run(["monitors", "list", "--json"], cwd=tmp_path).stdout)
    by_name = {row["name"]: row for row in rows}
    for name, dist in FIRST_PARTY.items():
        assert by_name[name]["distribution"] == dist
        assert by_name[name]["version"] == "0.1.0"
        assert by_name[name]["entry_point"].startswith(dist.replace("-", "_") + ":")
        assert by_name[name]["status"] == "installed"


def test_monitors_list_check_imports_each_plugin_and_reports_ok(
    full_venv: Venv, tmp_path: Path
) -> None:
    done = full_venv.run(["monitors", "list", "--check", "--json"], cwd=tmp_path, expect=0)
    statuses = {row["name"]: row["status"] for row in json.loads(done.stdout)}
    assert statuses == dict.fromkeys(FIRST_PARTY, "ok")
