"""Each built-in model is one folder of `suites.models`: its spec names its torch and TF
implementations in that folder, and only the frameworks' catalogues import them."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from suites.cases.vocabulary import Framework
from suites.workloads.training import BUILTIN_SPECS

PACKAGE = Path(__file__).resolve().parent.parent / "suites"


@pytest.mark.parametrize("spec", BUILTIN_SPECS, ids=lambda spec: spec.name)
def test_every_builtin_spec_names_both_implementations_in_its_own_folder(spec):
    folder = spec.__module__.removesuffix(".spec")
    assert spec.__module__.startswith("suites.models.") and spec.__module__.endswith(".spec")
    assert set(spec.implementations) == {Framework.TORCH, Framework.TF}
    assert spec.implementations[Framework.TORCH].startswith("torch_model:")
    assert spec.implementations[Framework.TF].startswith("tf_model:")
    assert (PACKAGE.parent.joinpath(*folder.split(".")) / "torch_model.py").is_file()
    assert (PACKAGE.parent.joinpath(*folder.split(".")) / "tf_model.py").is_file()


def test_no_framework_or_workload_module_imports_a_model_implementation():
    """The generic code reaches a model's implementations through the catalogues only (no cycle)."""
    offenders = []
    for path in [*(PACKAGE / "frameworks").rglob("*.py"), *(PACKAGE / "workloads").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            offenders += [f"{path.relative_to(PACKAGE)}: {name}" for name in names
                          if name.startswith("suites.models.") and not name.endswith(".spec")]
    assert not offenders


@pytest.mark.parametrize("spec", BUILTIN_SPECS, ids=lambda spec: spec.name)
def test_the_torch_lookup_builds_the_class_the_spec_names(spec):
    pytest.importorskip("torch")
    from suites.frameworks.torch.catalog import module_class
    from suites.frameworks.torch.models import TorchModel

    built = module_class(spec())
    assert issubclass(built, TorchModel)
    declaring = next(kind for kind in spec.__mro__ if "implementations" in vars(kind))
    folder = declaring.__module__.removesuffix(".spec")
    assert f"{built.__module__}:{built.__name__}" == f"{folder}.{declaring.implementations[Framework.TORCH]}"


def test_tf_layers_come_from_the_spec_and_a_whole_forward_is_not_split():
    pytest.importorskip("tensorflow")
    from suites.frameworks.tf.catalog import layer_forwards
    from suites.models.mlp.spec import Mlp
    from suites.models.resnet.spec import ResNet50
    from suites.measure.unsupported import Unsupported

    assert len(layer_forwards(Mlp(depth=2))) == 3
    with pytest.raises(Unsupported, match="'resnet50' as one forward"):
        layer_forwards(ResNet50(image=32, width=8, resnet_depth=14, classes=10))
