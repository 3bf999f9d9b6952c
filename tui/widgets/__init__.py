"""The panes of the main screen; each takes ``remote.events`` objects or plain values."""
