"""A user's own model, benchmarked across strategies and precisions: fit a cubic polynomial.

    python -m suites.examples.poly            # or: python path/to/poly.py

The model is a function per framework that builds it (the same network in torch and Keras);
parbench seeds the framework's RNG before calling it, wraps it in each strategy (DDP ranks and
TF workers import this file again, so registration is at module level and the script's own work
sits under __main__).
"""
from __future__ import annotations

import numpy as np

import suites


def features(x: np.ndarray) -> np.ndarray:
    return np.concatenate([x, x**2, x**3], axis=1)


def polynomial_data(batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Points of y = 0.5 - x + 2x^3 on [-1, 1], as features (x, x^2, x^3) and targets."""
    x = np.random.default_rng(seed).uniform(-1, 1, (batch, 1))
    return features(x).astype(np.float32), (0.5 - x + 2 * x**3).astype(np.float32)


def build_torch():  # noqa: ANN201 - returns torch.nn.Module; torch is imported only when called
    import torch

    return torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def build_tf():  # noqa: ANN201 - returns a keras.Model; keras is imported only when called
    import keras

    return keras.Sequential([keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)])


POLY = suites.user_model("poly", input_shape=(3,), loss="mse", torch=build_torch, tf=build_tf,
                         data=polynomial_data, flops_per_sample=2 * (3 * 16 + 16 * 1))


if __name__ == "__main__":
    for record in suites.benchmark_model(POLY, batch=256, precisions=["fp32", "bf16"]):
        rate = record.metrics.get("samples_per_s")
        print(f"{record.case.id:60} {record.status:12} "
              f"{f'{rate:,.0f} samples/s' if rate else record.reason}  {record.check or ''}")
