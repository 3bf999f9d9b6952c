"""The GPU pane: utilisation, memory, temperature and power per GPU, with short history;
on a box without a GPU, its CPU and RAM instead. Hidden on narrow terminals (the header
still names the GPUs)."""

from __future__ import annotations

from collections import deque

from rich.text import Text

from remote.watch import GpuEvent, GpuSample, HostEvent
from tui.fmt import number, safe, spark
from tui.widgets.steady import SteadyStatic

#: Samples of history per GPU (one every couple of seconds).
HISTORY = 24


class GpuPane(SteadyStatic):
    """One block of lines per GPU; fed ``GpuEvent`` objects."""

    DEFAULT_CSS = """
    GpuPane { border: round $primary; padding: 0 1; height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(Text("no GPU samples yet", style="dim"), **kwargs)
        self.border_title = "gpu"
        self.latest: list[GpuSample] = []
        self.util_history: dict[int, deque[float]] = {}
        self.mem_history: dict[int, deque[float]] = {}
        self.host: HostEvent | None = None
        self.cpu_history: deque[float] = deque(maxlen=HISTORY)
        self.ram_history: deque[float] = deque(maxlen=HISTORY)

    def add(self, event: GpuEvent) -> None:
        """Record one sample of every GPU and redraw."""
        self.latest = list(event.gpus)
        for gpu in event.gpus:
            util = self.util_history.setdefault(gpu.index, deque(maxlen=HISTORY))
            mem = self.mem_history.setdefault(gpu.index, deque(maxlen=HISTORY))
            util.append(gpu.util_percent or 0.0)
            if gpu.mem_used_mib is not None and gpu.mem_total_mib:
                mem.append(100.0 * gpu.mem_used_mib / gpu.mem_total_mib)
        self.update(self.render_text())

    def add_host(self, event: HostEvent) -> None:
        """Record the box's CPU and RAM; shown while no GPU has reported."""
        self.host = event
        if event.cpu_percent is not None:
            self.cpu_history.append(event.cpu_percent)
        if event.mem_used_mib is not None and event.mem_total_mib:
            self.ram_history.append(100.0 * event.mem_used_mib / event.mem_total_mib)
        if not self.latest:
            self.border_title = "cpu · ram (no GPU)"
            self.update(self.render_text())

    def render_text(self) -> Text:
        """The pane's content for the latest sample."""
        if not self.latest:
            return self.host_text()
        text = Text()
        for n, gpu in enumerate(self.latest):
            if n:
                text.append("\n")
            text.append(f"{gpu.index} ", style="bold")
            text.append_text(safe(gpu.name, 40))
            text.append("\n  util ")
            text.append(f"{number(gpu.util_percent, 3):>4}%", style="bold")
            text.append(" ")
            text.append(spark(list(self.util_history.get(gpu.index, []))), style="green")
            text.append("\n  mem  ")
            if gpu.mem_used_mib is not None and gpu.mem_total_mib:
                text.append(f"{gpu.mem_used_mib / 1024:.1f}/{gpu.mem_total_mib / 1024:.0f} GiB ")
                text.append(spark(list(self.mem_history.get(gpu.index, []))), style="cyan")
            else:
                text.append("-")
            text.append("\n  ")
            temp = f"{gpu.temperature_c:.0f}°C" if gpu.temperature_c is not None else "-°C"
            power = f"{gpu.power_w:.0f} W" if gpu.power_w is not None else "- W"
            text.append(f"{temp}  {power}")
        return text

    def host_text(self) -> Text:
        """CPU and RAM of a box without a GPU."""
        host = self.host
        if host is None:
            return Text("no GPU reported by the box (nvidia-smi missing or no GPU)",
                        style="dim")
        text = Text("no GPU: training runs on the CPU\n", style="dim")
        cpus = f" of {host.cpus} CPUs" if host.cpus else ""
        text.append("cpu  ")
        text.append(f"{number(host.cpu_percent, 3):>4}%", style="bold")
        text.append(f"{cpus} ")
        text.append(spark(list(self.cpu_history)), style="green")
        text.append("\nram  ")
        if host.mem_used_mib is not None and host.mem_total_mib:
            text.append(f"{host.mem_used_mib / 1024:.1f}/{host.mem_total_mib / 1024:.0f} GiB ",
                        style="bold")
            text.append(spark(list(self.ram_history)), style="cyan")
        else:
            text.append("-")
        return text
