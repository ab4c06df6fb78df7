"""`python -m suites.worker`: the process of one case under torchrun, or one task of a TF cluster
started with its own TF_CONFIG (one machine or several).

The same entry point parbench's own launchers start (`suites.orchestration.case_process`), under the short
name the README documents for multi-machine runs.
"""
from suites.orchestration.case_process import main

if __name__ == "__main__":
    main()
