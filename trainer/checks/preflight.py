"""``python3 -m trainer preflight``: check the box before money is spent on it.

Reports torch and CUDA versions, each GPU (name, memory, compute capability against the
wheel's arch list, a real matmul), the driver from nvidia-smi, free disk against the need,
RAM, CPUs, /dev/shm and whether HF_HOME is on a persistent volume. Every finding is a
check with a status (``ok``, ``warn``, ``fail``). Exit codes: 0 no check failed,
1 a check failed, 2 bad arguments. ``--json`` prints the report documented in
docs/SCHEMAS.md (``gpurent.preflight/1``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

from trainer.checks import cuda as cuda_check
from trainer.checks import host as host_check
from trainer.text import human_bytes

SCHEMA = "gpurent.preflight/1"
STATUSES = ("ok", "warn", "fail")


class Report:
    """Accumulates the sections and checks of one preflight run."""

    def __init__(self) -> None:
        self.body: dict[str, Any] = {"schema": SCHEMA}
        self.checks: list[dict[str, str]] = []

    def check(self, name: str, status: str, message: str) -> None:
        """Record one finding."""
        assert status in STATUSES
        self.checks.append({"name": name, "status": status, "message": message})

    def finish(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        failed = [c["name"] for c in self.checks if c["status"] == "fail"]
        return {**self.body, "ok": not failed, "failed": failed, "checks": self.checks}


def check_torch_and_gpus(report: Report, require_gpu: bool) -> None:
    """torch, CUDA, the driver and each GPU with its arch support and a real kernel."""
    smi = cuda_check.query_nvidia_smi()
    report.body["driver"] = ({"version": smi["driver_version"], "cuda_version": smi["cuda_version"],
                              "error": smi["error"]} if smi else None)
    smi_gpus = smi["gpus"] if smi else []
    if smi is not None:
        if smi["error"]:
            report.check("driver", "warn", f"nvidia-smi: {smi['error']}")
        else:
            report.check("driver", "ok", f"NVIDIA driver {smi['driver_version']}, supports "
                         f"CUDA {smi['cuda_version'] or '?'}")
    try:
        import torch
    except ImportError as exc:
        report.body.update(torch=None, gpu_available=False, gpus=[])
        report.check("torch", "fail", f"torch is not importable ({exc}); install PyTorch first")
        return
    arch_list = list(torch.cuda.get_arch_list()) if torch.version.cuda else []
    cudnn = torch.backends.cudnn.version() if torch.version.cuda else None
    report.body["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                            "cudnn": cudnn, "arch_list": arch_list}
    report.check("torch", "ok", f"torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}"
                 + (f", cuDNN {cudnn}" if cudnn else ""))
    available = bool(torch.version.cuda) and torch.cuda.is_available()
    report.body["gpu_available"] = available
    if not available:
        report.body["gpus"] = []
        status = "fail" if require_gpu or smi_gpus else "warn"
        report.check("gpu", status, no_gpu_reason(torch, smi_gpus))
        return
    gpus = []
    for index in range(torch.cuda.device_count()):
        try:
            gpus.append(check_one_gpu(report, torch, index, arch_list))
        except RuntimeError as exc:  # CUDA initialisation failing for this device
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            why = cuda_check.explain_cuda_error(str(exc))
            report.check(f"gpu{index}", "fail",
                         f"cannot use GPU {index}: {text}" + (f" -- {why}" if why else ""))
    report.body["gpus"] = gpus


def no_gpu_reason(torch: Any, smi_gpus: list[dict[str, Any]]) -> str:
    """Plain words for why torch sees no GPU."""
    if smi_gpus:
        names = ", ".join(g["name"] for g in smi_gpus)
        why = ("this PyTorch is a CPU-only build" if not torch.version.cuda
               else "torch.cuda.is_available() is False")
        return (f"nvidia-smi sees {len(smi_gpus)} GPU(s) ({names}) but {why}; install a "
                "CUDA build of PyTorch that matches the driver")
    if not torch.version.cuda:
        return "no GPU: this PyTorch is a CPU-only build and nvidia-smi is absent or sees none"
    return "no GPU: torch.cuda.is_available() is False and nvidia-smi sees none"


def check_one_gpu(report: Report, torch: Any, index: int, arch_list: list[str]) -> dict[str, Any]:
    """Name, memory, capability vs the arch list and a real matmul on GPU ``index``."""
    props = torch.cuda.get_device_properties(index)
    capability = (int(props.major), int(props.minor))
    support = cuda_check.arch_support(capability, arch_list)
    label = f"gpu{index}"
    report.check(f"{label}.arch", "ok" if support.ok else "fail",
                 f"{props.name} ({support.arch}): {support.message}")
    kernel = cuda_check.kernel_check(torch, torch.device("cuda", index), arch=support.arch)
    if kernel.ok:
        report.check(f"{label}.kernel", "ok",
                     f"{cuda_check.MATMUL_N}x{cuda_check.MATMUL_N} matmul ran and checked "
                     f"({kernel.seconds * 1000:.1f} ms, ~{kernel.tflops or 0:.1f} TFLOP/s fp32)")
    else:
        message = f"matmul failed: {kernel.error}"
        if kernel.explanation:
            message += f" -- {kernel.explanation}"
        report.check(f"{label}.kernel", "fail", message)
    return {
        "index": index,
        "name": props.name,
        "memory_total_bytes": int(props.total_memory),
        "capability": f"{capability[0]}.{capability[1]}",
        "arch": support.arch,
        "arch_support": support.how,
        "kernel": kernel.to_dict(),
    }


def data_bytes_of(data: str) -> int:
    """Bytes on disk of a dataset given as a directory or a data.yaml (its ``path`` root,
    else the directory holding the yaml)."""
    path = Path(data)
    if path.is_dir():
        return host_check.tree_bytes(path)
    from trainer.checks.doctor import MissingDependency, dataset_root

    try:
        root = dataset_root(path)
    except MissingDependency as exc:
        raise ValueError(f"--data {data}: {exc}") from None
    return host_check.tree_bytes(root)


def check_host(report: Report, args: argparse.Namespace) -> None:
    """Disk, memory, CPUs and HF_HOME."""
    data_bytes = int(args.data_gb * 1e9) if args.data_gb is not None else 0
    if args.data:
        data_bytes += data_bytes_of(args.data)
    disk = host_check.disk_report(Path(args.project), data_bytes, int(args.checkpoint_gb * 1e9))
    report.body["disk"] = disk
    report.check("disk", "ok" if disk["enough"] else "fail",
                 f"{human_bytes(disk['free_bytes'])} free at {disk['path']}, need "
                 f"{human_bytes(disk['need_bytes'])} (data {human_bytes(data_bytes)} + "
                 f"checkpoints {human_bytes(disk['checkpoint_bytes'])} + 30 %)")

    mem = host_check.memory_report()
    report.body["memory"] = mem
    limit = mem["limit_bytes"]
    text = f"{human_bytes(mem['total_bytes'])} RAM, {human_bytes(mem['available_bytes'])} available"
    if limit is not None and mem["total_bytes"] and limit < mem["total_bytes"]:
        text += f", container limit {human_bytes(limit)}"
    report.check("memory", "ok", text)
    shm = mem["shm_bytes"]
    if shm is not None and shm < host_check.MIN_SHM_BYTES:
        report.check("shm", "warn", f"/dev/shm is only {human_bytes(shm)}: DataLoader workers may "
                     "die with 'Bus error'; use workers=0 or a container with a larger --shm-size")

    cpu = host_check.cpu_report()
    report.body["cpu"] = cpu
    text = f"{cpu['count']} CPUs, {cpu['usable']} usable"
    if cpu["quota"] is not None:
        text += f", quota {cpu['quota']:g} CPUs"
    report.check("cpu", "ok", text)

    hf = host_check.hf_home_report()
    report.body["hf_home"] = hf
    if not hf["set"]:
        report.check("hf_home", "warn", f"HF_HOME is not set; the Hub cache goes to {hf['path']}, "
                     f"{hf['reason']}. Set HF_HOME to a directory on a persistent volume")
    elif hf["persistent"] is False:
        report.check("hf_home", "warn", f"HF_HOME={hf['path']} is not persistent: {hf['reason']}")
    else:
        report.check("hf_home", "ok", f"HF_HOME={hf['path']}, {hf['reason']}")


def run_preflight(args: argparse.Namespace) -> dict[str, Any]:
    """Run every check and return the report (see docs/SCHEMAS.md)."""
    report = Report()
    report.body.update(python=platform.python_version(), executable=sys.executable,
                       hostname=socket.gethostname(), project=os.path.abspath(args.project))
    check_torch_and_gpus(report, args.require_gpu)
    check_host(report, args)
    return report.finish()


def render(report: dict[str, Any]) -> str:
    """The readable form of a report."""
    lines = [f"preflight on {report['hostname']} (python {report['python']} at "
             f"{report.get('executable') or '?'})"]
    width = max(len(c["name"]) for c in report["checks"])
    for c in report["checks"]:
        lines.append(f"  {c['status']:<5} {c['name']:<{width}}  {c['message']}")
    warns = sum(c["status"] == "warn" for c in report["checks"])
    verdict = "ok" if report["ok"] else "FAILED: " + ", ".join(report["failed"])
    lines.append(f"result: {verdict}" + (f" ({warns} warning(s))" if warns else ""))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    p = argparse.ArgumentParser(prog="python3 -m trainer preflight",
                                description="Check this box before training on it.")
    p.add_argument("--json", action="store_true", help="print the report as JSON "
                   "(schema gpurent.preflight/1, see docs/SCHEMAS.md)")
    p.add_argument("--require-gpu", action="store_true", help="fail when no usable GPU")
    p.add_argument("--project", default=".", help="where runs are written (disk check)")
    p.add_argument("--data", help="data.yaml or dataset directory to size for the disk check")
    p.add_argument("--data-gb", type=float, help="dataset size still to download, GB")
    p.add_argument("--checkpoint-gb", type=float, default=host_check.DEFAULT_CHECKPOINT_BYTES / 1e9,
                   help="space for checkpoints, GB (default %(default)g)")
    return p


def main(argv: list[str]) -> int:
    """Entry point: 0 when no check failed, 1 when one did, 2 on bad arguments."""
    args = build_parser().parse_args(argv)
    if args.data and not Path(args.data).exists():
        print(f"preflight: --data {args.data}: no such file or directory", file=sys.stderr)
        return 2
    try:
        report = run_preflight(args)
    except ValueError as exc:  # an unreadable data.yaml given with --data
        print(f"preflight: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0 if report["ok"] else 1
