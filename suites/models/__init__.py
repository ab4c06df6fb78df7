"""The built-in models, one folder per model: its framework-neutral spec and its torch and TF
implementations side by side.

A folder ``suites/models/<model>/`` holds

- ``spec.py``: the `ModelSpec` (`suites.workloads.model_spec`): parameter names and shapes in the
  canonical layout, seeded weights, FLOPs, batches, and `implementations`, the import path of
  the model in each framework. Workload level: it imports NumPy, `suites.cases` and
  `suites.workloads` only (and another model's spec where it builds on it), never a framework.
- ``torch_model.py``: a `suites.frameworks.torch.models.TorchModel` subclass built from the
  spec's weights, with its `stage_layers` where pipeline and model parallelism may split it.
- ``tf_model.py``: a function of the spec returning its layers (a list of
  `suites.frameworks.tf.models.Layer`) or one `Forward`, each a function of the canonical weights.

The two framework modules are framework level: they import torch or TensorFlow and the generic
pieces of `suites.frameworks` (the model base, shared layers, losses). The framework's generic
code finds them through the spec's `implementations`
(`suites.frameworks.model_folders.model_implementation`), importing them when a case asks, so no framework module
imports a model folder and a new model changes no framework file.

To add a model: make its folder with the three modules (the spec naming its two implementations
by import path), and add its spec to `BUILTIN_SPECS` in `suites.workloads.training`; its size
fields (declared with `size`) become `train_step` parameters. A spec that subclasses another
(BERT and GPT-2 subclass the transformer) inherits its implementations.

User models (`suites.workloads.user_model`) are no folder here: a user's builders make them.
"""
