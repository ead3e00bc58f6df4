"""guardpolicy: measure how much of a safety guard's benchmark score is policy and how much is capability."""

__version__ = "0.1.0"
