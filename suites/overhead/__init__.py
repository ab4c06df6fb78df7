"""The old home of the self-checks and studies (now `suites.selfchecks`, `suites.studies`); only
`gpu_readiness` remains, so `python -m suites.overhead.gpu_readiness` keeps working."""
