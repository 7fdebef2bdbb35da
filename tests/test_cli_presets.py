"""``nas presets`` and every ``--help`` answer without building a model or importing the heavy
libraries: the presets' costs come from a table computed once, which this file recomputes, and
each subcommand registers its parser cheaply and imports what it runs only when it runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import nas_cli._preset_costs as pinned
from nas.cost import estimate_cost
from nas.presets import get_preset, list_presets
from nas_cli import presets_cmd
from nas_cli.main import COMMANDS, build_parser, main

#: What neither ``nas presets`` nor any ``--help`` may import.
HEAVY = ("torch", "timm", "optuna", "sqlalchemy", "ray", "dash", "numpy", "sklearn", "pandas")

_CONTRACT_COMMANDS = ["presets", "cost", "train", "run", "resume", "status", "pareto", "promote",
                      "export", "dashboard"]


def test_the_pinned_cost_table_is_what_the_presets_cost_today() -> None:
    computed = presets_cmd.computed_costs()
    assert set(computed) == {i["name"] for i in list_presets()}  # no plugin here: every preset
    assert presets_cmd.render_cost_table(computed) == presets_cmd.TABLE_FILE.read_text(), (
        "nas_cli/_preset_costs.py is stale: run `python -m nas_cli.presets_cmd` to rewrite it")


def test_a_row_is_used_only_while_its_preset_keeps_its_arch_id(monkeypatch, capsys) -> None:
    true_id, task, _, _ = pinned.PRESET_COSTS["deit-tiny"]
    assert true_id == get_preset("deit-tiny").arch_id
    table = dict(pinned.PRESET_COSTS)
    table["deit-tiny"] = (true_id, task, 7, 11)  # the pinned row is what is printed ...
    table["armour-tiny"] = ("000000000000", "cifar100", 13, 17)  # ... unless its preset changed
    monkeypatch.setattr(pinned, "PRESET_COSTS", table)
    assert main(["presets", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert (rows["deit-tiny"]["params"], rows["deit-tiny"]["madds"]) == (7, 11)
    fresh = estimate_cost(get_preset("armour-tiny"))
    armour = rows["armour-tiny"]
    assert (armour["task"], armour["params"], armour["madds"]) == (
        fresh.task, fresh.params, fresh.madds)
    assert fresh.params != 13


def _loaded_after(code: str) -> dict[str, object]:
    script = (
        "import json, sys\n"
        "from nas_cli.main import main\n"
        f"{code}\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "print(json.dumps({'heavy': heavy}), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return {"stdout": done.stdout, **json.loads(done.stderr.strip().splitlines()[-1])}


def test_nas_presets_builds_no_model() -> None:
    seen = _loaded_after("assert main(['presets']) == 0")
    assert seen["heavy"] == []
    row = next(line for line in str(seen["stdout"]).splitlines() if line.startswith("deit-tiny"))
    assert f"{pinned.PRESET_COSTS['deit-tiny'][2]:,}" in row


def _registered() -> list[str]:
    parser = build_parser()
    return list(next(a for a in parser._actions if a.dest == "command").choices)


def test_every_help_imports_nothing_heavy() -> None:
    commands = _registered()
    helps = "\n".join(
        f"try:\n    main({argv!r})\nexcept SystemExit as e:\n    assert e.code == 0, {argv!r}"
        for argv in [["--help"], *([c, "--help"] for c in commands)])
    seen = _loaded_after(helps)
    assert seen["heavy"] == []
    assert all(f"usage: nas {c}" in str(seen["stdout"]) for c in commands)


def test_every_command_registers_itself() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    # the contract's commands, in --help's order (a new command may come anywhere)
    assert [c for c in sub.choices if c in _CONTRACT_COMMANDS] == _CONTRACT_COMMANDS
    assert len(COMMANDS) == len({m.__name__ for m in COMMANDS})
    for name, command_parser in sub.choices.items():
        assert callable(command_parser.get_default("func")), name


@pytest.mark.parametrize("argv", [["cost", "deit-tiny", "--json"], ["presets"]])
def test_the_commands_still_run(argv, capsys) -> None:
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "deit-tiny" in out or json.loads(out)["params"] == pinned.PRESET_COSTS["deit-tiny"][2]
