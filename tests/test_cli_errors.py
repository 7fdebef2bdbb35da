"""Bad input: exit code 2, one line on stderr naming the problem, nothing on stdout."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nas_cli.main import main


@pytest.fixture()
def bad_yaml(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("family: mcan\nd_model: [512\n")
    return str(path)


CASES = [
    (["cost", "mcan-small", "--set", "colour=red"], "colour"),
    (["cost", "mcan-small", "--set", "groups=two"], "groups='two'"),
    (["cost", "mcan-small", "--set", "groups=3"], "groups=3"),
    (["cost", "mcan-small", "--set", "heads=0"], "heads >= 1"),
    (["cost", "mcan-small", "--set", "attention_sharing=qv"], "self-attention only"),
    (["cost", "mcan-small", "--set", "radix_base=768"], "text decoder"),
    (["cost", "mcan-small", "--set", "layer_sharing=(0x5)"], "length 5"),
    (["cost", "mcan-small", "--set", "layer_sharing={cross: (0x6)}"], "'cross'"),
    (["cost", "lw-1x", "--set", "qk_multiplier=3", "--set", "attention_sharing=kv"],
     "qk_multiplier=1"),
    (["cost", "mcan-small", "--set", "groups"], "KEY=VALUE"),
    (["cost", "no-such-preset"], "no-such-preset"),
    (["cost", "missing-file.yaml"], "missing-file.yaml"),
    (["cost", "mcan-small", "--task", "imagenet"], "imagenet"),
    (["cost", "mcan-small", "--task", "nowhere"], "nowhere"),
    (["cost", "swin-tiny", "--set", "layer_sharing=(0x2)"], "swin"),
    (["cost"], "ARCH"),
    (["frobnicate"], "frobnicate"),
    (["train", "deit-tiny", "--task", "digits", "--out", "/dev/null/ckpt"], "'/dev/null'"),
]


@pytest.mark.parametrize(("argv", "fragment"), CASES)
def test_bad_input_gives_one_line_and_exit_2(argv, fragment, capsys) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert fragment in err


def test_malformed_yaml_file_is_named(bad_yaml, capsys) -> None:
    assert main(["cost", bad_yaml]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "broken.yaml" in err


def test_installed_entry_point_reports_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nas_cli.main", "cost", "lw-1x", "--set", "groups=5"],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "groups=5" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_debug_flag_shows_the_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nas_cli.main", "--debug", "cost", "lw-1x", "--set", "groups=5"],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_a_reader_that_goes_away_ends_the_listing_quietly(tmp_path) -> None:
    """``nas status | head``: the pipe closed under the listing ends it with exit 1 and no
    traceback (the reader, not the command, chose to stop)."""
    import optuna

    url = f"sqlite:///{tmp_path / 'many.db'}"
    for i in range(20):
        optuna.create_study(study_name=f"study-{i:03d}-{'x' * 40}", storage=url,
                            directions=["maximize", "minimize"])
    proc = subprocess.Popen([sys.executable, "-m", "nas_cli.main", "status", "--storage", url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the interpreter has even imported the command
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
