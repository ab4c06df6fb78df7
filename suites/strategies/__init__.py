"""Strategies: how a case's work is spread over devices. One home per strategy per framework.

`suites/strategies/<framework>/<strategy>.py` — or, where the strategy has a mechanism of its
own, the package `suites/strategies/<framework>/<strategy>/` — holds everything about one
strategy of one framework. Its `PLUGIN` object says when it applies and why not, whether it is
emulated here, how its processes launch, and implements the hooks the framework's runnables
call (`base.StrategyPlugin` and the framework's base) and the optional capabilities it has
(`capabilities`); the package's other modules are its mechanism (a TF strategy's trainer, its
cluster serving), imported by the hooks. Plugin modules import no framework at import time;
their hooks import it when a case runs.
`suites.strategies.registry` finds them by that path, importing only the one asked for.
"""
