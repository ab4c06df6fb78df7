"""How a step is measured: the timer (`timing`), the runnable contract the frameworks implement,
what a strategy may declare it needs (`capabilities`, `launch`), memory, energy and telemetry
probes, and what a launcher and its processes agree on (`process_env`, `scratch`). No framework
is imported here; the runner above decides what runs where."""
