"""The first hour's smaller trips (issue 47 item 8): a stopped rehearsal does not claim stored
records, the README's example outputs are ignored by git, `list --suite --availability` says what
runs here, and parity names the torchvision release for the installed torch."""
from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from suites.frontends.cli import main
from suites.frontends.commands import run as run_command
from suites.frontends.commands.parity import torchvision_hint
from suites.runner.termination import Terminated
from tests.test_run_bounds import GRID

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("rehearse, said", [(True, "a rehearsal stores nothing"),
                                            (False, "every finished record is already stored")])
def test_a_stopped_run_says_what_it_kept(tmp_path, capsys, monkeypatch, rehearse, said):
    def stopped(*args, **kwargs):
        raise Terminated(signal.SIGTERM)
    monkeypatch.setattr(run_command, "rehearse", stopped)
    monkeypatch.setattr(run_command, "run_on_nodes", stopped)
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    code = main(["run", "--suite", str(grid), "--results", str(tmp_path / "r"), *(["--rehearse"] if rehearse else [])])
    err = capsys.readouterr().err
    assert code == 143 and said in err and err.count("\n") == 1
    assert rehearse is ("already stored" not in err)


@pytest.mark.parametrize("path", ["my-results/records.jsonl", "s.sbatch"])
def test_the_readmes_example_outputs_are_ignored(path):
    assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0


def test_list_says_what_is_available_here(tmp_path, capsys):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    assert main(["list", "--suite", str(grid), "--filter", "m=8", "--availability"]) == 0
    cpu, gpu = capsys.readouterr().out.splitlines()
    assert cpu.endswith("/k=8,m=8,n=8\tavailable") and "/gpu:1/" in gpu and "\tunavailable: " in gpu
    assert main(["list", "--suite", str(grid), "--filter", "m=8"]) == 0
    assert "\t" not in capsys.readouterr().out  # ids alone, as scripts read them


@pytest.mark.parametrize("torch, hint", [
    ("2.13.0+cpu", "for torch 2.13.0: pip install 'torchvision==0.28.*' --index-url https://download.pytorch.org/whl/cpu"),
    ("2.5.1", "for torch 2.5.1: pip install 'torchvision==0.20.*'"),
    ("2.4.0+cu121", "for torch 2.4.0: pip install 'torchvision==0.19.*' --index-url https://download.pytorch.org/whl/cu121"),
    ("1.13.1", ""),
])
def test_parity_names_the_torchvision_built_for_this_torch(torch, hint):
    assert torchvision_hint(torch) == hint
