"""What an implementation raises where the hardware or library has no kernel for a case."""


class Unsupported(Exception):
    """Raised by an implementation that finds at run time that this combination has no kernel
    here (e.g. TF's Conv2D in NCHW fp16 on CPU). The case is recorded unavailable, not failed."""
