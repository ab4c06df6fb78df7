"""The namespace link study (suites/studies/namespace_link.py, link_rows.py) without namespaces: the link's
alpha-beta fit, the rates and their tc commands, the suite both nodes run, the validation rows made
from a run's records (fakes written through the real store) and its refusals. The study itself makes
network namespaces and runs for minutes: it is run by hand, never here."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.errors import UserError
from suites.records.contention import Contention
from suites.records.measurement import Measurement
from suites.records.record import Record
from suites.records.store import ResultsStore, load_records
from suites.studies import link_rows, namespace_link
from suites.studies.link_rows import Link, Run
from suites.studies.namespace_link import LABEL, LinkRate, parse_rates

TRAINING = {"model": "mlp", "batch": 128, "hidden": 1024, "depth": 4}
#: The mlp's parameters at hidden 1024, depth 4: 256x1024 + 3 x 1024x1024 + 1024x10 weights, and biases.
MLP_PARAMETERS = 256 * 1024 + 3 * 1024 * 1024 + 1024 * 10 + 4 * 1024 + 10


def record(workload: str, strategy: str, n_devices: int, params: dict, median_s: float, *,
           status: Status = Status.OK, samples_per_s: float | None = None, nodes: int = 1,
           contended: bool = False) -> Record:
    case = Case.make(workload, "torch", "cpu", strategy, "fp32", n_devices, params)
    return Record(
        case=case, status=status, run_id="r1", timestamp="2026-11-28T04:00:00+00:00", suite="namespace-link",
        environment={"machine": LABEL}, reason="" if status is Status.OK else "rank 1: gloo: connection reset",
        measurement=Measurement(samples=(median_s,) * 3) if status is Status.OK else None,
        metrics={"samples_per_s": samples_per_s} if samples_per_s else {},
        details={"nodes": [{"node": f"node{i}"} for i in range(nodes)]} if nodes > 1 else {},
        contention=Contention(load_before=3.0, load_after=3.5, steal_fraction=0.0, cores=1, contended=contended,
                              why="others used 40% of its cores" if contended else "", others_core_share=0.4))


def a_run(fsdp_status: Status = Status.OK) -> list[Record]:
    """What one rate's run stores: a link of 1 Gbit/s and 50 µs latency, the base and the 2-node cases."""
    beta, alpha = 1e9 / 8, 50e-6
    return [
        record("allreduce", "ddp", 2, {"bytes": 1024, "backend": "gloo"}, 2 * alpha + 1024 / beta),
        record("allreduce", "ddp", 2, {"bytes": 16 << 20, "backend": "gloo"}, 2 * alpha + (16 << 20) / beta),
        record("train_step", "single", 1, TRAINING, 0.15, samples_per_s=853.3),
        record("train_step", "ddp", 2, TRAINING, 0.3, samples_per_s=853.0, nodes=2, contended=True),
        record("train_step", "fsdp", 2, TRAINING, 0.35, samples_per_s=731.4, nodes=2, status=fsdp_status),
    ]


RUN = Run(name="1gbit", records="out/1gbit/parbench/records-namespace-gloo.jsonl",
          tc_command="tc -n h0 qdisc replace ...", node_command="python -m suites run --suite out/suite.toml ...")


def test_the_link_is_the_alpha_beta_line_through_two_all_reduces():
    beta, alpha = 5e9 / 8, 30e-6  # 5 Gbit/s
    link = Link.fitted((1024, 2 * alpha + 1024 / beta), (1 << 24, 2 * alpha + (1 << 24) / beta), ranks=2)
    assert link.gbit_per_s == pytest.approx(5.0)
    assert link.latency_s == pytest.approx(alpha)
    # 4 ranks: each sends 2(n-1)/n = 1.5 bytes per byte reduced, in 2(n-1) = 6 messages
    four = Link.fitted((1024, 6 * alpha + 1.5 * 1024 / beta), (1 << 24, 6 * alpha + 1.5 * (1 << 24) / beta), ranks=4)
    assert four.gbit_per_s == pytest.approx(5.0) and four.latency_s == pytest.approx(alpha)


def test_a_large_all_reduce_no_slower_than_the_small_one_fits_no_link():
    with pytest.raises(ValueError, match="was not slower"):
        Link.fitted((1024, 2e-3), (1 << 24, 1e-3), ranks=2)


def test_rates_are_read_as_tc_writes_them_and_a_bad_one_is_named():
    assert parse_rates("1gbit, 5Gbit,200mbit,unlimited") == [
        LinkRate("1gbit", 1.0), LinkRate("5gbit", 5.0), LinkRate("200mbit", 0.2), LinkRate("unlimited", None)]
    for bad, named in (("1gbit,fast", "'fast'"), ("0gbit", "'0gbit'"), (" , ", "names no rate")):
        with pytest.raises(UserError) as raised:
            parse_rates(bad)
        assert named in str(raised.value) and "\n" not in str(raised.value)


def test_the_tbf_bucket_grows_with_the_rate_and_unlimited_removes_the_qdisc():
    one, five = LinkRate("1gbit", 1.0).tc_argv("h0", "v0"), LinkRate("5gbit", 5.0).tc_argv("h0", "v0")
    assert one[:11] == ["tc", "-n", "h0", "qdisc", "replace", "dev", "v0", "root", "tbf", "rate", "1gbit"]
    assert int(one[one.index("burst") + 1]) == namespace_link.MIN_BURST_BYTES
    assert int(five[five.index("burst") + 1]) == 5e9 / 8 * namespace_link.BURST_S
    assert LinkRate("unlimited", None).tc_argv("h0", "v0") == ["tc", "-n", "h0", "qdisc", "del", "dev", "v0", "root"]


def test_the_suite_both_nodes_run_holds_the_link_the_base_and_the_two_targets(tmp_path):
    from suites.grids.grid import load_suite

    path = tmp_path / "suite.toml"
    path.write_text(namespace_link.suite_text(6.0))
    cases = {(case.workload, str(case.strategy), case.n_devices) for case in load_suite(str(path)).cases}
    assert cases == {("allreduce", "ddp", 2), ("train_step", "single", 1), ("train_step", "ddp", 2),
                     ("train_step", "fsdp", 2)}
    assert len(load_suite(str(path)).cases) == 5  # two all-reduce sizes


def test_rounds_alternate_the_order_of_the_rates_and_name_their_runs():
    rates = parse_rates("1gbit,5gbit,unlimited")
    assert [rate.name for rate in namespace_link.rate_order(rates, 1)] == ["unlimited", "5gbit", "1gbit"]
    assert namespace_link.run_name(rates[0], 0) == "1gbit" and namespace_link.run_name(rates[0], 1) == "1gbit-r2"


def test_a_run_makes_one_row_per_two_node_case_with_the_base_and_the_link():
    rows, problems = link_rows.rows_of(a_run(), RUN, "2026-11-28", "python -m suites.studies.namespace_link --out out")
    assert problems == []
    ddp, fsdp = rows
    assert (ddp.id, fsdp.id) == ("ddp-1gbit", "fsdp-1gbit")
    assert ddp.base_samples_per_s == 853.3 and ddp.measured_samples_per_s == 853.0
    base_id = "train_step/torch/cpu:1/single/fp32/batch=128,depth=4,hidden=1024,model=mlp"
    assert ddp.base_record == f"{RUN.records}#{base_id}"
    assert ddp.measured_record.endswith("#train_step/torch/cpu:2/ddp/fp32/batch=128,depth=4,hidden=1024,model=mlp")
    assert (ddp.base_devices, ddp.base_nodes, ddp.target_devices, ddp.target_nodes) == (1, 1, 2, 2)
    assert ddp.link_gbit_per_s == pytest.approx(1.0) and ddp.link_latency_s == pytest.approx(50e-6)
    assert ddp.gradient_bytes == 4 * MLP_PARAMETERS
    assert ddp.sizes == {"depth": 4, "hidden": 1024} and ddp.per_device_batch == 128 and ddp.scaling == "weak"
    assert "tc -n h0" in ddp.link_source and "python -m suites run" in ddp.link_source
    assert ddp.contention.startswith("base not contended") and "measured contended (others used 40%" in ddp.contention


def test_the_rows_file_is_toml_in_the_validation_format_with_the_contention_as_comments():
    rows, _ = link_rows.rows_of(a_run(), RUN, "2026-11-28", 'python -m x --out "a b"')
    text = link_rows.toml_document(rows, "Validation rows\nWritten by: test")
    parsed = tomllib.loads(text)["row"]
    assert [row["id"] for row in parsed] == ["ddp-1gbit", "fsdp-1gbit"]
    assert list(parsed[0]) == ["id", "framework", "strategy", "workload", "model", "sizes", "precision", "scaling",
                               "per_device_batch", "base_devices", "base_nodes", "base_samples_per_s", "base_record",
                               "target_devices", "target_nodes", "measured_samples_per_s", "measured_record",
                               "link_gbit_per_s", "link_latency_s", "link_source", "gradient_bytes", "date", "command"]
    assert parsed[0]["command"] == 'python -m x --out "a b"' and parsed[0]["sizes"] == {"depth": 4, "hidden": 1024}
    assert text.startswith("# Validation rows\n# Written by: test\n")
    assert "# contention: base not contended" in text


def test_a_failed_case_is_named_and_the_other_rows_are_kept():
    rows, problems = link_rows.rows_of(a_run(fsdp_status=Status.FAILED), RUN, "2026-11-28", "cmd")
    assert [row.id for row in rows] == ["ddp-1gbit"]
    assert problems == ["1gbit: train_step/torch/cpu:2/fsdp/fp32/batch=128,depth=4,hidden=1024,model=mlp: failed: "
                        "rank 1: gloo: connection reset"]


def test_a_run_without_its_link_or_base_makes_no_rows_and_says_why():
    records = a_run()
    rows, problems = link_rows.rows_of(records[1:], RUN, "2026-11-28", "cmd")
    assert rows == [] and problems == ["1gbit: 1 all-reduce record(s) measured, 2 are needed to fit the link"]
    rows, problems = link_rows.rows_of(records[:2] + records[3:], RUN, "2026-11-28", "cmd")
    assert rows == [] and problems == ["1gbit: no one-rank training record to base the rows on"]


def test_the_rows_name_the_records_file_the_store_wrote_and_its_cases(tmp_path, monkeypatch):
    """`measure` with the nodes faked: they store a run's records as parbench does."""
    def fake_nodes(hosts, suite, results: Path) -> list[int]:
        store = ResultsStore(results)
        store.ensure_writable(LABEL)
        for made in a_run():
            store.append(made)
        return [0, 0]

    monkeypatch.setattr(namespace_link, "limit_link", lambda hosts, rate: "tc ...")
    monkeypatch.setattr(namespace_link, "run_nodes", fake_nodes)
    monkeypatch.chdir(tmp_path)
    hosts = namespace_link.netns_hosts.Hosts(names=("h0", "h1"), addresses=("10.0.0.1", "10.0.0.2"),
                                             interfaces=("v0", "v1"))
    rows, problems = namespace_link.measure(hosts, LinkRate("1gbit", 1.0), "1gbit", Path("out"),
                                            Path("out/suite.toml"), "cmd")
    assert problems == [] and len(rows) == 2
    written = ResultsStore(Path("out/1gbit")).files()
    for row in rows:
        for reference in (row.base_record, row.measured_record):
            path, case_id = reference.split("#")
            assert [Path(path)] == written and not Path(path).is_absolute()
            assert case_id in [made.case.id for made in load_records(written)]
    assert "python -m suites run --suite out/suite.toml --results out/1gbit" in rows[0].link_source


def test_the_table_has_one_line_per_run_with_both_strategies():
    rows, _ = link_rows.rows_of(a_run(), RUN, "2026-11-28", "cmd")
    table = link_rows.markdown_table({"1gbit": rows, "5gbit": []})
    assert table.splitlines()[2] == "| 1gbit | 1.00 Gbit/s | 50 µs | 853.3 | 853.0 | 731.4 |"
    assert len(table.splitlines()) == 3


@pytest.mark.parametrize("why, says", [("network namespaces need root", "run the study as root (sudo)"),
                                       ("not installed: ip (iproute2)", "apt-get install iproute2")])
def test_without_root_or_iproute2_the_study_refuses_in_one_line_and_makes_nothing(tmp_path, monkeypatch, capsys,
                                                                                   why, says):
    monkeypatch.setattr(namespace_link.netns_hosts, "missing", lambda: why)
    monkeypatch.setattr(namespace_link.netns_hosts, "two_hosts", lambda: pytest.fail("namespaces were made"))
    code = namespace_link.main(["--out", str(tmp_path / "out"), "--rows", str(tmp_path / "rows.toml")])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and why in err and says in err, err
    assert "creates two network namespaces" in out and "needs root" in out  # what it would have done
    assert not (tmp_path / "out").exists() and not (tmp_path / "rows.toml").exists()


def test_a_used_out_folder_is_refused_before_anything_runs(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "suite.toml").write_text("")
    assert namespace_link.main(["--out", str(tmp_path / "out"), "--rates", "1gbit"]) == 2
    err = capsys.readouterr().err
    assert "is not empty" in err and "pass a new --out" in err and err.count("\n") == 1


def test_figures_keep_six_significant_digits():
    assert link_rows.figure(853.333333333) == 853.333 and link_rows.figure(4.9123456e-05) == 4.91235e-05
