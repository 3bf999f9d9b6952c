"""The trainer's version: it names the box directory bootstrap uploads into."""

__version__ = "0.1.0"
