"""The keyboard-driven Textual app (``gpurent-tui``) that runs on the laptop.

It holds no logic a script could want: every action calls a function in ``remote``.
Importing ``tui`` imports neither textual nor torch; ``tui.app`` brings in textual.
"""
