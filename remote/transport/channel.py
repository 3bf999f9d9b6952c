"""One SSH channel's discipline: a bounded wait for requests paramiko would wait on
forever, paramiko's errors as one-line ``TransportError``s, and a command's stdout read
as lines with a cap (``SSHStream``)."""

from __future__ import annotations

import contextlib
import select
import threading
import time
from collections.abc import Iterator

import paramiko

from remote.transport.base import LineSplitter, TransportError
from trainer.text import one_line


class SSHTimeout(TransportError, TimeoutError):
    """A command or transfer on the box did not finish within its timeout."""


@contextlib.contextmanager
def watchdog(chan: paramiko.Channel, timeout: float, what: str) -> Iterator[None]:
    """Bound a channel request that paramiko waits on without a timeout (exec, subsystem):
    when ``timeout`` passes, the channel is closed and ``SSHTimeout`` raised."""
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        chan.close()

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    except Exception:
        if fired.is_set():
            raise SSHTimeout(f"{what}: no answer within {timeout:g}s") from None
        raise
    finally:
        timer.cancel()


def exec_nowait(chan: paramiko.Channel, command: str) -> None:
    """``chan.exec_command(command)`` without waiting for the server's answer, as
    OpenSSH's client does: the output follows the answer anyway, and a refusal closes the
    channel when paramiko handles it (the reader then sees the end). Saves one round trip
    per command. Built from the same message ``exec_command`` sends."""
    m = paramiko.Message()
    m.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
    m.add_int(chan.remote_chanid)
    m.add_string("exec")
    m.add_boolean(True)
    m.add_string(command)
    # paramiko's private API, which its stubs leave out; the channel is open, so its
    # transport is set.
    chan._event_pending()  # type: ignore[attr-defined]
    chan.transport._send_user_message(m)  # type: ignore[union-attr]


@contextlib.contextmanager
def errors(what: str) -> Iterator[None]:
    """Turn paramiko and socket failures into a one-line ``TransportError``."""
    try:
        yield
    except TransportError:
        raise
    except TimeoutError:
        raise SSHTimeout(f"{what}: timed out") from None
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise TransportError(f"{what}: {one_line(exc)}") from None


class SSHStream:
    """A command's stdout read line by line over one exec channel."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self._channel = channel

    def lines(self, timeout: float, max_line: int | None = None) -> Iterator[bytes]:
        """Yield stdout lines (without the newline) as they arrive; a last unterminated
        line is yielded at EOF. Raises ``TimeoutError`` when nothing arrived for
        ``timeout`` seconds, ``LineTooLong`` past ``max_line`` bytes without a newline and
        ``TransportError`` when the connection broke."""
        chan = self._channel
        split = LineSplitter("the box sent")
        last = time.monotonic()
        while True:
            line = split.take(max_line)
            if line is not None:
                yield line
                continue
            got = False
            with errors("reading from the box"):
                while chan.recv_stderr_ready():
                    # Drained, so that a chatty stderr cannot fill the channel's window.
                    chan.recv_stderr(65536)
                    got = True
                if chan.recv_ready():
                    data = chan.recv(65536)
                    if not data:
                        break
                    split.add(data)
                    got = True
                elif chan.eof_received or chan.closed:
                    break
            now = time.monotonic()
            if got:
                last = now
                continue
            if not chan.get_transport() or not chan.get_transport().is_active():
                raise TransportError("the connection to the box was lost")
            if now - last >= timeout:
                raise TimeoutError(f"nothing from the box for {timeout:g}s")
            select.select([chan], [], [], min(timeout - (now - last), 1.0))
        rest = split.rest()
        if rest:
            yield rest

    def close(self) -> None:
        """Close the channel (the command on the box gets EOF/SIGPIPE). Idempotent."""
        with contextlib.suppress(Exception):
            self._channel.close()
