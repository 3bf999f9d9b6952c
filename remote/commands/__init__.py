"""Subcommands of the headless ``gpurent`` command, one module each.

Each module exposes ``register(subparsers)``, which adds its parser and sets
``func=run`` where ``run(args) -> int`` does the work and returns the exit code.
"""
