"""B4 ``monitors list`` start-up: wall time, and which SDK modules it imports.

A = the ``monitors list`` console script (all three plugins installed).
B = ``python -c "import importlib.metadata"``: the interpreter start plus the one module
    ``monitors list`` cannot do without.
Target: A/B <= 1.5; no SDK or plugin module imported.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness import BACKENDS, alternate, paired, spread

TARGET_RATIO = 1.5
#: Top-level modules ``monitors list`` must not import: the SDKs, their heavy dependencies and
#: the plugins themselves (importing a plugin imports its SDK).
FORBIDDEN = (
    "trackio", "wandb", "tensorboard", "tensorboardX", "gradio", "gradio_client",
    "huggingface_hub", "numpy", "torch", "google", "grpc", "pydantic", "httpx",
    "trackio_monitor", "tensorboard_monitor", "wandb_monitor",
)

_MODULES_AFTER_LIST = """
import contextlib, io, json, sys
before = set(sys.modules)
from core_monitor.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["list"])
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _monitors_script() -> str:
    script = Path(sys.executable).with_name("monitors")
    if script.exists():
        return str(script)
    found = shutil.which("monitors")
    if found is None:
        raise FileNotFoundError("the `monitors` console script is not installed next to "
                                f"{sys.executable} nor on PATH")
    return found


def _wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


_SCAN_C = (
    "import importlib.metadata as m\n"
    "for ep in m.entry_points(group='experiment_monitors'):\n"
    "    ep.dist.metadata['Name'], ep.dist.version"
)


def run(quick: bool, root: Path) -> dict[str, Any]:
    reps = 10 if quick else 40
    monitors = _monitors_script()
    listed = json.loads(subprocess.run([monitors, "list", "--json"], check=True,
                                       capture_output=True, text=True).stdout)
    names = sorted({row["name"] for row in listed})
    missing = [b for b in BACKENDS if b not in names]
    commands = {
        # the figure: the console script vs the interpreter plus importlib.metadata
        "list": [monitors, "list"],
        "python": [sys.executable, "-c", "import importlib.metadata"],
        # diagnostic: the floor of any metadata-only listing (the entry-point scan itself)
        "scan": [sys.executable, "-c", _SCAN_C],
    }
    for argv in commands.values():
        _wall(argv)  # warm the page cache; fails loudly if a command fails
    arms = {k: (lambda argv=argv: _wall(argv)) for k, argv in commands.items()}
    times = alternate(arms, reps)
    stats = paired(times["list"], times["python"], per=1)

    imported = json.loads(subprocess.run([sys.executable, "-c", _MODULES_AFTER_LIST],
                                         check=True, capture_output=True, text=True).stdout)
    forbidden = sorted(m for m in imported if m.split(".")[0] in FORBIDDEN)
    return {
        "workload": f"{reps} runs of each command, alternating; {monitors} list",
        "backends_listed": names,
        "backends_missing": missing,
        "ratio": stats["ratio"],
        "ms": {k: spread([t * 1000 for t in v]) for k, v in times.items()},
        "list_ms": spread([t * 1000 for t in times["list"]]),
        "python_ms": spread([t * 1000 for t in times["python"]]),
        "scan_over_python": paired(times["scan"], times["python"], per=1)["ratio"],
        "modules_imported_by_list": len(imported),
        "sdk_modules_imported": forbidden,
        "slowest_imports_ms": _slowest_imports(),
        "target": f"ratio <= {TARGET_RATIO}; no SDK module imported",
        "pass": stats["ratio"]["median"] <= TARGET_RATIO and not forbidden and not missing,
    }


def _slowest_imports(top: int = 8) -> list[list[Any]]:
    """What ``monitors list`` spends its import time on (``python -X importtime``): the
    modules imported directly by ``core_monitor.cli`` and by ``core_monitor`` (and the
    interpreter's own start-up), by cumulative milliseconds."""
    code = "import sys; from core_monitor.cli import main; sys.exit(main())"
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code, "list"],
                         capture_output=True, text=True, check=False).stderr
    rows = []
    for line in err.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) != 3 or not fields[1].strip().isdigit():
            continue
        name = fields[2].rstrip()[1:]  # one space, then two per nesting level
        depth = (len(name) - len(name.lstrip())) // 2
        if depth <= 2:
            rows.append([name.strip(), int(fields[1]) / 1000])
    return sorted(rows, key=lambda r: -r[1])[:top]
