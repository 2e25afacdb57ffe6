"""The reader contract (``core_monitor.readers``) and resume (``core_monitor.resume``): what
``monitors copy`` and ``Monitor(resume=...)`` need of a backend."""

from __future__ import annotations

import uuid

import pytest

from ..capabilities import Capabilities
from ..monitor import Monitor
from ..readers import check_config, check_media, check_rows, installed_readers, load_reader
from ..resume import NoRunToResume


class ResumeChecks:
    """Reader-contract and resume checks; mixed into ``MonitorContract``."""

    def test_reader_returns_what_the_reader_contract_says(
        self, make_monitor, read_rows, read_config, read_media, settle
    ):
        monitor = make_monitor(config={"lr": 0.5})
        monitor.log({"loss": 0.25, "acc": 1.0}, step=3)
        monitor.log({"loss": 0.5}, step=1)
        settle(monitor)
        problems = check_rows(read_rows(monitor.run))
        if read_config is not None:
            problems += check_config(read_config(monitor.run))
        if read_media is not None:
            problems += check_media(read_media(monitor.run))
        if problems:
            pytest.fail("the reader breaks the reader contract (core_monitor.readers), which "
                        f"`monitors copy` relies on: {'; '.join(problems)}", pytrace=False)

    def test_the_declared_reader_loads(self, backend_class):
        name = Monitor.backend_name(backend_class)
        if name not in installed_readers():
            pytest.skip(f"no reader declared for {name!r}: declare your reader module in the "
                        "entry-point group 'experiment_monitor_readers' so that `monitors copy` "
                        "can read your runs (core_monitor.readers)")
        reader = load_reader(name)
        assert callable(reader.read_rows)

    def test_resume_must_without_an_earlier_run_raises_and_writes_nothing(
        self, backend_class, make_monitor, read_rows, tmp_path
    ):
        if not Capabilities.of(backend_class).supports_resume:
            pytest.skip("the backend declares no supports_resume=True in its capabilities")
        name = f"absent-{uuid.uuid4().hex[:8]}"
        with pytest.raises(NoRunToResume):
            make_monitor(name=name, resume="must")
        written = sorted(str(p) for p in (tmp_path / "logs").rglob("*") if p.is_file())
        if written:
            pytest.fail(f"resume='must' with no earlier run wrote {written[:5]}: raise "
                        "core_monitor.NoRunToResume in __init__ before creating anything",
                        pytrace=False)

    def test_resume_allow_continues_the_run_and_reports_its_last_step(
        self, backend_class, make_monitor, read_rows
    ):
        if not Capabilities.of(backend_class).supports_resume:
            pytest.skip("the backend declares no supports_resume=True in its capabilities")
        first = make_monitor(name="continued")
        for step in range(3):
            first.log({"loss": float(step)}, step=step)
        first.close()
        second = make_monitor(name="continued", resume="allow")
        found = (second.run.resumed, second.run.last_step)
        if found != (True, 2):
            pytest.fail(f"resume='allow' after a run of steps 0..2: expected Monitor.run "
                        f"(resumed, last_step) (True, 2), got {found}: continue the run of "
                        "run.resume and set the instance attribute last_step to its largest "
                        "step", pytrace=False)
        second.log({"loss": 2.5}, step=2)  # a repeated step is stored as given
        second.log({"loss": 3.0}, step=3)
        second.close()
        steps = sorted(s for t, s, _ in read_rows(second.run) if t == "loss")
        if steps != [0, 1, 2, 2, 3]:
            pytest.fail(f"after resuming, expected the one run to hold steps [0, 1, 2, 2, 3] "
                        f"of 'loss', read_rows returned {steps}", pytrace=False)
