"""A TF cluster task's TF_CONFIG inside a Slurm step, from TensorFlow's own
`tf.distribute.cluster_resolver.SlurmClusterResolver`.

On a Slurm cluster whose nodes are hosts of their own, a TF case's tasks take their cluster from
the resolver, as TF documents for Slurm: the step's nodes (SLURM_STEP_NODELIST), the tasks on each
(SLURM_STEP_TASKS_PER_NODE), this task's place (SLURM_PROCID), one port a task from `port_base` on
each node. parbench places the GPUs itself (one a task, CUDA_VISIBLE_DEVICES set by the launcher),
so the resolver's own placement is off. The resolver orders jobs by name and tasks by host name;
parbench uses it only for clusters whose task order that is too (`resolver_order_holds`: one job,
`multiworker`'s workers), and derives TF_CONFIG itself otherwise, and where the nodes share one host
(a test cluster: every task would get the same port, and Slurm's node names need not resolve).
"""
from __future__ import annotations

import json
import os
from typing import Mapping

#: Set by parbench's Slurm placement in a TF task's environment: the first port of the tasks on
#: each node; the worker then builds TF_CONFIG from the resolver (`tf_config_from_slurm`).
SLURM_PORT_ENV = "PARBENCH_TF_SLURM_PORT"


def resolver_order_holds(cluster: Mapping[str, list[str]]) -> bool:
    """Whether the resolver would number the tasks as parbench does (jobs in the cluster's order,
    rank r the r-th task): it sorts jobs by name, so the cluster's job names must be sorted."""
    return list(cluster) == sorted(cluster)


def tf_config_from_slurm(jobs: Mapping[str, int], port_base: int) -> str:
    """This task's TF_CONFIG from `SlurmClusterResolver` (`jobs`: tasks per job, in rank order)."""
    import tensorflow as tf
    from tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver import expand_tasks_per_node

    most_on_a_node = max(expand_tasks_per_node(os.environ["SLURM_STEP_TASKS_PER_NODE"]))
    # one "GPU" a task so the resolver places every task (it packs tasks by GPUs); placing them is ours
    resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
        jobs=dict(jobs), port_base=port_base, gpus_per_node=most_on_a_node, gpus_per_task=1, auto_set_gpu=False)
    cluster = resolver.cluster_spec().as_dict()
    return json.dumps({"cluster": cluster, "task": {"type": resolver.task_type, "index": resolver.task_id}})
