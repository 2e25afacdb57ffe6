"""The ``monitors`` command: which backends are installed, and whether they load.

``monitors list`` reads package metadata only: it imports no plugin module and no SDK, so it is
fast and works when a plugin is broken. From metadata it can still flag a plugin whose declared
requirements (its SDK) are not installed. ``monitors list --check`` imports each plugin and runs
its backend class's optional ``check_sdk()`` to prove it loads; its exit status is 1 when one
does not, or when two distributions claim one name (selecting that name would fail). Every
status comes from ``discovery.status``, where the selection rules live.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence

from . import discovery

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
    rows = []
    for name, infos in discovery.installed_backends().items():
        for info in infos:
            status = discovery.status(info, infos, check=check, disabled=disabled)
            rows.append(({
                "name": name,
                "distribution": info.distribution,
                "version": info.version,
                "entry_point": info.target,
                "status": status.text,
            }, status))
    return rows


def _table(rows: list[dict[str, str]]) -> str:
    headers = {"name": "NAME", "distribution": "DISTRIBUTION", "version": "VERSION",
               "entry_point": "ENTRY POINT", "status": "STATUS"}
    widths = {k: max(len(h), *(len(r[k]) for r in rows)) for k, h in headers.items()}
    lines = [headers, *rows]
    return "\n".join(
        "  ".join(line[k].ljust(widths[k]) for k in headers).rstrip() for line in lines
    )


def cmd_list(args: argparse.Namespace) -> int:
    listed = _rows(args.check)
    rows = [row for row, _ in listed]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif rows:
        print(_table(rows))
    else:
        print(NO_BACKENDS)
    broken = [s for _, s in listed if s.state in discovery.FAILING_STATES]
    return 1 if args.check and broken else 0


def cmd_new(args: argparse.Namespace) -> int:
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


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="monitors",
        description="Inspect the experiment-tracker backends installed for core-monitor.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
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
    new.add_argument("name", help="the backend name users will select, e.g. csv")
    new.add_argument("--dir", help="the folder to create (default: ./<name>-monitor)")
    new.set_defaults(handler=cmd_new)
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
