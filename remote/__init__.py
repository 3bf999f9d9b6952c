"""The laptop side without a UI. At the top the entry point (``cli``) and the ground
(``config``, ``fields``, ``transport``); the rest in wings, each with a lazy face:
``link`` (reach a box, the one door to its tools), ``watch`` (follow a run live),
``runs`` (runs on a box), ``weights`` (pull, push, safety), ``billing`` (instances and
money) and ``commands`` (the headless ``gpurent``). Never imports textual or torch; the
TUI and the ``gpurent`` command both call the functions here (docs/DESIGN-NOTES.md)."""
