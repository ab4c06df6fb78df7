"""Running cases: each case is resolved once into its job (`suites.strategies.jobs.job_for`)
and handed to the run layer (`suites.run`), which takes jobs and builds none. The entry points
that take cases (the runner, availability, launching, the per-case process) live here, above
the strategies, so the run layer below needs none of them."""
