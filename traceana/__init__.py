"""traceana: explain every op of a PyTorch profiler trace against the GPU roofline."""

__version__ = "0.1.0"
