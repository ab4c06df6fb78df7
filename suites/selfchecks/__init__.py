"""Checks of parbench itself: its timer against hand-written baselines (`harness_overhead`,
`ddp_overhead` with `plain_ddp`), and whether a GPU/TPU machine runs every path (`readiness`,
the `parbench ready` command)."""
