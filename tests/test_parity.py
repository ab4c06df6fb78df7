"""`parbench parity`: parbench's training step beside the canonical implementation, interleaved
A B B A. The canonical packages are faked here (torchvision and transformers are not installed):
what is tested is the loop around them: what they are built from, what is timed and printed, and
what a missing package or an impossible size says."""
from __future__ import annotations

import sys
import types
from dataclasses import replace

import pytest

from suites.run.interleaved import abba
from suites.strategies.jobs import job_for

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from suites.frameworks.torch import parity  # noqa: E402
from suites.frontends.cli import main  # noqa: E402

TINY_RESNET = {"batch": 2, "image": 32, "resnet_depth": 14, "classes": 10}
TINY_GPT2 = {"batch": 2, "layers": 1, "seq": 8, "d_model": 16, "heads": 2, "ffn": 32, "vocab": 50}


# --- the interleaving -------------------------------------------------------------------------
def test_abba_alternates_and_takes_the_geometric_mean_of_the_rounds_ratios():
    order, clock = [], iter([1.0, 2.0, 2.0, 1.0, 1.0, 8.0, 8.0, 1.0])

    def timer(name):
        def block():
            order.append(name)
            return next(clock)
        return block

    result = abba(timer("A"), timer("B"), rounds=2)
    assert order == ["A", "B", "B", "A"] * 2
    assert result.round_ratios == (2.0, 8.0) and result.ratio == pytest.approx(4.0)
    assert result.a_seconds == (1.0, 1.0, 1.0, 1.0) and result.b_seconds == (2.0, 2.0, 8.0, 8.0)
    with pytest.raises(ValueError, match="at least one round"):
        abba(timer("A"), timer("B"), rounds=0)


# --- fake canonical packages --------------------------------------------------------------------
class FakeResNet(nn.Module):
    built: list = []

    def __init__(self, block, layers, num_classes):
        super().__init__()
        FakeResNet.built.append((block, layers, num_classes))
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, num_classes)

    def forward(self, x):
        return self.fc(self.conv(x).mean(dim=(2, 3)))


class FakeConfig:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class FakeLm(nn.Module):
    """Token embedding and a vocabulary head; the loss from `labels`, as HF models give it."""

    configs: list = []

    def __init__(self, config):
        super().__init__()
        FakeLm.configs.append(config)
        self.embed = nn.Embedding(config.vocab_size, 8)
        self.head = nn.Linear(8, config.vocab_size)

    def forward(self, input_ids, labels):
        logits = self.head(self.embed(input_ids))
        return types.SimpleNamespace(loss=nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()))


@pytest.fixture
def fake_torchvision(monkeypatch):
    resnet = types.SimpleNamespace(ResNet=FakeResNet, Bottleneck="bottleneck")
    module = types.ModuleType("torchvision")
    module.models = types.SimpleNamespace(resnet=resnet)
    module.__version__ = "0.0-fake"
    monkeypatch.setitem(sys.modules, "torchvision", module)
    FakeResNet.built.clear()


@pytest.fixture
def fake_transformers(monkeypatch):
    module = types.ModuleType("transformers")
    module.GPT2Config = module.BertConfig = FakeConfig
    module.GPT2LMHeadModel = module.BertForMaskedLM = FakeLm
    module.__version__ = "0.0-fake"
    monkeypatch.setitem(sys.modules, "transformers", module)
    FakeLm.configs.clear()


# --- parity with the fakes ----------------------------------------------------------------------
def test_parity_builds_the_canonical_resnet_at_the_cases_sizes_and_times_both_interleaved(fake_torchvision,
                                                                                           monkeypatch):
    # torchvision's ResNet is 64 wide; the fake takes any width, so the test's parbench model can be 8
    monkeypatch.setitem(parity.CANONICAL, "resnet50", replace(parity.CANONICAL["resnet50"], sizes_problem=lambda spec: None))
    case = parity.parity_case("resnet50", "cpu", "fp32", {**TINY_RESNET, "width": 8})
    assert case.param_dict["optimizer"] == "momentum"  # ResNet's recipe on both sides
    result = parity.run_parity(job_for(case), rounds=1, steps=1)
    assert FakeResNet.built == [("bottleneck", [1, 1, 1, 1], 10)]
    assert len(result.interleaved.a_seconds) == len(result.interleaved.b_seconds) == 2
    assert result.unit == "samples/s" and result.per_step == 2
    assert result.parbench_per_s > 0 and result.canonical_per_s > 0 and result.interleaved.ratio > 0
    assert result.canonical_version.startswith("torchvision")


def test_the_parity_command_prints_both_figures_and_the_ratio_for_a_language_model(fake_transformers, capsys):
    sizes = [f"--size={key}={value}" for key, value in TINY_GPT2.items()]
    assert main(["parity", "--device", "cpu", "--model", "gpt2_small", "--rounds", "1", "--steps", "1", *sizes]) == 0
    out = capsys.readouterr().out
    assert "parity on the CPU: small sizes" in out
    assert "gpt2_small: parbench " in out and "tokens/s | transformers.GPT2LMHeadModel" in out
    assert "parbench / canonical = " in out and "optimizer=adamw" in out
    (config,) = FakeLm.configs
    assert (config.vocab_size, config.n_positions, config.n_embd, config.n_layer, config.n_head, config.n_inner) == (
        50, 8, 16, 1, 2, 32)
    assert config.attn_pdrop == config.resid_pdrop == config.embd_pdrop == 0.0  # parbench has no dropout


def test_a_missing_package_is_named_with_the_way_out_and_nothing_is_timed(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert main(["parity", "--device", "cpu", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "resnet50: skipped: torchvision is not importable here" in out
    assert "bert_base: skipped: transformers is not importable here" in out and "pip install transformers" in out
    assert "parbench / canonical" not in out


def test_a_size_the_canonical_model_cannot_take_is_one_line_and_a_failing_exit(fake_torchvision, capsys):
    sizes = [f"--size={key}={value}" for key, value in {**TINY_RESNET, "width": 16}.items()]
    assert main(["parity", "--device", "cpu", "--model", "resnet50", "--rounds", "1", *sizes]) == 1
    assert "resnet50: not compared: torchvision's ResNet is 64 wide" in capsys.readouterr().out
    assert main(["parity", "--size", "batch"]) == 2  # a UserError: one line, exit 2
    assert "--size 'batch' is not KEY=VALUE" in capsys.readouterr().err
