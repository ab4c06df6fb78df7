"""Files parbench writes where a user names them (`suites.records.output_files`): checked before the
work, never clobbering a file parbench did not write (a records file never), written whole or not
at all, each refusal one line naming the option (issue 43 item 1).

Root ignores permission bits, so a read-only folder is faked through `os.access`; a full disk is a
real one for a child process: RLIMIT_FSIZE makes its writes past a size fail with EFBIG."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from suites.errors import UserError
from suites.frontends.cli import main
from suites.records import output_files
from suites.records.output_files import OutputFile, check_writable, output_path, write_atomically

RECORDS = (b'{"schema": 2, "run_id": "r1", "case": {}, "status": "ok"}\n'
           b'{"schema": 2, "run_id": "r1", "case": {}, "status": "ok"}\n')


def refusal(path: Path, **options) -> str:
    with pytest.raises(UserError) as refused:
        OutputFile(path, "--script", b"# ours", **options).check()
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"--script {path}: ")
    return message


def test_a_missing_folder_a_file_as_folder_a_folder_and_a_fifo_are_refused(tmp_path):
    assert "the folder" in refusal(tmp_path / "nodir" / "s.sbatch") and "does not exist; create it" in refusal(
        tmp_path / "nodir" / "s.sbatch")
    (tmp_path / "file").write_text("x")
    assert "is not a folder" in refusal(tmp_path / "file" / "s.sbatch")
    (tmp_path / "folder").mkdir()
    assert "is a folder, not a file" in refusal(tmp_path / "folder")
    os.mkfifo(tmp_path / "fifo")
    assert "is a FIFO, not a regular file" in refusal(tmp_path / "fifo")  # never opened: it would block
    assert "is a character device" in refusal(Path("/dev/null"))


def test_a_read_only_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(output_files.os, "access", lambda path, mode: Path(path) != tmp_path)
    assert refusal(tmp_path / "s.sbatch").endswith(f"the folder {tmp_path} is not writable; choose a folder you "
                                                   f"can write")


def test_only_our_own_file_is_replaced_unless_asked_and_records_never(tmp_path):
    theirs, ours, records = tmp_path / "notes.txt", tmp_path / "run.sbatch", tmp_path / "measured.jsonl"
    theirs.write_text("my notes\n")
    ours.write_text("#!/bin/bash\n# ours\n")
    records.write_bytes(RECORDS)
    assert refusal(theirs).endswith("exists and parbench did not write it; choose another path, or remove it first")
    OutputFile(ours, "--script", b"# ours").write("#!/bin/bash\n# ours\nnew\n")
    assert ours.read_text().endswith("new\n")
    OutputFile(theirs, "--script", b"# ours", replace_any=True).write("replaced\n")  # asked: --force
    assert theirs.read_text() == "replaced\n"
    for held in (records, tmp_path / "records-vm.jsonl"):
        if not held.exists():
            held.write_text("")  # a store's records file, by its name
        assert "holds parbench records, which parbench never overwrites" in refusal(held, replace_any=True)
    assert records.read_bytes() == RECORDS


def test_a_link_keeps_pointing_at_the_file_it_names(tmp_path):
    target, link = tmp_path / "real.sbatch", tmp_path / "link.sbatch"
    target.write_text("# ours\nold\n")
    link.symlink_to(target)
    OutputFile(link, "--script", b"# ours").write("# ours\nnew\n")
    assert link.is_symlink() and target.read_text() == "# ours\nnew\n"


def test_a_replaced_file_keeps_its_mode_and_nothing_is_left_beside_it(tmp_path):
    path = tmp_path / "run.sbatch"
    path.write_text("# ours\n")
    path.chmod(0o750)
    write_atomically(path, "# ours\nagain\n", "--script", replace_any=True)
    assert (path.stat().st_mode & 0o777) == 0o750 and os.listdir(tmp_path) == ["run.sbatch"]


def test_a_folder_made_at_the_check_or_one_line_where_it_cannot_be(tmp_path):
    made = OutputFile(tmp_path / "new" / "deeper" / "baseline.json", "--parbench-gate-save", create_folder=True)
    made.check()
    assert made.path.parent.is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=r"file is not a folder; choose another path"):
        OutputFile(tmp_path / "file" / "b.json", "--parbench-gate-save", create_folder=True).check()
    with pytest.raises(UserError, match=r"cannot create the folder .*file/sub \(Not a directory\)"):
        OutputFile(tmp_path / "file" / "sub" / "b.json", "--parbench-gate-save", create_folder=True).check()


FULL_DISK = textwrap.dedent("""
    import resource, signal, sys
    from pathlib import Path
    from suites.errors import UserError
    from suites.records.output_files import write_atomically
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    try:
        write_atomically(Path(sys.argv[1]), "# ours\\n" + "x" * 100_000, "--script", replace_any=True)
    except UserError as error:
        sys.exit(str(error))
""")


@pytest.mark.parametrize("existed", [True, False])
def test_on_a_full_disk_the_old_file_stays_and_nothing_is_left(tmp_path, existed):
    path = tmp_path / "run.sbatch"
    if existed:
        path.write_text("# ours\nthe script that worked\n")
    child = subprocess.run([sys.executable, "-c", FULL_DISK, str(path)], capture_output=True, text=True, timeout=60,
                           cwd=Path(__file__).resolve().parent.parent)
    assert child.returncode == 1
    kept = "the file is as it was" if existed else "nothing was written"
    assert child.stderr == (f"--script {path}: cannot write it (file too large); {kept}; free space there or "
                            f"choose another path\n")
    assert os.listdir(tmp_path) == (["run.sbatch"] if existed else [])
    if existed:
        assert path.read_text() == "# ours\nthe script that worked\n"


def test_check_writable_is_the_check_a_command_makes_before_its_work(tmp_path):
    check_writable(tmp_path / "calibration.json", "--results")
    (tmp_path / "calibration.json").write_text("{}")
    with pytest.raises(UserError, match="parbench did not write it"):
        check_writable(tmp_path / "calibration.json", "--results")
    check_writable(tmp_path / "calibration.json", "--results", replace_any=True)  # parbench's own table


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_path_is_refused_where_it_is_parsed(value):
    with pytest.raises(argparse.ArgumentTypeError, match="an empty path names no file or folder"):
        output_path(value)


@pytest.mark.parametrize("argv, option", [
    (["run", "--results", ""], "--results"),
    (["report", "-o", ""], "-o/--output"),
    (["slurm", "--nodes", "2", "--script", ""], "--script"),
    (["slurm", "--nodes", "2", "--results", ""], "--results"),
    (["worker", "--case", "x", "--out", ""], "--out"),
    (["ready", "--out", ""], "--out"),
])
def test_empty_output_options_are_refused_before_anything_runs(argv, option, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert capsys.readouterr().err == (f"parbench: error: argument {option}: an empty path names no file or folder; "
                                       f"give one (. for the current folder) (see parbench {argv[0]} --help)\n")
    assert os.listdir(tmp_path) == []


def test_slurm_script_onto_a_records_file_loses_nothing(tmp_path, capsys):
    records = tmp_path / "results" / "parbench" / "records-vm.jsonl"
    records.parent.mkdir(parents=True)
    records.write_bytes(RECORDS)
    assert main(["slurm", "--nodes", "2", "--script", str(records), "--force"]) == 2
    assert capsys.readouterr().err == (f"parbench: error: --script {records}: holds parbench records, which "
                                       f"parbench never overwrites; choose another path\n")
    assert records.read_bytes() == RECORDS


def test_slurm_script_replaces_its_own_script_and_a_users_file_only_with_force(tmp_path, capsys):
    script = tmp_path / "run.sbatch"
    assert main(["slurm", "--nodes", "2", "--script", str(script)]) == 0
    assert main(["slurm", "--nodes", "3", "--script", str(script)]) == 0  # ours: written again
    assert "#SBATCH --nodes=3\n" in script.read_text()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    capsys.readouterr()
    assert main(["slurm", "--nodes", "2", "--script", str(notes)]) == 2
    assert capsys.readouterr().err == (f"parbench: error: --script {notes}: exists and parbench did not write it; "
                                       f"choose another path, or pass --force to replace it\n")
    assert notes.read_text() == "mine\n"
    assert main(["slurm", "--nodes", "2", "--script", str(notes), "--force"]) == 0
    assert notes.read_text().startswith("#!/bin/bash\n")


@pytest.mark.parametrize("where, problem", [
    ("nodir/s.sbatch", "the folder {tmp}/nodir does not exist; create it or choose another path"),
    ("folder", "is a folder, not a file; name a file in it or choose another path"),
    ("fifo", "is a FIFO, not a regular file; choose another path"),
])
def test_slurm_script_paths_that_cannot_be_written_are_one_line(tmp_path, capsys, where, problem):
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "fifo")
    assert main(["slurm", "--nodes", "2", "--script", str(tmp_path / where)]) == 2
    assert capsys.readouterr().err == (f"parbench: error: --script {tmp_path / where}: "
                                       f"{problem.format(tmp=tmp_path)}\n")


def test_worker_out_into_a_missing_folder_is_refused_before_the_case_runs(tmp_path, monkeypatch):
    from suites.runner import case_process

    monkeypatch.setattr(case_process, "run", lambda args: pytest.fail("the case ran"))
    out = tmp_path / "nodir" / "outcome.json"
    with pytest.raises(SystemExit) as exited:
        main(["worker", "--case", "matmul/torch/cpu:1/single/fp32/k=64,m=64,n=64", "--out", str(out)])
    assert exited.value.code == (f"parbench worker: --out {out}: the folder {out.parent} does not exist; create "
                                 f"it or choose another path")


def test_worker_out_replaces_an_outcome_it_wrote_and_no_other_file(tmp_path, monkeypatch):
    from suites.cases.vocabulary import Status
    from suites.runner import case_process
    from suites.runner.execute import Outcome

    out = tmp_path / "outcome.json"
    case_process.write_outcome(Outcome(Status.OK, "earlier"), out)

    def ran(args: argparse.Namespace) -> None:
        raise SystemExit(0)  # as the worker does, once it wrote the outcome

    monkeypatch.setattr(case_process, "run", ran)
    with pytest.raises(SystemExit) as exited:
        main(["worker", "--case", "matmul/torch/cpu:1/single/fp32/k=64,m=64,n=64", "--out", str(out)])
    assert exited.value.code == 0
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}')
    with pytest.raises(SystemExit) as exited:
        main(["worker", "--case", "matmul/torch/cpu:1/single/fp32/k=64,m=64,n=64", "--out", str(notes)])
    assert exited.value.code == (f"parbench worker: --out {notes}: exists and parbench did not write it; choose "
                                 f"another path, or remove it first")


def test_gate_save_is_checked_when_the_session_starts_and_a_failed_save_is_said(tmp_path):
    from suites.frontends.gate import RelativeTime
    from suites.frontends.pytest_plugin import GateSession

    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=r"^--parbench-gate-save .*/file/b.json: .*file is not a folder"):
        GateSession.from_options(None, tmp_path / "file" / "b.json", None)
    with pytest.raises(UserError, match=r"^--parbench-gate-save .*folder: is a folder, not a file"):
        (tmp_path / "folder").mkdir()
        GateSession.from_options(None, tmp_path / "folder", None)
    (tmp_path / "notes.json").write_text('{"mine": true}')
    with pytest.raises(UserError, match=r"^--parbench-gate-save .*notes.json: exists and parbench did not write it"):
        GateSession.from_options(None, tmp_path / "notes.json", None)
    assert (tmp_path / "notes.json").read_text() == '{"mine": true}'
    gate = GateSession.from_options(None, tmp_path / "gate" / "b.json", None)
    gate.measured["c/1"] = RelativeTime(2.0, 0.002, 0.001, 9, "cpu")
    assert gate.save() and (tmp_path / "gate" / "b.json").exists()
    (tmp_path / "gate" / "b.json").unlink()
    (tmp_path / "gate").rmdir()
    (tmp_path / "gate").write_text("a file in its place, during the session")
    assert not gate.save()
    assert gate.summary()[-1] == (f"baseline NOT saved: --parbench-gate-save {tmp_path}/gate/b.json: "
                                  f"{tmp_path}/gate is not a folder; choose another path")


def test_ready_out_is_checked_before_the_paths_run(tmp_path, monkeypatch):
    from suites.selfchecks import readiness

    device = argparse.Namespace(available=True)
    monkeypatch.setattr(readiness, "discover_accelerators", lambda: {("torch", "gpu"): device})
    monkeypatch.setattr(readiness, "discovery_gaps", lambda *found: [])
    monkeypatch.setattr(readiness, "plan", lambda devices: pytest.fail("the checks ran"))
    (tmp_path / "summary.json").write_text("someone's notes")
    with pytest.raises(UserError, match="--out .*summary.json: exists and parbench did not write it"):
        readiness.main(["--out", str(tmp_path / "summary.json")])
