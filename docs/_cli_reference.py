"""The command-line reference, rendered from the ``nas`` parser itself.

Every subcommand (and a subcommand's own subcommands) gets its usage line, its description and
a table of its arguments, read from the parser ``nas_cli.main.build_parser()`` builds, so the
page can never disagree with ``nas COMMAND --help``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

__all__ = ["cli_reference", "commands"]

#: The width usage lines are wrapped at (a terminal's would make the page differ by machine).
WIDTH = 88


def _parser() -> argparse.ArgumentParser:
    from nas_cli.main import build_parser

    return build_parser()


def _subcommands(parser: argparse.ArgumentParser
                 ) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """``(name, one-line help, parser)`` of each subcommand of ``parser``, in declared order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def commands(parser: argparse.ArgumentParser | None = None, prefix: str = "nas"
             ) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """Every command under ``parser`` (default: ``nas``'s), depth first: ``(full name, one-line
    help, parser)``, e.g. ``("nas cost", "build an architecture ...", <parser>)``."""
    out: list[tuple[str, str, argparse.ArgumentParser]] = []
    for name, summary, sub in _subcommands(parser or _parser()):
        out.append((f"{prefix} {name}", summary, sub))
        out.extend(commands(sub, f"{prefix} {name}"))
    return out


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    prefix = "usage: "  # argparse's; continuation lines are indented past it
    lines = formatter.format_help().strip().removeprefix(prefix).splitlines()
    return "\n".join([lines[0], *(line.removeprefix(" " * len(prefix)) for line in lines[1:])])


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%(" in text:  # argparse's own expansion, as --help shows it
        text = text % {**vars(action), "prog": prog}
    return text


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or (
                action.help == argparse.SUPPRESS):
            continue
        if action.option_strings:
            metavar = "" if action.nargs == 0 else " " + (
                action.metavar if isinstance(action.metavar, str) else action.dest.upper())
            name = ", ".join(f"`{flag}{metavar}`" for flag in action.option_strings)
        else:
            name = f"`{action.metavar if isinstance(action.metavar, str) else action.dest}`"
        notes = []
        if action.required and action.option_strings:
            notes.append("required")
        if action.nargs in ("?", "*"):
            notes.append("optional")
        if isinstance(action, argparse._AppendAction) and "repeatable" not in (action.help or ""):
            notes.append("repeatable")
        if action.choices is not None:
            notes.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
        if (action.default not in (None, False, [], argparse.SUPPRESS)
                and action.nargs != 0):
            notes.append(f"default `{action.default}`")
        text = " ".join([_help(action, parser.prog), f"({'; '.join(notes)})" if notes else ""])
        rows.append(f"| {name} | {_cell(text) or '-'} |")
    return rows


def _command_section(name: str, summary: str, parser: argparse.ArgumentParser) -> str:
    level = "#" * (name.count(" ") + 1)  # nas cost: ##, nas data prepare: ###
    lines = [f"{level} `{name}`", "", "```", _usage(parser), "```", ""]
    description = " ".join((parser.description or summary).split())
    if description:
        lines += [description[0].upper() + description[1:].rstrip(".") + ".", ""]
    rows = _argument_rows(parser)
    if rows:
        lines += ["| argument | meaning |", "|---|---|", *rows, ""]
    return "\n".join(lines)


def cli_reference() -> str:
    """The reference of every ``nas`` command, as Markdown: a summary table, then one section
    per command."""
    parser = _parser()
    found = commands(parser)
    top = _argument_rows(parser)
    lines = ["| command | what it does |", "|---|---|"]
    lines += [f"| [`{name}`](#{name.replace(' ', '-')}) | {_cell(summary)} |"
              for name, summary, _ in found]
    lines += ["", "Options of `nas` itself, given before the command "
              "(`nas --debug run ...`):", "", "| argument | meaning |", "|---|---|", *top, ""]
    lines += [_command_section(name, summary, sub) for name, summary, sub in found]
    return "\n".join(lines)
