"""Rules of the torch strategies: availability, emulation, launch. No framework imports here."""
from __future__ import annotations

from ..vocabulary import Strategy
from . import StrategyRules

RULES: dict[Strategy, StrategyRules] = {}
