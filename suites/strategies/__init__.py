"""Strategies: how a case's work is spread over devices. One module per strategy per framework.

`suites/strategies/<framework>/<strategy>.py` holds everything about one strategy of one
framework, as a `PLUGIN` object: when it applies and why not, whether it is emulated here, how
its processes launch and with which environment, and the hooks the framework's runnables call
(wrap the model, split the batch, exchange gradients, a local step, how the result is checked).
Plugin modules import no framework at import time; their hooks import it when a case runs.
`suites.strategies.registry` finds them by that path, importing only the one asked for.
"""
