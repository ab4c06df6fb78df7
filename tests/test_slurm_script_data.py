"""A Slurm batch script is data, not shell (issue 43 item 5): every value `parbench slurm` writes
into it is checked against Slurm's grammar and quoted as sbatch reads it, so no option adds a
line or a command; a filter that matches no case is refused before anything is written; a partial
Slurm environment, or an scontrol that fails or does not answer, is one line, not a traceback.
Also: a grid or a user's table saved with a UTF-8 byte-order mark loads (issue 43 item 4)."""
from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from suites.errors import UserError
from suites.frontends.cli import main
from suites.frontends.sbatch_values import sbatch_value, time_minutes
from suites.runner import slurm

QUICK = Path(__file__).resolve().parent.parent / "suites" / "grids" / "quick.toml"


def sbatch_arguments(line: str) -> list[str]:
    """The arguments sbatch reads from one `#SBATCH` line, by its rules (src/sbatch/opt.c,
    `_get_argument`): whitespace separates, quotes group, a backslash escapes the next character,
    an unquoted '#' ends the line."""
    arguments, current, quote, escaped, started = [], "", "", False, False
    for char in line.removeprefix("#SBATCH"):
        if escaped:
            current, escaped, started = current + char, False, True
        elif char == "\\":
            escaped = True
        elif quote:
            if char == quote:
                quote = ""
            else:
                current += char
        elif char in "\"'":
            quote, started = char, True
        elif char == "#":
            break
        elif char.isspace():
            if started:
                arguments.append(current)
            current, started = "", False
        else:
            current, started = current + char, True
    return arguments + ([current] if started else [])


def directives(script: str) -> dict[str, str]:
    """--name=value of every #SBATCH line, as sbatch reads them; every line is accounted for."""
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash" and lines[1].startswith("# written by")
    found: dict[str, str] = {}
    for line in lines[2:]:
        if not line.startswith("#SBATCH"):
            break
        (argument,) = sbatch_arguments(line)
        name, _, value = argument.partition("=")
        found[name] = value
    assert lines[2 + len(found):] == [line for line in lines if not line.startswith("#")]
    assert len(lines) == 2 + len(found) + 3  # set -euo pipefail, cd, one parbench run: nothing else
    return found


def slurm_script(argv: list[str], capsys) -> str:
    assert main(["slurm", *argv]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("value", ["gpu", "parbench-quick", "/tmp/a b/parbench-%j.out", 'say "hi"', "back\\slash",
                                   "hash # here", "it's"])
def test_a_value_reads_back_as_it_was_written(value):
    assert sbatch_arguments(f"#SBATCH --x={sbatch_value(value)}") == [f"--x={value}"]


def test_a_working_folder_with_a_space_and_a_grid_with_quotes_read_back_whole(tmp_path, monkeypatch, capsys):
    workdir = tmp_path / "my runs"
    workdir.mkdir()
    grid = workdir / 'my "odd" grid.toml'
    grid.write_text(QUICK.read_text())
    monkeypatch.chdir(workdir)
    script = slurm_script(["--suite", grid.name, "--nodes", "2", "--label", "a b;c", "--filter", "framework=torch"],
                          capsys)
    found = directives(script)
    assert found["--output"] == f"{workdir}/parbench-%j.out"
    assert found["--job-name"] == 'parbench-my "odd" grid'
    assert script.splitlines()[-2] == f"cd {shlex.quote(str(workdir))}"
    command = shlex.split(script.splitlines()[-1])
    assert command[command.index("--label") + 1] == "a b;c"
    assert command[command.index("--suite") + 1] == grid.name


@pytest.mark.parametrize("argv, problem", [
    (["--partition", "gpu\nrm -rf ~"], r"--partition holds the control character '\n', which would break the batch "
                                       r"script; give it on one line without control characters"),
    (["--partition", "gpu;ls"], "--partition 'gpu;ls' is not a Slurm partition name"),
    (["--partition", ""], "--partition '' is not a Slurm partition name"),
    (["--time", "1:00\n#SBATCH --nodes=9"], r"--time holds the control character '\n'"),
    (["--time", "2:75:00"], "--time '2:75:00' is not a Slurm time"),
    (["--time", "1-24"], "--time '1-24' is not a Slurm time"),
    (["--time", "99999999999999999999"], "--time '99999999999999999999' is past a year"),
    (["--label", "a\nb"], r"--label holds the control character '\n'"),
    (["--filter", "framework=torch\nmatmul"], r"--filter holds the control character '\n'"),
    (["--results", "res\x1b[2J"], r"--results holds the control character '\x1b'"),
    (["--filter", "framework=nosuch"], "filter 'framework=nosuch' matches none of the"),
])
def test_values_slurm_would_misread_are_one_line_and_nothing_is_written(argv, problem, tmp_path, capsys):
    script = tmp_path / "run.sbatch"
    assert main(["slurm", "--nodes", "2", "--script", str(script), *argv]) == 2
    error = capsys.readouterr().err
    assert error.startswith("parbench: error: ") and problem in error and error.count("\n") == 1
    assert not script.exists()


@pytest.mark.parametrize("argv, problem", [
    (["--nodes", "99999999999999999999"], "--nodes must be 1 or more (at most 200,000), not 99999999999999999999"),
    (["--nodes", "-3"], "--nodes must be 1 or more (at most 200,000), not -3"),
    (["--nodes", "2", "--gpus-per-node", "100000"], "--gpus-per-node must be 0 to 64, not 100000"),
    (["--nodes", "2", "--gpus-per-node", "-1"], "--gpus-per-node must be 0 to 64, not -1"),
    (["--nodes", "2", "--force"], "--force replaces an existing --script FILE"),
])
def test_counts_are_within_what_a_machine_has(argv, problem, capsys):
    assert main(["slurm", *argv]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"parbench: error: {problem}") and error.count("\n") == 1


def test_a_working_folder_slurm_reads_as_a_pattern_is_refused(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "run%j"
    folder.mkdir()
    monkeypatch.chdir(folder)
    assert main(["slurm", "--nodes", "2"]) == 2
    assert "holds '%', which Slurm reads as a file-name pattern in #SBATCH --output" in capsys.readouterr().err


@pytest.mark.parametrize("value, minutes", [
    ("90", 90), ("90:30", 90.5), ("2:00:00", 120), ("1-0", 1440), ("1-2:30", 1590), ("1-2:30:15", 1590.25),
    ("0", 0), ("2h", None), ("", None), ("1:2:3:4", None), ("5:61", None), ("1-", None), ("-5", None),
])
def test_slurm_time_formats(value, minutes):
    assert time_minutes(value) == minutes


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """srun and scontrol on PATH, scontrol answering with the script body given."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(slurm, "_KNOWN", {})

    def scontrol(body: str) -> None:
        for name, text in (("srun", "exit 0"), ("scontrol", body)):
            (folder / name).write_text(f"#!/bin/sh\n{text}\n")
            (folder / name).chmod(0o755)
    return scontrol


JOB = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_NUM_NODES": "2"}


@pytest.mark.parametrize("env, problem", [
    ({"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node[1-2]"},
     "SLURM_JOB_ID is set (77) but SLURM_JOB_NUM_NODES not: a partial Slurm environment"),
    ({"SLURM_JOB_ID": "77", "SLURM_JOB_NUM_NODES": "2"}, "but SLURM_JOB_NODELIST not"),
    ({"SLURM_JOB_ID": "77"}, "but SLURM_JOB_NODELIST and SLURM_JOB_NUM_NODES not"),
    ({**JOB, "SLURM_JOB_NUM_NODES": "two"}, "SLURM_JOB_NUM_NODES is 'two', not a number of nodes"),
])
def test_a_partial_slurm_environment_is_one_line(env, problem, fake_slurm):
    fake_slurm("echo node1 node2")
    with pytest.raises(UserError) as refused:
        slurm.allocation(env)
    assert problem in str(refused.value) and "unset SLURM_JOB_ID to run on this machine alone" in str(refused.value)


def test_an_scontrol_that_fails_or_does_not_answer_is_one_line(fake_slurm, monkeypatch):
    fake_slurm('echo "scontrol: error: Unable to contact slurm controller (connect failure)" >&2; exit 1')
    with pytest.raises(UserError, match=r"^`scontrol show hostnames 'node\[1-2\]'` failed \(exit code 1: scontrol: "
                                        r"error: Unable to contact slurm controller \(connect failure\)\); run inside"):
        slurm.allocation(JOB)
    fake_slurm("exec sleep 60")
    monkeypatch.setattr(slurm, "SCONTROL_TIMEOUT_S", 0.1)  # what ends the wait, not a threshold under test
    with pytest.raises(UserError, match=r"did not answer within 0.1 s: the Slurm controller is unreachable"):
        slurm.allocation(JOB)


def test_a_run_in_a_partial_allocation_stops_before_measuring_and_keeps_the_records(tmp_path, monkeypatch, capsys,
                                                                                    fake_slurm):
    records = tmp_path / "results" / "parbench" / "records-vm.jsonl"
    records.parent.mkdir(parents=True)
    records.write_text('{"schema": 2}\n')
    for name, value in {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node[1-2]"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_JOB_NUM_NODES", raising=False)
    assert main(["run", "--filter", "workload=matmul framework=torch device=cpu precision=fp32", "--results",
                 str(tmp_path / "results"), "--label", "vm"]) == 2
    assert "a partial Slurm environment" in capsys.readouterr().err
    assert records.read_text() == '{"schema": 2}\n'


def test_a_grid_and_a_users_table_saved_with_a_byte_order_mark_load(tmp_path):
    from suites.cases.user_files import user_table
    from suites.grids.grid import load_suite

    grid = tmp_path / "mine.toml"
    grid.write_bytes(b"\xef\xbb\xbf" + QUICK.read_bytes())
    assert load_suite(str(grid)).cases == load_suite("quick").cases
    table = tmp_path / "prices.toml"
    table.write_bytes(b"\xef\xbb\xbf[h100]\nper_hour = 2.5\n")
    assert user_table(table, "price table", "fix it") == {"h100": {"per_hour": 2.5}}
    table.write_bytes(b"\xff\xfe[h100]\n")
    with pytest.raises(UserError, match=r"^price table .*prices.toml: is not UTF-8 text \(byte 0\): save it as "
                                        r"UTF-8; fix it$"):
        user_table(table, "price table", "fix it")

