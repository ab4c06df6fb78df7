"""A workload's asv benchmark version: a hash of exactly the code its cases run.

That is its workload module, its framework implementations (`suites.frameworks.implementations`),
the strategy plugins that apply to it in each framework, and every `suites` module these import,
directly or not (`suites.workloads.sources.source_files`: read, never imported); for a workload
that trains nothing, not what the plugins' training hooks import. Editing any of them invalidates
the workload's stored asv results; editing code none of its cases runs (another workload's model,
a strategy that does not apply to it) leaves them valid.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from suites.cases.vocabulary import Framework, Strategy
from suites.frameworks.implementations import implementations
from suites.strategies.registry import PLUGIN_PACKAGE, find_plugin, plugin_module
from suites.workloads.base import Workload
from suites.workloads.sources import source_files

#: The plugins' hooks only a training step calls (its trainer, its model wrapping): what they
#: import is code a kernel's or a collective's case never runs, so their versions leave it out.
TRAINING_HOOKS = frozenset({
    "trainer", "describe", "wrap", "check_wrap", "train_step", "local_step", "gradients", "global_loss",
    "devices_in_use", "data_shard", "handles_precision", "state_bytes_per_device", "activation_bytes_per_device"})


def version_sources(workload: type[Workload]) -> dict[str, Path]:
    """{module name: source file} of the code a case of `workload` runs, in name order."""
    implementation_modules = [path.partition(":")[0] for path in implementations(workload).values()]
    plugins = [plugin for framework in Framework for strategy in Strategy
               if (plugin := find_plugin(framework, strategy)) is not None and plugin.applies_to(workload)]
    plugin_modules = [plugin_module(plugin.framework, plugin.strategy) for plugin in plugins]
    # A kernel's or a collective's case never calls a plugin's training hooks: what they import
    # (a trainer, a model wrapper) is left out of its version.
    skipped = TRAINING_HOOKS if workload.kind != "training" else frozenset()

    def skip(module: str) -> frozenset[str]:
        return skipped if module.startswith(f"{PLUGIN_PACKAGE}.") else frozenset()

    return source_files((workload.__module__, *implementation_modules, *plugin_modules), skip)


def version_of(workload: type[Workload]) -> str:
    """A hash of the source of `version_sources(workload)`, in name order: asv's benchmark version."""
    digest = hashlib.sha256()
    for name, path in version_sources(workload).items():
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
