"""Checks of parbench's own measuring machinery against hand-written baselines."""
