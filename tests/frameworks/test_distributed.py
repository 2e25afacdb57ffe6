"""torchrun --nproc_per_node 2 (gloo): what each rank imports and writes; ``reduce=``."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import readback
from _run import SCRIPTS, free_port, load, run_script, script_env

from core_monitor import ConfigError, Monitor, RunInfo

BACKENDS = list(readback.BACKENDS)
SDKS = ("trackio", "tensorboard", "wandb", "tensorboardX", "gradio", "huggingface_hub")
FRAMEWORKS = ("torch", "deepspeed", "accelerate", "lightning", "pytorch_lightning",
              "transformers")


def imported(modules: list[str], package: str) -> bool:
    return any(m == package or m.startswith(package + ".") for m in modules)


def ranks(out: Path) -> list[dict]:
    return [load(Path(f"{out}.rank{k}.json")) for k in (0, 1)]


def run_of(result: dict, rank: int = 0) -> RunInfo:
    run = result["run"]
    return RunInfo(project=run["project"], name=run["name"], log_dir=Path(run["log_dir"]),
                   rank=rank)


# What users get (writer processes): torchrun's one run in the users' default dispatch.
@pytest.mark.process
def test_rank_1_imports_no_sdk_and_writes_nothing(log_dir, tmp_path):
    out = tmp_path / "out"
    run_script("dist_monitor.py", "plain", log_dir, out, nproc=2)
    zero, one = ranks(out)
    assert (zero["run"]["rank"], one["run"]["rank"]) == (0, 1)
    assert zero["backends"] == BACKENDS and one["backends"] == []
    loaded = [m for m in SDKS + FRAMEWORKS if imported(one["modules"], m)]
    assert loaded == [], f"rank 1 imported {loaded}"
    assert not imported(zero["modules"], "torch")  # the core never imports torch
    for backend in BACKENDS:
        readback.assert_rows(backend, run_of(zero), [("loss", 3, 0.5)])
        assert readback.runs(backend, run_of(zero)) == 1
        assert readback.runs(backend, run_of(zero, rank=1)) == 0


def test_a_misspelt_option_is_the_same_config_error_on_both_ranks(log_dir, tmp_path):
    out = tmp_path / "out"
    run_script("dist_monitor.py", "typo", log_dir, out, nproc=2)
    zero, one = ranks(out)
    assert zero["error"][0] == "ConfigError" and "'flush_sec'" in zero["error"][1]
    assert one["error"] == zero["error"]


def test_accelerate_a_misspelt_option_is_the_same_config_error_on_both_ranks(log_dir, tmp_path):
    out = tmp_path / "out"
    run_script("dist_monitor.py", "accelerate_typo", log_dir, out, nproc=2)
    zero, one = ranks(out)
    assert zero["error"][0] == "ConfigError" and "'flush_sec'" in zero["error"][1]
    assert one["error"] == zero["error"]  # was: rank 0 alone, in init_trackers


def test_rank_zero_only_false_writes_one_run_per_rank_in_every_backend(log_dir, tmp_path):
    out = tmp_path / "out"
    run_script("dist_monitor.py", "per_rank", log_dir, out, nproc=2)
    zero, one = ranks(out)
    assert zero["backends"] == BACKENDS and one["backends"] == BACKENDS
    for result, rank in ((zero, 0), (one, 1)):
        run = run_of(result, rank=rank)
        for backend in BACKENDS:
            assert readback.runs(backend, run) == 1, (backend, rank)
            readback.assert_rows(backend, run,
                                 [("value", step, float(rank + step)) for step in range(3)])
        # The ranks' runs are one job's: wandb groups them under the run name.
        from wandb_monitor.reader import _run_record, run_folders

        (folder,) = run_folders(run)
        assert _run_record(folder).run_group == "ranks", rank


def test_reduce_mean_max_sum_min_store_the_reduced_values_in_every_backend(log_dir, tmp_path):
    out = tmp_path / "out"
    run_script("dist_monitor.py", "reduce", log_dir, out, nproc=2)
    zero, one = ranks(out)
    assert one["backends"] == []
    expected = [("m", 5, 2.0), ("x", 5, 3.0), ("x", 6, 4.0), ("s", 7, 4.0), ("n/min", 7, 4.0)]
    for backend in BACKENDS:
        readback.assert_rows(backend, run_of(zero), expected)
        assert readback.runs(backend, run_of(zero, rank=1)) == 0


@pytest.mark.process
def test_the_slowest_rank_is_named_and_both_ranks_are_sampled(log_dir, tmp_path):
    """Rank 1 is slow on purpose: ``reduce="ranks"`` stores, from rank 0, which rank held the
    longest step time, and the system samples of the node cover both ranks' processes."""
    out = tmp_path / "out"
    run_script("dist_monitor.py", "slowest", log_dir, out, nproc=2)
    zero, one = ranks(out)
    assert one["backends"] == []
    for backend in BACKENDS:
        stored = readback.rows(backend, run_of(zero))
        view = {(tag, step): value for tag, step, value in stored
                if tag.startswith("step_time/")}
        for step in range(4):
            assert view[("step_time/max_rank", step)] == 1.0, (backend, view)
            assert view[("step_time/min_rank", step)] == 0.0, (backend, view)
            slow, fast = view[("step_time/rank1", step)], view[("step_time/rank0", step)]
            assert slow > fast + 0.2, (backend, view)
            assert readback.same_value(backend, view[("step_time/max", step)], slow)
            assert readback.same_value(backend, view[("step_time/min", step)], fast)
            assert math.isclose(view[("step_time/median", step)], (slow + fast) / 2,
                                rel_tol=1e-6)
        assert ("warmup", 0) in {(t, s) for t, s, _ in stored}
        processes = [v for t, _, v in stored if t == "system/processes"]
        assert max(processes) == 2.0, (backend, processes)  # rank 0 and rank 1
        assert not any(t.startswith("system/node") for t, _, _ in stored)  # one node


def two_nodes(scenario: str, log_dir: Path, out: Path) -> tuple[dict, dict]:
    """``dist_monitor.py scenario`` in two torchrun launches on 127.0.0.1 as two nodes
    (``--nnodes 2 --node_rank 0|1``), one process each; each rank's result."""
    port = str(free_port())
    launches = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank",
         str(node), "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port",
         port, str(SCRIPTS / "dist_monitor.py"), scenario, str(log_dir), str(out)],
        env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for node in (0, 1)]
    outputs = [launch.communicate(timeout=480)[0] for launch in launches]
    assert [launch.returncode for launch in launches] == [0, 0], outputs
    zero, one = ranks(out)
    return zero, one


@pytest.mark.process
def test_two_nodes_label_their_samples_and_runs(log_dir, tmp_path):
    """Two nodes, every rank writing: each run's config names its node and host, its system
    samples carry the node label, and the two runs are one job's group."""
    import socket

    from wandb_monitor.reader import _run_record, run_folders

    zero, one = two_nodes("nodes", log_dir, tmp_path / "out")

    for result, node in ((zero, 0), (one, 1)):
        run = run_of(result, rank=node)
        for backend in BACKENDS:
            config = readback.config(backend, run)
            if backend != "tensorboard" or node == 0:  # its reader reads rank 0's hparams
                assert config["job.node_rank"] == node, (backend, config)
                assert config["job.nodes"] == 2 and config["job.host"] == socket.gethostname()
            tags = {tag for tag, _, _ in readback.rows(backend, run)}
            assert f"system/node{node}/cpu_percent" in tags, (backend, tags)
            assert not any(t.startswith(("system/cpu", f"system/node{1 - node}/"))
                           for t in tags), (backend, tags)
        (folder,) = run_folders(run)
        assert _run_record(folder).run_group == "nodes", node


@pytest.mark.process
def test_two_nodes_one_run_holds_every_nodes_samples(log_dir, tmp_path):
    """Two nodes, rank 0 writing (the default): node 1's sampler sends its samples through the
    job's store, and rank 0's one run holds both nodes' samples, each under its node label."""
    zero, one = two_nodes("one_run", log_dir, tmp_path / "out")
    assert one["backends"] == []
    for backend in BACKENDS:
        stored = readback.rows(backend, run_of(zero))
        for node in (0, 1):
            steps = sorted(s for t, s, _ in stored if t == f"system/node{node}/cpu_percent")
            assert len(steps) >= 2 and steps == list(range(len(steps))), (backend, node, steps)
        assert readback.runs(backend, run_of(zero, rank=1)) == 0


def test_mismatched_tags_raise_the_documented_error_on_both_ranks_without_a_hang(
        log_dir, tmp_path):
    out = tmp_path / "out"
    run_script("dist_monitor.py", "mismatch", log_dir, out, nproc=2, timeout=180)
    zero, one = ranks(out)
    for result, rank in ((zero, 0), (one, 1)):
        name, message = result["error"]
        assert name == "TagMismatchError"
        assert "different tags on different ranks" in message
        assert f"rank {rank} of 2" in message and "nothing of this call was logged" in message
    for backend in BACKENDS:
        readback.assert_rows(backend, run_of(zero), [("c", 0, 1.0), ("c", 2, 2.5)])


def test_reduce_without_a_process_group_and_world_size_1_is_a_no_op(log_dir):
    with Monitor(["tensorboard"], project="p", name="solo", log_dir=log_dir) as monitor:
        monitor.log({"a": 1.5, "b": {"c": 2}}, step=4, reduce="mean")
    readback.assert_rows("tensorboard", monitor.run, [("a", 4, 1.5), ("b/c", 4, 2.0)])


def test_reduce_with_world_size_2_but_no_process_group_is_a_clear_error(log_dir, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with Monitor(["tensorboard"], project="p", name="nopg", log_dir=log_dir) as monitor:
        with pytest.raises(ConfigError, match=r"WORLD_SIZE=2.*init_process_group"):
            monitor.log({"a": 1.0}, step=0, reduce="mean")
        with pytest.raises(ConfigError, match="'avg'"):
            monitor.log({"a": 1.0}, step=0, reduce="avg")
        monitor.log({"a": 1.0}, step=1)  # nothing was lost; the monitor goes on
    readback.assert_rows("tensorboard", monitor.run, [("a", 1, 1.0)])


def modules_after(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code + "\nimport json, sys\n"
                           "print(json.dumps(sorted(sys.modules)))"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_core_and_monitors_list_import_no_framework():
    modules = modules_after("import core_monitor, core_monitor.integrations\n"
                            "from core_monitor.cli import main\n"
                            "import contextlib, io\n"
                            "with contextlib.redirect_stdout(io.StringIO()):\n"
                            "    main(['list'])")
    assert [f for f in FRAMEWORKS if imported(modules, f)] == []


@pytest.mark.parametrize(("module", "framework", "statement"), [
    ("accelerate", "accelerate", "import accelerate.tracking"),
    ("lightning", "lightning", "import lightning.pytorch"),
    ("transformers", "transformers", "from transformers import TrainerCallback"),
    ("deepspeed", "deepspeed", "import deepspeed")])
def test_each_integration_imports_its_own_framework_only(module, framework, statement):
    """Beyond what the framework itself imports (Lightning imports transformers when it is
    installed; the Trainer imports accelerate), an integration imports no other framework."""
    modules = modules_after(f"import core_monitor.integrations.{module}")
    assert imported(modules, framework)
    own = modules_after(statement)
    others = [f for f in FRAMEWORKS if imported(modules, f) and not imported(own, f)]
    assert others == []
