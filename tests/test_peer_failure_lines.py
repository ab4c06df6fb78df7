"""Peers that fail say one line (issue 43, item 6): a `--nnodes` peer killed or interrupted, a
closed stdout, a Ctrl-C in the first second, a builder that returns None, and messages that named
the wrong thing. Each test asserts the line a user sees, its exit code where there is one, and
that no traceback or C++ stack comes with it."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from suites.errors import UserError
from suites.runner.native_stderr import filtered, without_c10d_log

#: What torch 2.x's store client wrote to fd 2 when node 0 went away (trimmed to four frames).
C10D_BLOCK = """\
[W1128 04:10:57.069004676 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=3, addr=[::ffff:127.0.0.1]:33218, remote=[::ffff:127.0.0.1]:21237): Connection reset by peer
Exception raised from recvBytes at /__w/pytorch/pytorch/torch/csrc/distributed/c10d/Utils.hpp:784 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7f5422379b8d in libc10.so)
frame #1: c10::DistNetworkError::DistNetworkError(c10::SourceLocation, std::string) + 0x72 (0x7f542237b022 in libc10.so)
<omitting python frames>
frame #17: __libc_start_main + 0x85 (0x7f5424e45305 in /lib/x86_64-linux-gnu/libc.so.6)

"""  # noqa: E501 - as torch writes it


def test_the_c10d_log_entry_and_its_backtrace_go_and_everything_else_stays():
    text = "before\n" + C10D_BLOCK + "parbench: error: node 1 lost the rendezvous\n"
    assert without_c10d_log(text) == "before\nparbench: error: node 1 lost the rendezvous\n"
    unrelated = "[W1128 04:10:57.069 Module.cpp:12] a warning of another part of torch\nframe #0: kept\n"
    assert without_c10d_log(unrelated) == unrelated


def test_what_native_code_writes_to_fd_2_during_a_call_comes_out_without_the_c10d_entry(capfd):
    with filtered():
        os.write(2, C10D_BLOCK.encode())
        print("a line of this process's own", file=sys.stderr)
    assert capfd.readouterr().err == "a line of this process's own\n"


def test_a_follower_whose_node_0_is_gone_says_one_line_and_no_cpp_stack(capfd):
    """node 0's store stops under a follower waiting for the next step (the store in this
    process: its server goes when its last reference does, as a killed node 0's does)."""
    pytest.importorskip("torch")
    from torch.distributed import TCPStore

    from suites.runner import node_group

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = TCPStore("127.0.0.1", port, world_size=2, is_master=True, timeout=timedelta(seconds=10),
                      wait_for_workers=False)
    client = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10), wait_for_workers=False)
    group = node_group.NodeGroup(2, 1, node_group.Endpoint("127.0.0.1", port), 10.0, node_group.QuietStore(client))
    del server
    with pytest.raises(node_group.RendezvousError) as error:
        node_group.share(group, "step", None, timeout_s=10)
    message = str(error.value)  # the store's own words in the brackets: its first line only
    assert message.startswith(f"node 1 lost the rendezvous at 127.0.0.1:{port} (") and "\n" not in message
    assert message.endswith("): node 0 stopped or the network failed; start the run again on every node")
    assert "frame #" not in capfd.readouterr().err


def test_a_follower_reads_why_node_0_stopped_rather_than_a_lost_connection():
    pytest.importorskip("torch")
    import threading

    from torch.distributed import TCPStore

    from suites.runner import node_group, nodes

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    where = node_group.Endpoint("127.0.0.1", port)
    stores = [TCPStore("127.0.0.1", port, world_size=2, is_master=True, timeout=timedelta(seconds=10),
                       wait_for_workers=False),
              TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10), wait_for_workers=False)]
    first, follower = (node_group.NodeGroup(2, rank, where, 10.0, node_group.QuietStore(store))
                       for rank, store in enumerate(stores))
    del stores  # node 0's group holds the last reference to its server, as in a run
    heard: list[str] = []

    def follow() -> None:
        try:
            node_group.share(follower, "step", None, timeout_s=10)
        except node_group.RendezvousError as error:
            heard.append(str(error))
        node_group.close(follower)

    waiting = threading.Thread(target=follow)
    waiting.start()
    nodes.finish(nodes.NodeSpan(first, ("node0", "node1"), ("127.0.0.1", "127.0.0.1"), 0), error="stopped by SIGTERM")
    waiting.join(timeout=30)
    assert heard == ["the run across nodes stopped: node 0: stopped by SIGTERM"]


class FakeNodes:
    """`suites.runner.nodes` as `run_on_nodes` uses it: a follower whose steps end as told."""

    def __init__(self, first: bool, follow_raises: BaseException | None = None) -> None:
        self.group = type("Group", (), {"is_first": first})()
        self.follow_raises = follow_raises
        self.finished: list[str | None] = []

    def start(self, *args: object) -> object:
        return self

    def agree_on_cases(self, *args: object) -> None:
        pass

    def follow(self, span: object, wait_s: float) -> int:
        if self.follow_raises is not None:
            raise self.follow_raises
        return 0

    def finish(self, span: object, error: str | None = None) -> None:
        self.finished.append(error)


@pytest.mark.parametrize("stop, told", [(KeyboardInterrupt(), "interrupted (Ctrl-C)"),
                                        (UserError("no space left on the results disk\nmore"),
                                         "no space left on the results disk")])
def test_a_follower_that_stops_tells_the_others_why_in_one_line(monkeypatch, stop, told):
    from suites.cases.timing_config import TimingConfig
    from suites.runner import node_run

    fake = FakeNodes(first=False, follow_raises=stop)
    monkeypatch.setattr(node_run, "nodes", fake)
    with pytest.raises(type(stop)):
        node_run.run_on_nodes(node_run.NodeRun(2, 1, "10.0.0.1:29400", 5.0), [], [], TimingConfig(), lambda _: 0)
    assert fake.finished == [told]


def test_a_follower_that_finishes_leaves_without_stopping_anyone(monkeypatch):
    from suites.cases.timing_config import TimingConfig
    from suites.runner import node_run

    fake = FakeNodes(first=False)
    monkeypatch.setattr(node_run, "nodes", fake)
    assert node_run.run_on_nodes(node_run.NodeRun(2, 1, "10.0.0.1:29400", 5.0), [], [], TimingConfig(),
                                 lambda _: 1) == 0
    assert fake.finished == []


def test_ctrl_c_while_parbench_reads_its_command_is_one_line_and_130(monkeypatch, capsys):
    from suites.frontends import cli

    def interrupted() -> None:
        raise KeyboardInterrupt  # as a Ctrl-C inside an import of a command's module

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["list"]) == 130
    assert capsys.readouterr().err == "parbench: interrupted before the command began; nothing was run\n"


def test_the_cli_module_imports_nothing_heavy_before_main_runs():
    """A Ctrl-C lands in `main` (one line) unless it comes while its module is imported: keep that short."""
    loaded = subprocess.run([sys.executable, "-c", "import sys, suites.frontends.cli; print(sorted(m for m in "
                             "('numpy', 'pandas', 'rich', 'torch', 'tensorflow') if m in sys.modules))"],
                            capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent.parent)
    assert loaded.stdout.strip() == "[]"


def test_list_with_stdout_closed_runs_and_says_one_line(monkeypatch, capfd):
    """`parbench list >&-`: fd 1 closed when parbench starts (here: closed around `main`)."""
    from suites.frontends import cli

    monkeypatch.setattr(sys, "stdout", sys.stdout)  # main points it at the null device: put back after
    saved = os.dup(1)
    try:
        os.close(1)
        code = cli.main(["list"])
        assert os.path.samestat(os.fstat(1), os.stat(os.devnull))  # no file parbench opens can take fd 1
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    assert (code, capfd.readouterr().err) == (
        0, "parbench: warning: standard output is closed: what parbench prints there is discarded\n")


def test_a_builder_that_returns_none_is_named():
    from suites.cases.vocabulary import Framework
    from suites.workloads.user_model import UserModel

    def build_mlp() -> None:
        pass  # forgot `return model`

    spec = UserModel(model_name="mine", sample_shape=(3,), builders={Framework.TORCH: build_mlp})
    with pytest.raises(ValueError) as error:
        spec.build(Framework.TORCH)
    assert str(error.value) == ("the model builder of 'mine' (torch=test_a_builder_that_returns_none_is_named."
                                "<locals>.build_mlp) returned None: return the model it builds")


def test_a_bad_references_file_names_the_option_or_the_variable_it_came_from(monkeypatch, tmp_path):
    from suites.hardware.references import load_references

    bad = tmp_path / "mine.toml"
    bad.write_text("x = [")
    with pytest.raises(UserError, match=r"^reference table \(--references\) .*; fix the file or leave out "
                                        r"--references$"):
        load_references(str(bad))
    monkeypatch.setenv("PARBENCH_REFERENCES", str(bad))
    with pytest.raises(UserError, match=r"^reference table \(PARBENCH_REFERENCES\) .*; fix the file or unset "
                                        r"PARBENCH_REFERENCES$"):
        load_references()


def test_a_results_folder_given_as_the_suite_is_called_a_folder(tmp_path):
    from suites.grids.grid import load_suite

    with pytest.raises(UserError) as error:
        load_suite(str(tmp_path))
    assert str(error.value).startswith(f"--suite {str(tmp_path)!r} is a folder, not a suite (a folder of records "
                                       "is read by `parbench report` or written by --results): give a built-in suite")


@pytest.mark.parametrize("timing, said", [
    ("{bad", "--timing '{bad' is not JSON ("),
    ("[1]", "--timing '[1]' is not a JSON object: give a JSON object of timing fields"),
    ('{"nosuch": 1}', "--timing: unknown field 'nosuch'; the fields are warmup_s, "),
    ('{"budget_s": "2"}', '--timing: budget_s is "2", not a number: give '),
    ('{"min_samples": 1.5}', "--timing: min_samples is 1.5, not a whole number: give "),
])
def test_the_workers_timing_errors_name_timing(timing, said):
    """`parbench worker` prints these as `parbench worker: <message>` and exits 1 (`case_process.run`)."""
    from suites.runner.worker_options import timing_option

    with pytest.raises(UserError) as error:
        timing_option(timing)
    assert str(error.value).startswith(said)


def test_the_workers_case_errors_name_case_and_the_launchers_timing_is_taken_as_it_is():
    from suites.runner.worker_options import case_option, timing_option

    with pytest.raises(UserError, match=r"^--case 'nosuch/x' is not a case \("):
        case_option("nosuch/x")
    timing = timing_option('{"warmup_s": 0.0, "case_timeout_s": null, "min_samples": 3}')
    assert (timing.warmup_s, timing.case_timeout_s, timing.min_samples) == (0.0, None, 3)
