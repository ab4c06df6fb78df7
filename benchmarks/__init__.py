"""asv benchmarks: thin adapters generated from the parbench registry (suites/frontends/asv_support.py).

One module per workload kind; each holds one class per workload (cases timed in the asv
process) and `<Workload>Launched` (cases of multi-process strategies). The suite is
$PARBENCH_ASV_SUITE: a built-in suite name or a .toml grid path (default: quick).
"""
