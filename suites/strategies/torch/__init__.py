"""PyTorch strategies: one module per strategy, each with its `PLUGIN`."""
