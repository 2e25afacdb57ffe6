"""One rule for re-running a script with a run name already used, in every first-party backend
(``docs/operations/resume-and-copy.md``): without resume, the second run is a new run whose
rows never mix with the first's, read back from each tracker's own storage; with
``resume="allow"`` the first run continues (``test_resume.py``).

Backends whose run is a folder named after the run (csv, TensorBoard, DVCLive) replace the
earlier run in that folder, as Lightning's ``CSVLogger`` and ``dvclive.Live()`` do, after a
``UserWarning`` naming the folder; the others start a second run of that name beside the first,
as wandb, MLflow and Comet do, and their readers read the latest."""

from __future__ import annotations

import warnings

import pytest
from trackers import BACKENDS, READERS

from core_monitor import Monitor

#: The backends whose run is the run-named folder: they replace it, with a warning.
REPLACING = {"csv", "tensorboard", "dvclive"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_second_run_of_the_same_name_never_mixes_rows_with_the_first(tmp_path, backend):
    with Monitor([backend], project="p", name="again", log_dir=tmp_path) as first:
        for step in range(5):
            first.log({"loss": 1.0}, step=step)
    assert sorted(s for t, s, _ in READERS[backend](first.run) if t == "loss") == list(range(5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Monitor([backend], project="p", name="again", log_dir=tmp_path,
                     strict=True) as second:
            second.log({"loss": 2.0}, step=0)
            second.log({"loss": 2.0}, step=1)
    stored = [(s, v) for t, s, v in READERS[backend](second.run) if t == "loss"]
    assert sorted(stored) == [(0, 2.0), (1, 2.0)], backend
    replaced = [w for w in caught if issubclass(w.category, UserWarning)
                and "resume='allow'" in str(w.message)]
    assert len(replaced) == (backend in REPLACING), [str(w.message) for w in caught]
