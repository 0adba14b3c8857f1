"""flame's version, in a module of its own so that code inside flame (the NVRTC cache key) can read it
without importing the package root."""

__version__ = "0.1.0"
