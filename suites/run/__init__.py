"""How a case is run: the timer, the runnable contract, availability, launchers, the worker
process and the runner that stores each record. Strategy plugins and framework
implementations sit at this layer too."""
