"""parbench predict: the alpha-beta terms, each plugin's exchange, memory and fit, the projection's
bands and inputs, the CLI's one-line errors and JSON, the validation scoring, and that nothing is stored."""
from __future__ import annotations

import json

import pytest

from suites.cases.vocabulary import Framework, Strategy
from suites.errors import UserError
from suites.frontends.cli import main
from suites.predict import validation
from suites.predict.alpha_beta import Topology, collective_seconds, push_pull_seconds, ring_seconds, tree_seconds
from suites.predict.base import parse_base, split_count
from suites.predict.catalogue import Catalogue
from suites.predict.exchange import exchange_seconds
from suites.predict.memory import memory_per_device
from suites.predict.projection import Options, parse_target, project
from suites.predict.workload import resolve_workload
from suites.strategies.exchange_model import Collective
from suites.strategies.registry import find_plugin


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return Catalogue.load()


def nvlink8() -> Topology:
    """8 GPUs at 450 GB/s, NCCL's ring latencies (8.4 us base, 3.4 us a step)."""
    return Topology(8, 1, 450.0, 400.0, 3.4e-6, 9.6e-6, 8.4e-6, 28e-6, 50e-6, 0.0, 1.9, 0.9)


# --- alpha-beta -----------------------------------------------------------------------------------
def test_ring_all_reduce_is_latency_plus_bus_factor_times_bytes_over_bandwidth():
    nbytes = 2**30
    expected = 8.4e-6 + 14 * 3.4e-6 + (2 * 7 / 8) * nbytes / 450e9
    assert ring_seconds("all_reduce", nbytes, nvlink8()) == pytest.approx(expected)
    assert collective_seconds("all_reduce", nbytes, nvlink8()) == (pytest.approx(expected), "ring")


def test_gathers_move_half_an_all_reduce_and_take_n_minus_1_steps():
    nbytes = 2**28
    assert ring_seconds("all_gather", nbytes, nvlink8()) == pytest.approx(8.4e-6 + 7 * 3.4e-6 + 7 / 8 * nbytes / 450e9)
    assert ring_seconds("reduce_scatter", nbytes, nvlink8()) == ring_seconds("all_gather", nbytes, nvlink8())


def test_across_nodes_the_ring_runs_at_the_nodes_network_and_pays_network_steps():
    two = Topology(8, 2, 450.0, 100.0, 3.4e-6, 9.6e-6, 8.4e-6, 28e-6, 50e-6, 0.0, 1.9, 0.9)
    nbytes = 2**30
    latency = (8.4e-6 + (30 - 2) * 3.4e-6 + 2 * 9.6e-6) * 1.9
    assert ring_seconds("all_reduce", nbytes, two) == pytest.approx(latency + 2 * 15 / 16 * nbytes / 100e9)


def test_tree_wins_small_messages_across_many_nodes():
    many = Topology(8, 64, 450.0, 400.0, 3.4e-6, 9.6e-6, 8.4e-6, 28e-6, 50e-6, 0.0, 1.9, 0.9)
    tree = tree_seconds(1024, many)
    assert tree == pytest.approx(2 * (7 * 28e-6 + 6 * 50e-6) + 2 * 1024 / (0.9 * 400e9))
    assert collective_seconds("all_reduce", 1024, many) == (pytest.approx(tree), "tree")


def test_one_rank_exchanges_nothing_and_the_parameter_server_carries_push_and_pull():
    one = Topology(1, 1, 450.0, 400.0, 3.4e-6, 9.6e-6, 8.4e-6)
    assert collective_seconds("all_reduce", 2**30, one) == (0.0, "ring")
    assert push_pull_seconds(1e9, Topology(4, 4, 450.0, 50.0, 0, 1e-5, 0)) == pytest.approx(1e-5 + 2 * 1e9 * 16 / 50e9)


def test_the_model_reproduces_nccl_tests_busbw_within_7_percent_from_datasheet_and_nccl_constants(catalogue):
    rows = [validation.collective_row(row, catalogue) for row in validation.load_rows()["collective"]]
    assert len(rows) == 5 and all(abs(row["error"]) < 0.07 for row in rows)


# --- the plugins' exchange terms -------------------------------------------------------------------
def test_every_data_parallel_plugin_declares_its_gradient_exchange():
    for framework, strategy in [("torch", "ddp"), ("torch", "horovod"), ("tf", "mirrored"), ("tf", "multiworker"),
                                ("tf", "horovod"), ("tf", "towers")]:
        model = find_plugin(Framework(framework), Strategy(strategy)).exchange
        assert [(c.op, c.payload) for c in model.collectives] == [("all_reduce", "gradients")], strategy
    fsdp = find_plugin(Framework.TORCH, Strategy.FSDP).exchange
    assert [(c.op, c.payload, c.dtype, c.overlap, c.exposed_unit) for c in fsdp.collectives] == [
        ("all_gather", "parameters", "compute", "forward", "first"),
        ("all_gather", "parameters", "compute", "backward", "last"),
        ("reduce_scatter", "gradients", "state", "backward", "first")]
    assert all(c.per_unit and c.issue == "stream" for c in fsdp.collectives)
    assert find_plugin(Framework.TORCH, Strategy.PIPELINE).exchange.bubble
    assert find_plugin(Framework.TORCH, Strategy.MODEL_PARALLEL).exchange.serial
    assert find_plugin(Framework.TF, Strategy.PARAMETER_SERVER).exchange.collectives[0].op == "push_pull"
    assert find_plugin(Framework.TF, Strategy.TPU).exchange is None
    with pytest.raises(ValueError):
        Collective("all_to_all", "gradients")


def test_ddp_hides_its_all_reduce_behind_backward_except_the_last_bucket():
    workload = resolve_workload("resnet50", {}, "bf16", "ddp")
    exchange = exchange_seconds(workload.plugin.exchange, workload, 256, 0.1, nvlink8(), nvlink8())
    total = ring_seconds("all_reduce", workload.parameters * 4, nvlink8())
    assert exchange.total == pytest.approx(total)
    assert exchange.point == pytest.approx(ring_seconds("all_reduce", 25 * 2**20, nvlink8()))
    assert exchange.worst == pytest.approx(total)  # nothing hidden at the band's slow end


#: The namespace study's mlp (hidden 1024, depth 4): its FSDP units are its 5 dense layers.
MLP_UNITS = (256 * 1024 + 1024, 1024 * 1024 + 1024, 1024 * 1024 + 1024, 1024 * 1024 + 1024, 1024 * 10 + 10)


def gloo_link(alpha: float = 1e-3, gbit: float = 1.0) -> Topology:
    """2 ranks, one per namespace, over a link of `gbit` Gbit/s and `alpha` s a message (gloo)."""
    return Topology(1, 2, 1e6, gbit / 8, alpha, alpha, 0.0, alpha, alpha, 0.0, 1.0, 1.0, backend="gloo")


def test_fsdp_on_gloo_pays_every_unit_s_gathers_and_an_all_reduce_per_reduce_scatter_unhidden():
    workload = resolve_workload("mlp", {"hidden": 1024, "depth": 4}, "fp32", "fsdp")
    assert workload.units == MLP_UNITS
    alpha, beta = 1e-3, 0.125e9  # 1 Gbit/s
    params = sum(MLP_UNITS)
    gather = 5 * alpha + 0.5 * 4 * params / beta  # a latency per unit; (n-1)/n of the fp32 parameters
    scatter = 5 * 2 * alpha + 4 * params / beta  # gloo all-reduces for a reduce-scatter: 2 steps, all bytes
    exchange = exchange_seconds(workload.plugin.exchange, workload, 128, 10.0, gloo_link(), gloo_link())
    assert exchange.total == pytest.approx(2 * gather + scatter)
    assert exchange.point == pytest.approx(2 * gather + scatter)  # blocking calls: 10 s of compute hides none
    assert [term["calls"] for term in exchange.terms] == [5, 5, 5]


def test_fsdp_on_nccl_hides_all_but_the_units_each_pass_starts_or_ends_with():
    workload = resolve_workload("mlp", {"hidden": 1024, "depth": 4}, "fp32", "fsdp")
    link = nvlink8()
    first, last = (unit * 4 for unit in (MLP_UNITS[0], MLP_UNITS[-1]))
    exposed = (ring_seconds("all_gather", first, link) + ring_seconds("all_gather", last, link)
               + ring_seconds("reduce_scatter", first, link))
    plenty = exchange_seconds(workload.plugin.exchange, workload, 128, 10.0, link, link)
    assert plenty.point == pytest.approx(exposed)
    none = exchange_seconds(workload.plugin.exchange, workload, 128, 0.0, link, link)
    assert none.point == pytest.approx(none.total) and none.total > plenty.point


def test_collectives_sharing_the_backward_window_share_its_seconds():
    workload = resolve_workload("mlp", {"hidden": 1024, "depth": 4}, "fp32", "fsdp")
    link = nvlink8()
    none = exchange_seconds(workload.plugin.exchange, workload, 128, 0.0, link, link)
    forward, backward = none.terms[0]["seconds"], none.terms[1]["seconds"] + none.terms[2]["seconds"]
    compute = 3 * (backward - 1e-6) / 2  # the backward window falls 1 us short of the backward collectives
    some = exchange_seconds(workload.plugin.exchange, workload, 128, compute, link, link)
    assert some.point == pytest.approx(max(forward - compute / 3, ring_seconds("all_gather", MLP_UNITS[0] * 4, link))
                                       + max(1e-6, ring_seconds("all_gather", MLP_UNITS[-1] * 4, link)
                                             + ring_seconds("reduce_scatter", MLP_UNITS[0] * 4, link)))


def test_gloo_has_no_tree_and_runs_a_reduce_scatter_as_an_all_reduce():
    link = gloo_link()
    assert collective_seconds("reduce_scatter", 2**24, link)[0] == pytest.approx(
        ring_seconds("all_reduce", 2**24, link))
    assert collective_seconds("all_reduce", 1024, link)[1] == "ring"


def test_tensor_parallel_all_reduces_each_layers_activations_four_times():
    workload = resolve_workload("gpt2_small", {}, "bf16", "tensor")
    (term,) = exchange_seconds(workload.plugin.exchange, workload, 4, 1.0, nvlink8(), nvlink8()).terms
    assert term["bytes"] == 4 * 1024 * 768 * 2 and term["calls"] == 4 * 12 and term["exposed_s"] == term["seconds"]


def test_a_pipelines_bubble_is_p_minus_1_over_m_plus_p_minus_1():
    workload = resolve_workload("gpt2_small", {}, "bf16", "pipeline")
    exchange = exchange_seconds(workload.plugin.exchange, workload, 4, 1.0, nvlink8(), nvlink8(), microbatches=8)
    assert exchange.bubble == pytest.approx(7 / 15)


# --- memory ---------------------------------------------------------------------------------------
def test_memory_from_a_measured_base_agrees_with_the_recorded_h100_oom_and_success(catalogue):
    rows = [validation.memory_row(row, catalogue) for row in validation.load_rows()["memory"]]
    assert rows and all(row["inside"] for row in rows)
    oom = next(row for row in rows if row["recorded"] == "oom")
    assert oom["predicted"] > catalogue.device("H100").memory_bytes


def test_fsdp_shards_llama_state_and_the_largest_batch_is_what_the_room_holds(catalogue):
    workload = resolve_workload("llama3_8b", {"seq": 2048}, "bf16", "fsdp")
    small, big = catalogue.device("A100 40GB"), catalogue.device("H200")
    memory = memory_per_device(workload, big, 8, 1, None)
    state = workload.job(8, 1).state_estimate()["total"]
    assert memory.state_bytes == state < workload.parameters * 16 / 8 * 1.2  # 1/8 of fp32 params+grads+Adam
    per_sample = memory.activation_bytes_per_sample
    assert memory.max_batch_per_device == int((big.memory_bytes - state) // per_sample)
    assert memory_per_device(workload, small, 8, memory.max_batch_per_device, None).fits is False


def test_a_model_without_an_activation_estimate_says_so(catalogue, monkeypatch):
    from suites.models.resnet.spec import ResNet50

    monkeypatch.delattr(ResNet50, "activation_bytes_per_sample")  # a spec that counts nothing
    memory = memory_per_device(resolve_workload("resnet50", {}, "bf16", "ddp"), catalogue.device("H100"), 8, 256, None)
    assert memory.fits is None and "no activation estimate" in memory.note


# --- the projection -------------------------------------------------------------------------------
def options(catalogue, **kw) -> Options:
    return Options(catalogue.fabric(catalogue.default_fabric), "default", **kw)


def test_weak_scaling_on_the_same_board_is_the_base_per_device_rate_less_exposed_exchange(catalogue):
    workload = resolve_workload("resnet50", {}, "fp16", "ddp")
    base = parse_base("H100 SXM:1=2616@1280", catalogue)
    projection = project(workload, base, parse_target("H100 SXM:8", catalogue), options(catalogue), catalogue)
    step = 1280 / 2616 + ring_seconds("all_reduce", 25 * 2**20, nvlink8())
    assert projection.samples_per_s == pytest.approx(8 * 1280 / step, rel=1e-6)
    low, high = projection.band
    assert low < projection.samples_per_s <= high and low == pytest.approx(high * 0.9, rel=0.01)
    assert projection.inputs["base_samples_per_s"].kind == "published"
    assert projection.inputs["host_margin"].kind == "assumed"


def test_another_board_scales_the_base_by_its_compute_share_and_the_band_spans_both_roofs(catalogue):
    workload = resolve_workload("resnet50", {}, "fp16", "single")
    base = parse_base("A100 80GB:1=1582@1280", catalogue)
    projection = project(workload, base, parse_target("H100 SXM:1", catalogue), options(catalogue), catalogue)
    a100, h100 = catalogue.device("A100 80GB"), catalogue.device("H100")
    compute_ratio = 312.0 / 989.4
    memory_ratio = a100.bandwidth_gbs / h100.bandwidth_gbs
    low, high = projection.band
    assert low == pytest.approx(1582 / max(compute_ratio, memory_ratio))
    assert high == pytest.approx(1582 / min(compute_ratio, memory_ratio))
    assert projection.limited_by == "memory bandwidth"
    assert {"target_peak_tflops", "base_gemm_fraction", "compute_share"} <= set(projection.inputs)


def test_strong_scaling_splits_the_global_batch_and_says_what_would_narrow_the_band(catalogue):
    workload = resolve_workload("resnet50", {}, "bf16", "ddp")
    base = parse_base("H100 SXM:1=3000@256", catalogue)
    projection = project(workload, base, parse_target("H100 SXM:8", catalogue),
                         options(catalogue, scaling="strong", global_batch=256), catalogue)
    assert (projection.per_device_batch, projection.global_batch) == (32, 256)
    assert projection.band[0] < 0.2 * projection.samples_per_s  # a smaller batch's step may take as long
    assert any("--filter batch=32" in note for note in projection.notes)


def test_a_strategy_without_an_exchange_model_is_said_per_target(catalogue):
    workload = resolve_workload("mlp", {}, "fp32", "fsdp_tensor")
    base = parse_base("H100 SXM:1=1000@32", catalogue)
    projection = project(workload, base, parse_target("H100:8", catalogue), options(catalogue), catalogue)
    assert projection.samples_per_s is None and "no exchange model" in projection.error


def test_cost_comes_from_the_price_table_and_is_null_without_a_price(catalogue):
    from suites.report.analyses.prices import PriceTable

    workload = resolve_workload("resnet50", {}, "bf16", "ddp")
    base = parse_base("H100 SXM:1=3000@256", catalogue)
    with_prices = options(catalogue, prices=PriceTable.load(), samples=1e6)
    h100 = project(workload, base, parse_target("H100:8", catalogue), with_prices, catalogue)
    assert h100.cost_per_million == pytest.approx(8 * 2.99 / 3600 / h100.samples_per_s * 1e6)
    assert h100.cost_of_work == pytest.approx(h100.cost_per_million)
    h200 = project(workload, base, parse_target("H200:8", catalogue), with_prices, catalogue)
    assert h200.cost_per_million is None and h200.price_rule.startswith("no price")


@pytest.mark.parametrize("text", ["8", "8x2", "16"])
def test_device_counts(text):
    assert split_count(text, "--to") == {"8": (8, 1), "8x2": (16, 2), "16": (16, 2)}[text]


# --- the command ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "expected"), [
    (["--to", "H1000:8", "--base", "H100:1=100@8"], "unknown device 'H1000'; closest: H100"),
    (["--to", "H100:8", "--base", "H100:1=100@8", "--network", "infiniband xdr"], "unknown network"),
    (["--to", "H100:8", "--base", "H100:1=100@8", "--model", "resnet5"], "unknown model 'resnet5'; closest: resnet50"),
    (["--to", "H100:8", "--base", "H100:1=oops"], "--base 'H100:1=oops': expected DEVICE:N="),
    (["--to", "H100:eight", "--base", "H100:1=100@8"], "is no device count"),
    (["--to", "H100:8"], "give a base"),
])
def test_bad_input_is_one_line_and_exit_code_2(argv, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["predict", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and expected in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_json_has_the_fields_the_issue_lists_and_writes_no_record(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["predict", "--model", "resnet50", "--precision", "fp16", "--base", "H100 SXM:1=2616@1280",
                 "--to", "H100 SXM:8", "--to", "H200:8x2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    fields = {"device", "devices", "nodes", "samples_per_s", "per_device_samples_per_s", "step_s", "band",
              "limited_by", "memory_per_device_bytes", "fits", "max_batch_per_device", "cost_per_million", "inputs"}
    assert len(rows) == 2 and all(fields <= set(row) for row in rows)
    assert rows[1]["nodes"] == 2 and rows[1]["cost_per_million"] is None and all(r["projected"] for r in rows)
    assert {v["kind"] for v in rows[0]["inputs"].values()} <= {"measured", "catalogued", "published", "assumed",
                                                              "estimated"}
    assert rows[0]["inputs"]["activation_bytes_per_sample"]["source"].startswith("estimated (analytic)")
    assert list(tmp_path.iterdir()) == []


def test_catalogue_lists_devices_and_fabrics_with_sources(capsys):
    assert main(["predict", "--catalogue", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(d["memory_source"] and d["link_source"] and d["gemm_source"] for d in data["devices"])
    assert sum(f["default"] for f in data["fabrics"]) == 1 and all(f["source"] for f in data["fabrics"])


# --- validation scoring ---------------------------------------------------------------------------
def test_score_is_per_policy_and_leaves_incomparable_rows_out():
    rows = [{"policy": "weak", "error": 0.1, "inside": True}, {"policy": "weak", "error": -0.3, "inside": False},
            {"policy": "weak", "error": 0.05, "inside": True}, {"policy": "weak", "error": 5.0, "inside": False,
                                                                "comparable": False}]
    summary = validation.score(rows)["weak"]
    assert summary["rows"] == 3 and summary["median_abs_error"] == pytest.approx(0.1)
    assert summary["worst_abs_error"] == pytest.approx(0.3) and summary["band_coverage"] == pytest.approx(2 / 3)


def test_contended_rows_stay_out_of_the_headline_and_are_scored_beside_it():
    rows = [{"policy": "namespace", "error": 0.1, "inside": True, "contended": True},
            {"policy": "namespace", "error": -0.3, "inside": False, "contended": True},
            {"policy": "weak", "error": 0.05, "inside": True}]
    summary = validation.score(rows)
    assert summary["namespace"]["rows"] == 0 and summary["namespace"]["median_abs_error"] is None
    assert summary["namespace"]["contended_rows"] == 2
    assert summary["namespace"]["with_contended"]["worst_abs_error"] == pytest.approx(0.3)
    assert "with_contended" not in summary["weak"]


def namespace_row(strategy: str, **extra) -> dict:
    return {"id": f"{strategy}-1gbit", "framework": "torch", "strategy": strategy, "workload": "train_step",
            "model": "mlp", "sizes": {"hidden": 1024, "depth": 4}, "precision": "fp32", "per_device_batch": 128,
            "base_devices": 1, "base_samples_per_s": 1000.0, "target_devices": 2, "target_nodes": 2,
            "measured_samples_per_s": 700.0, "link_gbit_per_s": 1.0, "link_latency_s": 1e-3, **extra}


def test_a_namespace_row_is_the_one_rank_step_plus_the_exchange_over_the_measured_link():
    from suites.predict.namespace_rows import namespace_row as score_row

    params = sum(MLP_UNITS)
    compute = 128 / 1000.0
    ddp = score_row(namespace_row("ddp"), [], 0.1)
    all_reduce = 2e-3 + 4 * params / 0.125e9  # fits DDP's last 25 MiB bucket: nothing hidden
    assert ddp["predicted"] == pytest.approx(256 / (compute + all_reduce))
    assert ddp["band_low"] == pytest.approx(256 / (compute + all_reduce) * 0.9)
    fsdp = score_row(namespace_row("fsdp"), [], 0.1)
    exchange = 2 * (5e-3 + 2 * params / 0.125e9) + 10e-3 + 4 * params / 0.125e9
    assert fsdp["predicted"] == pytest.approx(256 / (compute + exchange)) and fsdp["predicted"] < ddp["predicted"]
    assert fsdp["section"] == "this machine, 2 namespaces, gloo" and not fsdp["contended"]
    assert "no samples, no other runs" in fsdp["note"]


def test_the_base_run_to_run_spread_widens_both_sides_of_the_band():
    from suites.predict.namespace_rows import namespace_row as score_row

    alone = score_row(namespace_row("ddp"), [], 0.0)
    spread = score_row(namespace_row("ddp"), [800.0, 1250.0], 0.0)
    assert spread["predicted"] == pytest.approx(alone["predicted"])
    assert spread["band_low"] < alone["band_low"] and spread["band_high"] > alone["band_high"]
    compute, exposed = 0.128, alone["exchange_exposed_s"]
    assert spread["band_high"] == pytest.approx(256 / (compute / 1.25 + exposed))


def test_the_shipped_namespace_rows_read_threads_and_contention_from_their_records(catalogue):
    rows = [row for row in validation.validate(catalogue) if row["policy"] == "namespace"]
    assert len(rows) == 12 and all(row["contended"] for row in rows)
    assert all("threads: base 1, each rank 1" in row["note"] for row in rows)
    by_run = {}
    for row in rows:
        by_run.setdefault(row["base_record"].split("/")[3], {})[row["strategy"]] = row["predicted"]
    assert all(run["fsdp"] < run["ddp"] for run in by_run.values())  # fsdp exchanges about twice ddp's bytes
    assert all(row["band_low"] < row["predicted"] < row["band_high"] for row in rows)


def test_the_validation_text_heads_each_section_and_marks_contended_rows(catalogue):
    from suites.frontends.commands.predict import validation_text

    text = validation_text(validation.validate(catalogue))
    assert "-- this machine, 2 namespaces, gloo" in text and "-- weak scaling" in text
    assert text.count("% contended ") == 12 and "namespace with its 12 contended rows:" in text


# --- the band's two sides -----------------------------------------------------------------------------
def test_a_measured_base_spread_is_its_quartiles_widened_to_other_runs():
    from suites.predict.base import measured_spread

    spread = measured_spread([0.9, 1.0, 1.0, 1.0, 1.1], [], 100.0)
    q1, median, q3 = 0.95, 1.0, 1.05  # statistics.quantiles' exclusive method on these five samples
    assert (spread.low, spread.high) == (pytest.approx(median / q3), pytest.approx(median / q1))
    wider = measured_spread([0.9, 1.0, 1.0, 1.0, 1.1], [80.0, 130.0], 100.0)
    assert (wider.low, wider.high) == (pytest.approx(0.8), pytest.approx(1.3)) and "2 other runs" in wider.how


def test_a_base_spread_moves_both_ends_of_the_band_and_a_published_one_states_none(catalogue):
    from dataclasses import replace

    from suites.predict.base import Spread

    workload = resolve_workload("resnet50", {}, "fp16", "ddp")
    published = parse_base("H100 SXM:1=2616@1280", catalogue)
    target = parse_target("H100 SXM:8", catalogue)
    plain = project(workload, published, target, options(catalogue), catalogue)
    assert plain.band[1] == pytest.approx(plain.samples_per_s)  # nothing stated: the fast side is the point
    assert plain.inputs["base_spread"].source == "a published figure states no spread"
    spread = project(workload, replace(published, spread=Spread(0.9, 1.1, "IQR")), target, options(catalogue),
                     catalogue)
    assert spread.samples_per_s == pytest.approx(plain.samples_per_s)
    assert spread.band[1] > plain.band[1] and spread.band[0] < plain.band[0]


def test_a_row_read_through_a_host_loader_gets_nvidia_s_loader_cost_at_the_slow_end(catalogue):
    from suites.predict.projection import HOST_LOADER_MARGIN

    row = next(r for r in validation.load_rows()["row"] if r["id"] == "dle-rn50-a100-fp16-1to8")
    loader = validation.throughput_row(row, catalogue)
    plain = validation.throughput_row({k: v for k, v in row.items() if k != "input"}, catalogue)
    assert HOST_LOADER_MARGIN == pytest.approx(1 - 868 / 1110)
    assert loader["predicted"] == pytest.approx(plain["predicted"])
    assert loader["band_low"] == pytest.approx(plain["band_low"] / 0.9 * (1 - HOST_LOADER_MARGIN))
    assert "host data loader" in loader["note"]


@pytest.mark.parametrize("words, label", [("V100 SXM2", "V100 SXM2 16GB"), ("v100-sxm3", "V100 SXM3 32GB (DGX-2)"),
                                          ("A100 SXM4 40GB", "A100 SXM4 40GB"), ("H100", "H100 SXM5 80GB")])
def test_a_device_is_named_by_the_words_of_its_label(catalogue, words, label):
    """The closest-names line offers labels ("V100 SXM2 16GB"): their words name the board."""
    assert catalogue.device(words).label == label


def test_words_that_fit_several_boards_are_refused_naming_each(catalogue):
    with pytest.raises(UserError, match=r"device 'A100' could be any of A100 SXM4 80GB, A100 SXM4 40GB; name one"):
        catalogue.device("A100")
