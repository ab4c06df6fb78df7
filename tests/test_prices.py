"""The price table: rows match device names by whole words (the peaks table's matcher), every
priced row names its source and region, and a device without a price says why."""
from __future__ import annotations

import math

import pytest

from suites.cases.user_files import shipped_table
from suites.report.analyses.prices import NO_PRICE, PriceTable


def gpu_price(table: PriceTable, name: str, n_devices: int = 1) -> tuple[float, str]:
    return table.per_hour("box", "gpu", name, n_devices, 8.0)


@pytest.mark.parametrize("name, row", [
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),  # not the L4's price
    ("NVIDIA L40", "L40"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA GH200 480GB", "GH200"),  # not the H200's row
    ("NVIDIA A10", "A10"),
    ("NVIDIA A10G", "A10G"),  # not the A10's price
    ("NVIDIA H100 80GB HBM3", "H100"),  # what an H100 SXM calls itself
    ("NVIDIA H100 PCIe", "H100 PCIe"),  # not the SXM price
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
    ("NVIDIA A100-SXM4-40GB", "A100"),
    ("Tesla T4", "T4"),
    ("AMD Instinct MI300X", "MI300X"),
])
def test_each_board_gets_its_own_row(name, row):
    table = PriceTable.load()
    entry = next(entry for entry in table.devices if entry["match"] == row)
    price, rule = gpu_price(table, name)
    if entry.get("per_hour") is None:
        assert math.isnan(price) and rule == f"{NO_PRICE}: {entry['no_price_reason']}"
    else:
        assert price == entry["per_hour"] and f" {row} " in rule


@pytest.mark.parametrize("name", ["NVIDIA RTX A1000", "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "NVIDIA H800"])
def test_a_board_no_row_names_has_no_price_and_says_so(name):
    price, rule = gpu_price(PriceTable.load(), name)
    assert math.isnan(price) and rule.startswith(f"{NO_PRICE}: no row") and repr(name) in rule


def test_n_devices_multiply_the_price_of_one():
    price, rule = gpu_price(PriceTable.load(), "NVIDIA H100 PCIe", n_devices=4)
    assert price == pytest.approx(4 * 2.49) and rule.startswith("4 x H100 PCIe")


def test_every_shipped_row_has_a_cited_price_or_a_reason_and_the_table_a_date():
    data = shipped_table("prices.toml")
    assert str(data["date"])
    for entry in data["device"]:
        if "per_hour" in entry:
            assert entry["source"].startswith("as listed on ") and entry["region"], entry["match"]
        else:
            assert entry["no_price_reason"], entry["match"]
    for board in ("H200", "B200", "L40S", "MI300X", "TPU v5e", "TPU v5p", "TPU v6e"):
        assert any(entry["match"] == board for entry in data["device"]), board


def test_a_users_row_wins_over_a_more_specific_shipped_one(tmp_path, monkeypatch):
    user = tmp_path / "prices.toml"
    user.write_text('[[device]]\nmatch = "H100"\nper_hour = 1.5\n[[device]]\nmatch = "L4"\nper_hour = 0.5\n')
    monkeypatch.setenv("PARBENCH_PRICES", str(user))
    table = PriceTable.load()
    assert gpu_price(table, "NVIDIA H100 PCIe")[0] == 1.5
    assert gpu_price(table, "NVIDIA L4")[0] == 0.5
    assert NO_PRICE in gpu_price(table, "NVIDIA L40S")[1]  # the user's "L4" does not name an L40S


def test_the_summary_says_no_price_and_why_for_a_board_without_one():
    from suites.report.sections import summary
    from tests.test_report_analysis import frame_of, matmul, options, row, table

    frame = frame_of(table(row(matmul(device="gpu"), 1e-4, "box", device_name="NVIDIA L40S"),
                           row(matmul(device="gpu"), 2e-4, "box2", device_name="NVIDIA L4")), PriceTable.load())
    text = summary.build(frame, options(PriceTable.load())).text
    assert "No price for gpu NVIDIA L40S on box: no on-demand list price for an L40S was cited" in " ".join(text)
    assert not any("L40S" in line and "cheapest" in line for line in text)
