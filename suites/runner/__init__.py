"""The runner: a case planned once into its job (`suites.runner.plan`), then its availability,
estimate, deadline, launch (in this process, an isolated one, rank processes, or across nodes: a
Slurm step or a `--nnodes` group, `suites.runner.spanning`), the worker process each launched
process runs (`suites.runner.case_process`) and the record (`suites.runner.recording`), all owned
by one `suites.runner.runner.Runner` built per run. It sits above the strategies and takes their
jobs directly; nothing below it imports it."""
