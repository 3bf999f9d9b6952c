"""The panes of the main screen; each takes ``remote.watch.events`` objects or plain values."""
