"""`--filter`: a term that matches nothing names the key or value at fault and what the suite has."""
from __future__ import annotations

import pytest

from suites.cases.case import Case
from suites.cases.filters import select
from suites.errors import UserError
from suites.frontends.cli import main

CASES = [Case.make("matmul", framework, device, params={"m": m, "n": 32, "k": 32})
         for framework in ("torch", "tf") for device in ("cpu", "gpu") for m in (64, 128)]


def error_of(expression: str) -> str:
    with pytest.raises(UserError) as error:
        select(CASES, expression, "tiny")
    message = str(error.value)
    assert "\n" not in message
    return message


def test_unknown_key_is_named_with_the_allowed_keys():
    message = error_of("framwork=torch")
    assert "unknown key 'framwork'" in message
    assert "workload, framework, device, strategy, precision, n_devices, compile, k, m, n" in message


def test_unknown_key_is_an_error_even_beside_terms_that_match():
    assert "unknown key 'size'" in error_of("framework=torch size=64")


def test_value_no_case_has_is_named_with_the_values_of_the_suite():
    message = error_of("device=tpu9")
    assert "matches none of the 8 cases of suite tiny" in message
    assert "no case has device tpu9; the suite's device values: cpu, gpu" in message
    assert "the suite's m values: 64, 128" in error_of("framework=tf m=6,12")


def test_values_that_occur_but_not_together_keep_the_general_message():
    message = error_of("framework=tf device=cpu m=64 no-such-id")
    assert "matches none" in message and "no case has" not in message


def test_a_known_value_among_unknown_ones_still_selects():
    assert {str(c.device) for c in select(CASES, "device=cpu,tpu9", "tiny")} == {"cpu"}
    assert len(select(CASES, "m=128 framework=tf", "tiny")) == 2


def test_cli_prints_one_line_for_an_unknown_filter_key(capsys):
    assert main(["list", "--suite", "quick", "--filter", "framwork=torch"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("parbench: error: filter 'framwork=torch': unknown key 'framwork'; keys of suite quick:")
    assert "\n" not in err and "framework" in err
