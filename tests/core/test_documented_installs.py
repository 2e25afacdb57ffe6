"""The install commands the documentation gives never let the package index supply one of this
project's own distributions while they are installed from local files.

``pip install --find-links <folder> core-monitor`` also asks the index for ``core-monitor``:
whoever publishes a higher version there gets installed instead (dependency confusion). A
documented install of ours from local files names the files (a wheel's or a folder's path, never
looked up on the index) or says ``--no-index``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "core" / "README.md",
                *ROOT.glob("plugins/*/README.md"), *(ROOT / "docs").rglob("*.md")])
OURS = {"core-monitor", "trackio-monitor", "tensorboard-monitor", "wandb-monitor",
        "mlflow-monitor", "csv-monitor", "comet-monitor"}


def install_commands(page: Path) -> list[tuple[int, str]]:
    """``(line, command)`` of every ``pip install`` in the page's console blocks and text."""
    found = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        for command in re.findall(r"pip install[^`#\n]*", line):
            found.append((number, command))
    return found


def test_the_pages_hold_install_commands():
    assert any(install_commands(page) for page in PAGES)  # the check below checks something
    assert (ROOT / "docs" / "getting-started.md") in PAGES


def holes(pages: list[Path]) -> list[str]:
    """``page:line: command`` of each install of our names with --find-links and no --no-index."""
    found = []
    for page in pages:
        for number, command in install_commands(page):
            words = set(command.split())
            if any(w.startswith("--find-links") for w in words) and words & OURS \
                    and "--no-index" not in words:
                found.append(f"{page}:{number}: {command}")
    return found


def test_no_find_links_install_of_our_names_without_no_index():
    found = holes(PAGES)
    assert not found, ("installs our distributions with --find-links but without --no-index "
                       "(the index could supply them):\n" + "\n".join(found))


def test_the_check_finds_the_hole_it_is_about(tmp_path):
    """The README's former instruction is flagged; its fixed forms are not."""
    page = tmp_path / "page.md"
    page.write_text("```console\n"
                    "pip install --find-links .nox/release/tmp/dist core-monitor trackio-monitor\n"
                    "pip install --no-index --find-links dist core-monitor trackio-monitor\n"
                    "pip install .nox/release/tmp/dist/*.whl\n```\n")
    assert holes([page]) == [f"{page}:2: pip install --find-links .nox/release/tmp/dist "
                             "core-monitor trackio-monitor"]
