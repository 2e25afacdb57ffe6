"""The ``monitors`` command: which backends are installed, and whether they load.

``monitors list`` reads package metadata only: it imports no plugin module and no SDK, so it is
fast and works when a plugin is broken. From metadata it can still flag a plugin whose declared
requirements (its SDK) are not installed. ``monitors list --check`` imports each plugin and runs
its backend class's optional ``check_sdk()`` to prove it loads; its exit status is 1 when one
does not, or when two distributions claim one name (selecting that name would fail). Every
status comes from ``discovery.status``, where the selection rules live. The ``READER`` column
names the reader module a backend declares (``core_monitor.readers``): those backends can be a
``monitors copy`` source.

``monitors copy SOURCE DEST --project P --name RUN`` copies one run between backends
(``core_monitor.copying``); its exit status is 1 when something did not arrive.

``monitors sync JOURNAL`` delivers a run's journal past each backend's cursor
(``core_monitor.syncing``); exit status 1 when a backend failed.

``monitors list`` is timed against the interpreter's own start (benchmark B4): it imports
``discovery`` and ``plugins`` only, and reads the entry points once. What another command or
option needs is imported inside its function.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from . import discovery
from .plugins import installed_plugins

#: What ``monitors list`` says when nothing is installed. The core names no backend: each is a
#: distribution of its own, found only through its entry point.
NO_BACKENDS = (
    "No backend is installed. A backend is a distribution declaring an entry point in the "
    f"group {discovery.GROUP!r}, usually named after its tracker: `pip install <tracker>-monitor`. "
    "`monitors new NAME` writes a new one."
)


def _rows(check: bool) -> list[tuple[dict[str, str], discovery.Status]]:
    """One (printed row, status) per installed backend and distribution claiming it."""
    disabled = discovery.disabled_names()
    plugins = installed_plugins()  # read once: each record holds the backend and its reader
    # ``readers.installed_readers()`` over these records (that module imports ``inspect``)
    reader_of = {name: plugin.reader for name, claims in plugins.items()
                 for plugin in claims if plugin.reader is not None}
    rows = []
    for name, infos in discovery.installed_backends(plugins).items():
        for info in infos:
            status = discovery.status(info, infos, check=check, disabled=disabled)
            rows.append(({
                "name": name,
                "distribution": info.distribution,
                "version": info.version,
                "entry_point": info.target,
                "reader": reader_of.get(name, "-"),
                "status": status.text,
            }, status))
    return rows


def _table(rows: list[dict[str, str]]) -> str:
    headers = {"name": "NAME", "distribution": "DISTRIBUTION", "version": "VERSION",
               "entry_point": "ENTRY POINT", "reader": "READER", "status": "STATUS"}
    widths = {k: max(len(h), *(len(r[k]) for r in rows)) for k, h in headers.items()}
    lines = [headers, *rows]
    return "\n".join(
        "  ".join(line[k].ljust(widths[k]) for k in headers).rstrip() for line in lines
    )


def cmd_list(args: argparse.Namespace) -> int:
    listed = _rows(args.check)
    rows = [row for row, _ in listed]
    if args.json:
        import json

        print(json.dumps(rows, indent=2))
    elif rows:
        print(_table(rows))
    else:
        print(NO_BACKENDS)
    broken = [s for _, s in listed if s.state in discovery.FAILING_STATES]
    return 1 if args.check and broken else 0


def cmd_new(args: argparse.Namespace) -> int:
    import shlex

    from .scaffold import ScaffoldError, create_plugin, plugin_names

    try:
        folder = create_plugin(args.name, args.dir)
    except ScaffoldError as error:
        print(f"monitors new: error: {error}", file=sys.stderr)
        return 2
    names = plugin_names(args.name)
    where = shlex.quote(str(folder))
    print(f"Created {names.dist} in {folder}: backend {names.name!r}, class "
          f"{names.package}.{names.cls}.\n"
          f"Test it (installs the plugin, pytest and the contract kit, then runs the kit):\n"
          f"    pip install {shlex.quote(f'{folder}[test]')} && pytest {where}\n"
          f"Then `monitors list --check` shows {names.name!r}.")
    return 0


def cmd_copy(args: argparse.Namespace) -> int:
    from .copying import CopyError, copy_run, parse_options
    from .errors import ConfigError

    try:
        report = copy_run(
            args.source, args.dest, project=args.project, name=args.name,
            log_dir=args.log_dir, to_log_dir=args.to_log_dir, to_project=args.to_project,
            to_name=args.to_name,
            source_options=parse_options(args.source_option, "--source-option"),
            dest_options=parse_options(args.dest_option, "--dest-option"),
            dry_run=args.dry_run,
        )
    except (ConfigError, CopyError) as error:
        print(f"monitors copy: error: {error}", file=sys.stderr)
        return 2
    return 0 if report.complete else 1


def cmd_sync(args: argparse.Namespace) -> int:
    from .copying import parse_options
    from .errors import ConfigError
    from .syncing import SyncError, sync_journal

    try:
        options = {name: parse_options(args.to_option, "--to-option") for name in args.to or ()}
        report = sync_journal(args.journal, to=args.to or (), options=options,
                              follow=args.follow, progress=not args.quiet,
                              say=lambda text: print(f"monitors sync: {text}"))
    except (ConfigError, SyncError) as error:
        print(f"monitors sync: error: {error}", file=sys.stderr)
        return 2
    return 0 if report.complete else 1


class _Version(argparse.Action):
    """``--version``: argparse's ``version`` action, but the installed version is looked up
    (``core_monitor.__version__``, a search of ``sys.path``) only when the option is given."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS,
                 help: str = "show program's version number and exit") -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from . import __version__

        print(f"{parser.prog} {__version__}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monitors",
        description="Inspect the experiment-tracker backends installed for core-monitor.",
    )
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    listing = commands.add_parser(
        "list",
        help="list installed backends (reads metadata only; imports nothing)",
        description="List the backends declared in the entry-point group "
        f"{discovery.GROUP!r}: name, distribution, version, entry point, status.",
    )
    listing.add_argument("--json", action="store_true", help="print JSON for machines")
    listing.add_argument(
        "--check", action="store_true",
        help="import each backend and run its check_sdk() to prove it loads; exit 1 if one "
        "does not, or if two distributions claim one name",
    )
    listing.set_defaults(handler=cmd_list)
    new = commands.add_parser(
        "new",
        help="write a new backend plugin distribution to start from",
        description="Write a complete backend plugin in five files: pyproject.toml with the "
        "entry point, src/<name>_monitor/__init__.py (the backend class and its reader) with "
        "py.typed, a README and a test file running core-monitor's contract kit. It builds "
        "into a wheel and passes the kit as written.",
    )
    new.add_argument("name", help="the backend name users will select, e.g. my-tracker")
    new.add_argument("--dir", help="the folder to create (default: ./<name>-monitor)")
    new.set_defaults(handler=cmd_new)
    copy = commands.add_parser(
        "copy",
        help="copy one run from a backend with a reader to any backend, step-exact",
        description="Read one run through SOURCE's reader (every scalar at its step, the "
        "config, the media) and log it through a Monitor to DEST; then read DEST back and "
        "print one line per kind. Exit status 1 when something did not arrive, 2 on an "
        "error. `monitors list` shows which backends have a reader.",
    )
    copy.add_argument("source", help="the backend to read from, e.g. tensorboard")
    copy.add_argument("dest", help="the backend to write to, e.g. trackio")
    copy.add_argument("--project", required=True, help="the run's project")
    copy.add_argument("--name", required=True, help="the run's name")
    copy.add_argument("--log-dir", help="the source run's log_dir (default: the SDK's own)")
    copy.add_argument("--to-log-dir", help="the destination's log_dir (default: --log-dir)")
    copy.add_argument("--to-project", help="the destination project (default: --project)")
    copy.add_argument("--to-name", help="the destination run name (default: --name)")
    copy.add_argument("--source-option", action="append", metavar="K=V",
                      help="an option of the source reader, e.g. tracking_uri=http://... "
                      "(V read as JSON when it is JSON); repeatable")
    copy.add_argument("--dest-option", action="append", metavar="K=V",
                      help="an option of the destination backend, e.g. mode=offline; "
                      "repeatable")
    copy.add_argument("--dry-run", action="store_true",
                      help="read the source, print what would be copied, write nothing")
    copy.set_defaults(handler=cmd_copy)
    sync = commands.add_parser(
        "sync",
        help="deliver a run's journal to its backends, from each backend's cursor",
        description="Deliver what the run journal JOURNAL holds past each backend's cursor "
        "(how far its tracker confirmed), continuing the same run in each backend, then move "
        "the cursors: run twice, nothing is delivered twice. Exit status 1 when a backend "
        "failed (its cursor stays), 2 on an error.",
    )
    sync.add_argument("journal", help="the run's journal folder, e.g. "
                      "runs/.journal/PROJECT/RUN (the path the close() warning names)")
    sync.add_argument("--to", action="append", metavar="NAME",
                      help="deliver to this installed backend instead of the run's own (its "
                      "own cursor); repeatable")
    sync.add_argument("--to-option", action="append", metavar="K=V",
                      help="an option of the --to backends, e.g. tracking_uri=http://...; "
                      "repeatable")
    sync.add_argument("--follow", action="store_true",
                      help="deliver a live run as it is written, until its monitor closes")
    sync.add_argument("--quiet", action="store_true", help="no progress bar")
    sync.set_defaults(handler=cmd_sync)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``monitors`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return int(args.handler(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
