"""The laptop side without a UI: SSH and local transports, box control, providers and the
money model. Never imports textual or torch; both the TUI and the ``gpurent`` command
call the functions here."""
