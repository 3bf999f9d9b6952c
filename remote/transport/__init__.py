"""Reaching a box: the ``Transport`` interface (``base``), OpenSSH-compatible connections
(``ssh``, with ``sshconfig`` and ``hostkeys``) and this machine (``local``)."""

from remote.transport.base import FileStat, RunResult, Stream, Transport, TransportError

__all__ = ["FileStat", "RunResult", "Stream", "Transport", "TransportError"]
