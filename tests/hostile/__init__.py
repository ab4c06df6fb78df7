"""The hostile-input sweep (sweep.py), a script; tests/test_hostile_rows.py runs its rows in process."""
