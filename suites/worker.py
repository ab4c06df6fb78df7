"""`python -m suites.worker`: the process of one case under torchrun (one machine or several).

The same entry point parbench's own launchers start (`suites.run.worker`), under the short
name the README documents for multi-machine runs.
"""
from suites.run.worker import main

if __name__ == "__main__":
    main()
