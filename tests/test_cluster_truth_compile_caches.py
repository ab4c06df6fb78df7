"""Issue 48 item 8: a compiled case's ranks compile into caches of their own on their own node — not
one folder on the shared filesystem for rank 0 of node 1 and rank 8 of node 2, not a folder the
user exported — and the record says so, naming an exported folder it replaced."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.runner import launchers
from suites.runner.slurm import _rank_script
from suites.runner.spanning import compile_cache_env, compile_caches_detail
from suites.strategies.jobs import job_for

COMPILED = job_for(Case.make("train_step", "torch", "cpu", "ddp", "fp32", 2, {"model": "mlp", "batch": 8},
                             compile="inductor"))
EAGER = job_for(Case.make("train_step", "torch", "cpu", "ddp", "fp32", 2, {"model": "mlp", "batch": 8}))
#: What a user on a cluster exports: caches on the shared home.
EXPORTED = {"TORCHINDUCTOR_CACHE_DIR": "/home/me/.cache/inductor", "TRITON_CACHE_DIR": "/home/me/.triton"}


def test_only_a_compiled_case_gets_cache_folders_and_its_record_names_what_they_replaced():
    assert compile_cache_env(EAGER, "/x") == {} and compile_caches_detail(EAGER, "here", EXPORTED) == {}
    assert compile_cache_env(COMPILED, "/tmp/l/compile-rank3") == {
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/l/compile-rank3/inductor", "TRITON_CACHE_DIR": "/tmp/l/compile-rank3/triton"}
    said = compile_caches_detail(COMPILED, "in /tmp of its node", EXPORTED)["compile_caches"]
    assert said.startswith("each rank's own, fresh, in /tmp of its node") and "cold compiles" in said
    assert "replaced the exported TORCHINDUCTOR_CACHE_DIR=/home/me/.cache/inductor, TRITON_CACHE_DIR=/home/me/.triton" \
        in said
    assert "replaced" not in compile_caches_detail(COMPILED, "here", {})["compile_caches"]


SHOW_CACHES = ["sh", "-c", 'touch "$TORCHINDUCTOR_CACHE_DIR.made"; echo "$TORCHINDUCTOR_CACHE_DIR $TRITON_CACHE_DIR"; '
               'exit 3']


def test_a_slurm_rank_compiles_into_a_fresh_folder_in_its_nodes_tmp_removed_when_it_ends(tmp_path):
    """The rank script as srun runs it on the node (before: TMPDIR, the step's folder on the shared
    filesystem, held every rank's caches; an exported folder was used as it was)."""
    script = tmp_path / "rank.sh"
    script.write_text(_rank_script(SHOW_CACHES, {"RANK": "0"}, compile_caches=compile_cache_env(COMPILED, "$cache")))
    env = {"PATH": "/usr/bin:/bin", **EXPORTED}
    runs = [subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True) for _ in range(2)]
    assert [run.returncode for run in runs] == [3, 3]  # the rank's own exit code
    folders = [run.stdout.split() for run in runs]
    for inductor, triton in folders:
        assert inductor.startswith("/tmp/parbench-compile-") and inductor.endswith("/inductor")
        assert triton == str(Path(inductor).with_name("triton"))
        assert not Path(inductor).parent.exists()  # removed with everything compiled into it
    assert folders[0] != folders[1]  # fresh each time


def test_an_eager_slurm_rank_script_is_as_before(tmp_path):
    assert "parbench-compile" not in _rank_script(SHOW_CACHES, {}, compile_caches=compile_cache_env(EAGER, "$cache"))


def test_ranks_launched_here_each_compile_into_their_own_folder_of_the_launch(monkeypatch, tmp_path):
    """Each rank of a compiled case started by `run_processes` (one machine, a --nnodes node) gets
    its own cache folders in the launch's temp folder (removed with it), not the user's exported
    ones; the record says so."""
    for name, value in EXPORTED.items():
        monkeypatch.setenv(name, value)
    seen = tmp_path / "seen"
    seen.mkdir()
    show = ("import json, os, sys; open(os.path.join(sys.argv[1], os.path.basename(sys.argv[2])), 'w').write(json"
            ".dumps([os.environ[name] for name in ('TORCHINDUCTOR_CACHE_DIR', 'TRITON_CACHE_DIR', 'TMPDIR')]))")
    monkeypatch.setattr(launchers, "worker_command", lambda job, timing, out: [sys.executable, "-c", show,
                                                                                str(seen), str(out)])
    outcome = launchers.run_processes(COMPILED, TimingConfig(case_timeout_s=60.0), [{}, {}])
    caches = [json.loads(path.read_text()) for path in sorted(seen.iterdir())]
    assert len(caches) == 2
    for rank, (inductor, triton, launch_tmp) in enumerate(caches):
        own = f"{launch_tmp}/compile-rank{rank}"
        assert (inductor, triton) == (f"{own}/inductor", f"{own}/triton")
    assert "replaced the exported TORCHINDUCTOR_CACHE_DIR=/home/me/.cache/inductor" in outcome.details["compile_caches"]
