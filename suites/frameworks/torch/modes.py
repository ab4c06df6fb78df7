"""torch.compile's modes parbench names (imports no torch: the strategy rules read them too)."""

#: The mode that captures CUDA graphs: the step replays as one graph (NVIDIA GPUs only).
CUDA_GRAPHS_MODE = "reduce-overhead"
