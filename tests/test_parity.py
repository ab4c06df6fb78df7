"""`parbench parity`: parbench's training step beside the canonical implementation, interleaved
A B B A. The canonical packages are faked here (torchvision and transformers need not be
installed): what is tested is the loop around them: what they are built from, what is timed and
printed, what a missing or broken package or an impossible size says, and each side's contention.
Where transformers is installed, the two sides' models and optimizers are built at tiny sizes and
compared on the points the parity module documents (dropout, attention, GELU, norms, tying,
padding, loss, optimizer). No assertion reads a wall clock: the CPU meter is a stub wherever a
verdict is asserted, so the tests hold while other processes keep the cores busy."""
from __future__ import annotations

import sys
import types
from dataclasses import replace

import pytest

from suites.records.contention import CpuUsage
from suites.measure.interleaved import abba, combined_usage
from suites.strategies.jobs import job_for

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
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
    monkeypatch.setitem(parity.CANONICAL, "resnet50",
                        replace(parity.CANONICAL["resnet50"], sizes_problem=lambda spec: None))
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
    assert "resnet50: not compared: torchvision is not importable here" in out
    assert "bert_base: not compared: transformers is not importable here" in out and "pip install transformers" in out
    assert "parbench / canonical" not in out


def test_a_size_the_canonical_model_cannot_take_is_one_line_and_a_failing_exit(fake_torchvision, capsys):
    sizes = [f"--size={key}={value}" for key, value in {**TINY_RESNET, "width": 16}.items()]
    assert main(["parity", "--device", "cpu", "--model", "resnet50", "--rounds", "1", *sizes]) == 1
    assert "resnet50: not compared: torchvision's ResNet is 64 wide" in capsys.readouterr().out
    assert main(["parity", "--size", "batch"]) == 2  # a UserError: one line, exit 2
    assert "--size 'batch' is not KEY=VALUE" in capsys.readouterr().err


# --- each side's contention -----------------------------------------------------------------------
def usage(own_s: float, busy_s: float, wall_s: float = 1.0, cores: int = 2) -> CpuUsage:
    return CpuUsage(wall_s, own_s, busy_s, 0.0, cores, resolution=0.01)


QUIET = usage(own_s=1.9, busy_s=2.0)  # others took 5% of 2 cores over 1 s
BUSY = usage(own_s=1.0, busy_s=2.0)  # others took 50%


class StubMeter:
    """A CpuMeter whose readings are given, one per block in the order blocks run."""

    def __init__(self, usages):
        self.usages = iter(usages)

    def read(self):
        return None

    def usage(self, before, after, span="timed blocks"):
        return next(self.usages)


def test_abba_reads_each_sides_cpu_over_its_own_blocks_and_sums_them():
    blocks = iter([1.0, 2.0, 2.0, 1.0])
    result = abba(lambda: next(blocks), lambda: next(blocks), rounds=1, meter=StubMeter([QUIET, BUSY, BUSY, QUIET]))
    assert result.a_cpu.wall_s == 2.0 and result.a_cpu.own_s == pytest.approx(3.8)
    assert result.a_cpu.others_core_share == pytest.approx(0.05)
    assert result.b_cpu.others_core_share == pytest.approx(0.5)
    assert "2 timed blocks" in result.a_cpu.span
    assert combined_usage([QUIET, None], "x") is None  # a partial sum would understate the others
    assert abba(lambda: 1.0, lambda: 1.0, rounds=1).a_cpu is None  # no meter, no reading


def test_block_steps_make_the_faster_sides_block_last_the_minimum():
    assert parity.block_steps(0.1, 0.2, steps=2, min_block_s=0.5) == 10  # 50 ms a step on the faster side
    assert parity.block_steps(3.0, 4.0, steps=2, min_block_s=0.5) == 2  # never fewer than asked
    assert parity.block_steps(0.0, 1.0, steps=1) == parity.MAX_BLOCK_STEPS


def _parity_lines(capsys, monkeypatch, usages, *extra):
    monkeypatch.setattr(parity, "cpu_meter", lambda: StubMeter(usages))
    sizes = [f"--size={key}={value}" for key, value in TINY_GPT2.items()]
    assert main(["parity", "--device", "cpu", "--model", "gpt2_small", "--rounds", "1", "--steps", "1",
                 *sizes, *extra]) == 0
    return capsys.readouterr().out


def test_parity_prints_each_sides_share_of_the_cores_over_its_blocks(fake_transformers, capsys, monkeypatch):
    out = _parity_lines(capsys, monkeypatch, [QUIET] * 4)
    assert ("cores over each side's 2 timed blocks, interleaved A B B A: parbench: others took 5% of its 2 cores, "
            "it ran 95%; canonical: others took 5% of its 2 cores, it ran 95% (contended above 25%)") in out
    assert "NOT TO BE TRUSTED" not in out


def test_a_ratio_where_one_side_was_contended_is_flagged_not_to_be_trusted(fake_transformers, capsys, monkeypatch):
    out = _parity_lines(capsys, monkeypatch, [QUIET, BUSY, BUSY, QUIET])  # A B B A: the canonical side's blocks
    assert "canonical: others took 50% of its 2 cores" in out
    assert "NOT TO BE TRUSTED: canonical contended (canonical: others took 50% of its 2 cores" in out
    assert "parbench / canonical = " in out  # the figure is still printed, flagged


def test_run_parity_judges_both_sides(fake_transformers, monkeypatch):
    case = parity.parity_case("gpt2_small", "cpu", "fp32", TINY_GPT2)
    result = parity.run_parity(job_for(case), rounds=1, steps=1, meter=StubMeter([BUSY, QUIET, QUIET, BUSY]))
    assert result.parbench_contention.contended and not result.canonical_contention.contended
    assert result.contended == ["parbench"]
    assert result.parbench_contention.starved is not None  # a CPU case: its threads' share is judged


# --- a canonical package that is installed but fails to load -------------------------------------
@pytest.fixture
def broken_torchvision(tmp_path, monkeypatch):
    """torchvision installed for another torch: importing it raises RuntimeError, not ImportError."""
    package = tmp_path / "torchvision"
    package.mkdir()
    (package / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.fixture
def transformers_importing_torchvision(monkeypatch):
    """A transformers whose classes, loaded lazily, import torchvision where it is installed (as HF's
    image utilities do: a broken torchvision makes every HF model fail to import)."""
    import importlib.util

    module = types.ModuleType("transformers")
    classes = {"GPT2Config": FakeConfig, "BertConfig": FakeConfig, "GPT2LMHeadModel": FakeLm,
               "BertForMaskedLM": FakeLm}

    def lazy(name):
        if name not in classes:
            raise AttributeError(name)
        if importlib.util.find_spec("torchvision") is not None:
            import torchvision  # noqa: F401
        return classes[name]

    module.__getattr__ = lazy
    module.__version__ = "0.0-fake"
    monkeypatch.setitem(sys.modules, "transformers", module)
    FakeLm.configs.clear()


def test_a_torchvision_that_fails_to_load_costs_only_resnet(broken_torchvision, transformers_importing_torchvision,
                                                            capsys, monkeypatch):
    monkeypatch.setattr(parity, "cpu_meter", lambda: StubMeter([QUIET] * 8))
    sizes = [f"--size={key}={value}" for key, value in TINY_GPT2.items()]
    assert main(["parity", "--device", "cpu", "--rounds", "1", "--steps", "1", *sizes]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("resnet50")]
    (line,) = lines
    assert line.startswith("resnet50: not compared: torchvision is installed but fails to load (RuntimeError: "
                           "operator torchvision::nms does not exist); install the torchvision release built for "
                           "this torch to compare (for torch ")
    assert "pip install 'torchvision==" in line  # the release that matches the installed torch, named
    assert "gpt2_small: parbench " in out and "bert_base: parbench " in out
    assert "loaded with torchvision hidden: it is installed but fails to load (RuntimeError" in out
    assert "torchvision" not in sys.modules  # hidden only while transformers loaded


def test_a_canonical_class_that_fails_to_import_is_one_line(monkeypatch):
    module = types.ModuleType("transformers")

    def lazy(name):
        raise ModuleNotFoundError(f"Could not import module {name!r}") from RuntimeError("some kernel is missing")

    module.__getattr__ = lazy
    monkeypatch.setitem(sys.modules, "transformers", module)
    reason = parity.unavailable_reason("bert_base")
    assert reason.startswith("transformers is installed but fails to load (ModuleNotFoundError: Could not import "
                             "module 'BertConfig', from RuntimeError: some kernel is missing)")
    assert "\n" not in reason


# --- the two sides compute the same step ----------------------------------------------------------
TINY_LM = {"batch": 2, "layers": 2, "seq": 8, "d_model": 16, "heads": 2, "ffn": 32, "vocab": 50}


def test_the_hf_configs_follow_the_parbench_spec_on_every_documented_point(fake_transformers):
    gpt2 = parity.parity_case("gpt2_small", "cpu", "fp32", TINY_LM)
    bert = parity.parity_case("bert_base", "cpu", "fp32", TINY_LM)
    gpt2_spec, bert_spec = job_for(gpt2).workload.model, job_for(bert).workload.model
    g, b = parity.gpt2_config(gpt2_spec), parity.bert_config(bert_spec)
    assert (g["resid_pdrop"], g["embd_pdrop"], g["attn_pdrop"]) == (0.0, 0.0, 0.0)
    assert (b["hidden_dropout_prob"], b["attention_probs_dropout_prob"]) == (0.0, 0.0)
    assert g["attn_implementation"] == b["attn_implementation"] == "sdpa"
    assert g["activation_function"] == "gelu_pytorch_tanh" and gpt2_spec.gelu_tanh  # one fused tanh GELU
    assert b["hidden_act"] == "gelu" and not bert_spec.gelu_tanh  # exact erf
    assert g["layer_norm_epsilon"] == gpt2_spec.layer_norm_eps == 1e-5
    assert b["layer_norm_eps"] == bert_spec.layer_norm_eps == 1e-12
    assert g["tie_word_embeddings"] and b["tie_word_embeddings"] and gpt2_spec.tied_embedding
    assert b["pad_token_id"] is None  # no padding check (a host sync a step on a GPU), no pad row
    assert b["type_vocab_size"] == bert_spec.token_types and not b["is_decoder"]
    assert g["n_positions"] == b["max_position_embeddings"] == 8
    assert not g["scale_attn_by_inverse_layer_idx"] and not g["reorder_and_upcast_attn"]


def _sdpa_calls(monkeypatch):
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kwargs):
        calls.append((attn_mask is None, bool(is_causal), float(dropout_p),
                      pytest.approx(scale if scale is not None else query.shape[-1] ** -0.5)))
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, **kwargs)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("model", ["gpt2_small", "bert_base"])
def test_the_built_models_and_optimizers_agree_on_the_documented_points(model, monkeypatch):
    pytest.importorskip("transformers")
    job = job_for(parity.parity_case(model, "cpu", "fp32", TINY_LM))
    pair = parity.build_pair(job)
    try:
        ours, theirs, spec = pair.runnable.model, pair.canonical.module, job.workload.model
        # dropout: none on either side
        assert not [m for m in ours.modules() if isinstance(m, nn.Dropout)]
        assert all(m.p == 0.0 for m in theirs.modules() if isinstance(m, nn.Dropout))
        # attention: SDPA on both, no mask, causal for GPT-2 only, no dropout, 1/sqrt(d_head)
        calls = _sdpa_calls(monkeypatch)
        x = pair.canonical.x
        with torch.no_grad():
            ours(x)
            ours_calls = list(calls)
            calls.clear()
            theirs(input_ids=x)
        assert ours_calls == calls == [(True, model == "gpt2_small", 0.0, ours_calls[0][3])] * spec.layers
        # GELU: tanh (GPT-2) or exact (BERT), the same function
        z = torch.randn(64)
        act = theirs.transformer.h[0].mlp.act if model == "gpt2_small" else \
            theirs.bert.encoder.layer[0].intermediate.intermediate_act_fn
        assert torch.equal(act(z), F.gelu(z, approximate="tanh" if spec.gelu_tanh else "none"))
        # every LayerNorm's eps, and as many norms
        eps = lambda module: [m.eps for m in module.modules() if isinstance(m, nn.LayerNorm)]  # noqa: E731
        assert eps(ours) == eps(theirs) == [spec.layer_norm_eps] * len(eps(ours))
        # the vocabulary projection is the token embedding
        assert theirs.get_output_embeddings().weight is theirs.get_input_embeddings().weight
        # the same parameters, in number; BERT's q, k, v as three tensors each (HF) or one (parbench)
        numel = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
        assert numel(ours) == numel(theirs)
        extra = 4 * spec.layers if model == "bert_base" else 0
        assert len(list(theirs.parameters())) == len(list(ours.parameters())) + extra
        if model == "bert_base":
            assert theirs.bert.embeddings.word_embeddings.padding_idx is None and theirs.bert.pooler is None
            assert theirs.bert.embeddings.token_type_embeddings.num_embeddings == spec.token_types
        # the optimizer: the same class and options, one group each
        ours_opt, theirs_opt = pair.runnable.optimizer, pair.canonical.optimizer
        assert type(ours_opt) is type(theirs_opt) is torch.optim.AdamW
        settings = lambda opt: [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]  # noqa: E731
        assert settings(ours_opt) == settings(theirs_opt) and len(theirs_opt.param_groups) == 1
        assert theirs_opt.param_groups[0]["weight_decay"] == 0.1
        # the loss: cross-entropy over the vocabulary, fp32, labels shifted by HF GPT-2 only
        y = pair.canonical.y
        with torch.no_grad():
            output = theirs(input_ids=x, labels=y)
        logits = output.logits
        expected = (F.cross_entropy(logits[:, :-1].flatten(0, 1), y[:, 1:].flatten()) if model == "gpt2_small"
                    else F.cross_entropy(logits.flatten(0, 1), y.flatten()))
        assert output.loss.dtype == torch.float32 and torch.allclose(output.loss, expected)
        assert (y >= 0).all()  # never ignore_index
    finally:
        pair.runnable.teardown()


def test_the_profile_names_the_ops_where_the_sides_differ(fake_transformers, capsys, monkeypatch):
    out = _parity_lines(capsys, monkeypatch, [QUIET] * 4, "--profile", "5")
    lines = out.splitlines()
    (head,) = [line for line in lines if "profile, 1 steps each side, self CPU time a step (calls a step)" in line]
    rows = lines[lines.index(head) + 1:lines.index(head) + 6]
    assert rows and all("parbench" in row and "canonical" in row for row in rows)
    assert any("aten::" in row for row in rows)


def test_the_command_and_the_module_agree_on_the_block_length():
    from suites.frontends.commands import parity as command

    assert command.MIN_BLOCK_S == parity.MIN_BLOCK_S


def test_with_the_real_transformers_a_broken_torchvision_costs_only_resnet(broken_torchvision, tmp_path):
    """HF transformers imports torchvision where it is installed: a broken one made GPT2LMHeadModel
    fail to import. A fresh process, as the real package caches what it found at its first import."""
    pytest.importorskip("transformers")
    import os
    import subprocess

    sizes = [f"--size={key}={value}" for key, value in TINY_GPT2.items()]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "suites", "parity", "--device", "cpu", "--model", "resnet50",
                           "--model", "gpt2_small", "--rounds", "1", "--steps", "1", *sizes],
                          capture_output=True, text=True, env=env, timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("resnet50: not compared: torchvision is installed but fails to load (RuntimeError: operator "
            "torchvision::nms does not exist)") in done.stdout
    assert "gpt2_small: parbench " in done.stdout and "loaded with torchvision hidden" in done.stdout
