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


# Every documented install and `monitors` command can work as written ----------------------
#
# Until this project's distributions are on the package index, an install of them by name
# (`pip install core-monitor ...`) cannot work: the page must say so on that line (or in that
# paragraph) with "once published". An install by path must name a folder of this repository
# (or one an earlier command of the page writes, `monitors new`), with extras that folder
# declares. A `monitors` command must parse with the CLI's own parser, a `nox -s` command must
# name a session of noxfile.py. The first install of the README and of Getting started is run
# for real in a fresh venv by tests/integration/test_documented_install.py.

#: Not yet on the package index (tests/release/test_check_dists.py checks what a release holds).
PUBLISHED = False
COMMAND = re.compile(r"^(?:python3? -m |uv )?(pip install|monitors|nox)\b")
ONCE_PUBLISHED = re.compile(r"once\s+(?:\S+\s+){0,6}?published", re.IGNORECASE)


def our_distributions() -> dict[str, Path]:
    """Distribution name -> its folder, from each folder's pyproject.toml."""
    found = {}
    for pyproject in [ROOT / "core" / "pyproject.toml", *ROOT.glob("plugins/*/pyproject.toml")]:
        name = re.search(r'^name = "([^"]+)"', pyproject.read_text(), re.MULTILINE)
        assert name is not None, pyproject
        found[name.group(1)] = pyproject.parent
    return found


def declared_extras(folder: Path) -> set[str]:
    text = (folder / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)
    if len(section) == 1:
        return set()
    body = section[1].split("\n[", 1)[0]
    return set(re.findall(r"^([A-Za-z0-9_-]+)\s*=", body, re.MULTILINE))


def nox_sessions() -> set[str]:
    text = (ROOT / "noxfile.py").read_text()
    return set(re.findall(r"@nox\.session[^\n]*\n(?:@[^\n]*\n)*def (\w+)", text))


def documented_commands(page: Path) -> list[tuple[int, str, str]]:
    """``(line, command, context)`` of every install, ``monitors`` and ``nox`` command of a
    page: each line (each ``&&`` part) of its console/bash blocks, and each inline code span of
    its prose. ``context`` is the block line or the prose paragraph (for "once published")."""
    found: list[tuple[int, str, str]] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    fence: str | None = None
    paragraph: list[tuple[int, str]] = []

    def prose(part: list[tuple[int, str]]) -> None:
        text = " ".join(line for _, line in part)
        for span in re.finditer(r"`([^`]+)`", text):
            command = span.group(1).strip()
            if COMMAND.match(command):
                number = part[0][0] + _line_of(part, span.start())
                sentence = text[text.rfind(". ", 0, span.start()) + 1:]
                sentence = sentence[:sentence.find(". ", span.end() - len(text))] \
                    if ". " in sentence[span.end() - len(text):] else sentence
                found.extend((number, c.strip(), sentence) for c in command.split("&&")
                             if COMMAND.match(c.strip()))

    continued = ""
    for number, line in enumerate(lines, start=1):
        if fence is not None and line.rstrip().endswith("\\"):  # a shell line continued
            continued += line.rstrip()[:-1] + " "
            continue
        line, continued = continued + line, ""
        stripped = line.strip()
        if stripped.startswith("```"):
            if fence is None:
                prose(paragraph)
                paragraph = []
                fence = stripped[3:].strip() or "text"
            else:
                fence = None
            continue
        if fence is not None:
            if fence in ("console", "bash", "sh", "shell"):
                command = stripped.split(" # ")[0].strip()
                for part in command.split("&&"):
                    if COMMAND.match(part.strip()):
                        found.append((number, part.strip(), line))
            continue
        if stripped:
            paragraph.append((number, line))
        else:
            prose(paragraph)
            paragraph = []
    prose(paragraph)
    return found


def _line_of(part: list[tuple[int, str]], offset: int) -> int:
    """How many lines of ``part`` (joined with spaces) lie before character ``offset``."""
    seen = 0
    for index, (_, line) in enumerate(part):
        seen += len(line) + 1
        if offset < seen:
            return index
    return len(part) - 1


def problems(page: Path, number: int, command: str, context: str,
             generated: set[str]) -> list[str]:
    """Why ``command`` (from ``page``) cannot work as written; ``[]`` when it can.
    ``generated``: folders an earlier ``monitors new`` of the page writes."""
    import shlex

    where = f"{page}:{number}"
    try:
        words = shlex.split(command)
    except ValueError:  # a fragment quoted in prose
        words = command.split()
    while words and words[0] in ("python", "python3", "-m", "uv"):
        words = words[1:]
    tool = words[0]
    found: list[str] = []
    if tool == "monitors":
        from core_monitor.cli import build_parser

        parser = build_parser()
        if len(words) == 2 or "[" in command:  # a name (`monitors copy`) or a synopsis
            words = [*words[:2], "--help"]
        try:
            parser.parse_args(words[1:])
        except SystemExit as exit:
            if exit.code:
                found.append(f"{where}: `{command}`: the monitors CLI refuses it")
        if words[1:2] == ["new"] and len(words) > 2 and not words[2].startswith("<"):
            generated.add(f"{words[2]}-monitor")
        return found
    if tool == "nox":
        if "-s" in words:
            session = words[words.index("-s") + 1].split("(")[0]  # "plugin(name='wandb')"
            if session not in nox_sessions():
                found.append(f"{where}: `{command}`: noxfile.py has no session {session!r}")
        return found
    ours = our_distributions()
    skip_next = False
    for word in words[2:]:  # after `pip install`
        if skip_next:
            skip_next = False
            continue
        if word.startswith("-"):
            skip_next = word in ("--find-links", "-f", "-r", "--requirement", "-c",
                                 "--constraint", "--python", "--index-url", "-i")
            continue
        if "<" in word:  # a placeholder in a quoted message (`pip install <backend>-monitor`)
            continue
        target, _, extras = word.partition("[")
        extras_wanted = set(filter(None, extras.rstrip("]").split(",")))
        if target.endswith(".whl"):
            dist = Path(target).name.split("-")[0].replace("_", "-")
            if target.startswith(".nox/release/") and "nox -s release" not in \
                    page.read_text(encoding="utf-8"):
                found.append(f"{where}: `{command}`: the page never builds {target}")
            elif dist not in ours and "*" not in dist and dist not in generated:
                found.append(f"{where}: `{command}`: {target} is not a wheel of ours")
            continue
        if "/" in target or target.startswith("."):
            folder = (ROOT / target).resolve()
            if Path(target).name in generated:
                continue
            if not (folder / "pyproject.toml").is_file():
                found.append(f"{where}: `{command}`: {target} is not a folder of this "
                             "repository with a pyproject.toml")
                continue
            missing = extras_wanted - declared_extras(folder)
            if missing:
                found.append(f"{where}: `{command}`: {target} declares no extra {sorted(missing)}")
            continue
        name = target.lower().replace("_", "-")
        if name in ours:
            if not PUBLISHED and "--no-index" not in words and not ONCE_PUBLISHED.search(context):
                found.append(f"{where}: `{command}`: {name} is not on the package index yet; "
                             "install it by path from a clone, or say `once published`")
            missing = extras_wanted - declared_extras(ours[name])
            if missing:
                found.append(f"{where}: `{command}`: {name} declares no extra {sorted(missing)}")
    return found


def page_problems(page: Path) -> list[str]:
    generated: set[str] = set()
    found = []
    for number, command, context in documented_commands(page):
        found.extend(problems(page, number, command, context, generated))
    return found


def test_every_documented_command_can_work_as_written():
    commands = [c for page in PAGES for c in documented_commands(page)]
    assert len(commands) > 30  # the check below checks something
    found = [p for page in PAGES for p in page_problems(page)]
    assert not found, "documented commands that cannot work as written:\n" + "\n".join(found)


def test_the_command_check_finds_each_kind_of_broken_command(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```console\n"
        "pip install core-monitor trackio-monitor      # the core and one backend\n"
        "pip install core-monitor   # once published\n"
        "python3 -m pip install ./core ./plugins/trackio_monitor\n"
        "python3 -m pip install ./plugins/nothing_monitor\n"
        "pip install './core[nothing]'\n"
        "monitors list --check\n"
        "monitors lsit\n"
        "python3 -m pip install nox uv && python3 -m nox -s demo\n"
        "python3 -m nox -s nothing\n"
        "```\n\n"
        "Or `pip install \"core-monitor[lightning]\"`. Or\n"
        "`pip install wandb-monitor` once it is published.\n")
    found = page_problems(page)
    assert [line.split(": `")[0].rsplit(":", 1)[1] for line in found] == \
        ["2", "2", "5", "6", "8", "10", "13"], found
    assert "trackio-monitor is not on the package index" in found[1]
    assert "nothing_monitor is not a folder" in found[2]
    assert "declares no extra ['nothing']" in found[3]
    assert "refuses it" in found[4]
    assert "no session 'nothing'" in found[5]


def first_install(page: Path) -> str:
    """The first command of a page that installs a distribution of ours (by name or path)."""
    ours = our_distributions()
    return next(c for _, c, _ in documented_commands(page) if "pip install" in c
                and any(w.split("[")[0] in ours or w.startswith("./") for w in c.split()))


def test_readme_and_getting_started_lead_with_an_install_from_the_clone():
    command = first_install(ROOT / "README.md")
    assert command == first_install(ROOT / "docs" / "getting-started.md")
    assert command == first_install(ROOT / "docs" / "index.md")
    assert command == "python3 -m pip install ./core ./plugins/trackio_monitor"


def test_the_install_pages_name_every_plugin_folder():
    """"The other backends are ..." named six of ten: each page that says how to install names
    the folder of every plugin in the repository."""
    folders = sorted(f"./plugins/{p.parent.name}" for p in ROOT.glob("plugins/*/pyproject.toml"))
    assert len(folders) >= 10
    for page in (ROOT / "README.md", ROOT / "docs" / "index.md",
                 ROOT / "docs" / "getting-started.md"):
        text = page.read_text(encoding="utf-8")
        missing = [folder for folder in folders
                   if not re.search(re.escape(folder) + r"(?![\w])", text)]
        assert not missing, f"{page} does not name {missing}"
