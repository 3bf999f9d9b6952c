"""CUDA checks for preflight: architecture support, a real kernel per device, nvidia-smi.

The pure parts (``arch_support``, ``explain_cuda_error``, ``parse_smi_query``,
``parse_smi_cuda_version``) take plain values so they are tested without a GPU; the
parts that touch a device (``kernel_check``, ``query_nvidia_smi``) are thin around them.
torch is never imported here: callers pass the module in.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import Any

from trainer import smi

#: Side of the square matrices multiplied on each device.
MATMUL_N = 2000

_ARCH_RE = re.compile(r"^(sm|compute)_(\d+)([a-z]?)$")


@dataclass(frozen=True)
class ArchSupport:
    """How this PyTorch build runs kernels on a GPU of a given compute capability.

    ``how`` is ``native`` (a cubin for exactly this architecture), ``compatible`` (a cubin
    for an older minor version of the same major, which the driver runs), ``ptx`` (only
    PTX for an older architecture: works, JIT-compiled at first use, slow start), or
    ``missing`` (nothing this GPU can run: the first kernel fails with "no kernel image
    is available for execution on the device"), or ``unknown`` (empty arch list)."""

    ok: bool
    how: str
    arch: str
    message: str


def _parse_arch(entry: str) -> tuple[str, int, int, str] | None:
    match = _ARCH_RE.match(entry.strip())
    if match is None:
        return None
    kind, number, suffix = match.group(1), int(match.group(2)), match.group(3)
    return kind, number // 10, number % 10, suffix


def arch_name(capability: tuple[int, int]) -> str:
    """``(8, 6)`` -> ``"sm_86"``; ``(12, 0)`` -> ``"sm_120"``."""
    return f"sm_{capability[0]}{capability[1]}"


def arch_support(capability: tuple[int, int], arch_list: list[str]) -> ArchSupport:
    """Judge whether a GPU of ``capability`` can run kernels of a build with ``arch_list``
    (``torch.cuda.get_arch_list()``).

    The rules are CUDA's: a cubin built for X.y runs on X.z with z >= y (same major);
    arch-specific cubins (``sm_90a``) run only on exactly that capability; PTX for
    ``compute_XY`` is JIT-compiled for any capability >= X.Y (not the ``a`` variants)."""
    arch = arch_name(capability)
    entries = [p for p in (_parse_arch(e) for e in arch_list) if p is not None]
    if not entries:
        return ArchSupport(True, "unknown", arch, "this PyTorch reports no CUDA arch list")
    major, minor = capability
    sm = [(a, b, s) for kind, a, b, s in entries if kind == "sm"]
    if any(a == major and b == minor for a, b, _ in sm):
        return ArchSupport(True, "native", arch, f"{arch} is in this PyTorch's arch list")
    older = [(a, b) for a, b, s in sm if a == major and b < minor and s != "a"]
    if older:
        got = arch_name(max(older))
        return ArchSupport(True, "compatible", arch,
                           f"{arch} runs the {got} kernels of this PyTorch (same major)")
    ptx = [(a, b) for kind, a, b, s in entries
           if kind == "compute" and s != "a" and (a, b) <= (major, minor)]
    if ptx:
        got = "compute_{}{}".format(*max(ptx))
        return ArchSupport(True, "ptx", arch,
                           f"{arch} has no cubin in this PyTorch; its {got} PTX is "
                           "JIT-compiled at first use (slow first start)")
    listed = ", ".join(arch_list)
    return ArchSupport(
        False, "missing", arch,
        f"{arch} is not in this PyTorch's arch list ({listed}): every kernel will fail "
        f"with 'no kernel image is available'. {install_fix(arch)}",
    )


def install_fix(arch: str) -> str:
    """The fix for a PyTorch wheel that has no kernels for ``arch``."""
    return (f"Install a PyTorch built for this card first (a wheel whose arch list has "
            f"{arch}; see pytorch.org, e.g. a newer CUDA wheel from "
            "https://download.pytorch.org/whl/), then install the project without "
            "letting it replace torch.")


#: (substring of a CUDA error, explanation). First match wins; matched lowercase.
_EXPLANATIONS: tuple[tuple[str, str], ...] = (
    ("no kernel image is available",
     "This PyTorch was built without kernels for this GPU's architecture, although "
     "torch.cuda.is_available() said True. {fix}"),
    ("driver on your system is too old",
     "The NVIDIA driver is older than the CUDA runtime of this PyTorch. Install a PyTorch "
     "built for the CUDA version the driver supports (nvidia-smi shows 'CUDA Version'), "
     "or rent a box with a newer driver."),
    ("driver version is insufficient",
     "The NVIDIA driver is older than the CUDA runtime of this PyTorch. Install a PyTorch "
     "built for the CUDA version the driver supports (nvidia-smi shows 'CUDA Version'), "
     "or rent a box with a newer driver."),
    ("found no nvidia driver",
     "No NVIDIA driver is loaded: this box cannot use its GPU. Ask the provider for "
     "another machine."),
    ("busy or unavailable",
     "The GPU is in exclusive mode and another process holds it; see nvidia-smi."),
    ("out of memory",
     "The GPU is out of memory before training starts: another process holds it "
     "(see nvidia-smi)."),
    ("illegal memory access",
     "The GPU faulted on a simple kernel: a driver or hardware fault. Rent another box."),
    ("unspecified launch failure",
     "The GPU faulted on a simple kernel: a driver or hardware fault. Rent another box."),
    ("ecc error",
     "The GPU reports uncorrectable ECC errors: faulty hardware. Rent another box."),
)


def explain_cuda_error(text: str, arch: str | None = None) -> str | None:
    """A plain explanation with the fix for a CUDA error message, or ``None`` when the
    error is not one we know."""
    low = text.lower()
    for needle, explanation in _EXPLANATIONS:
        if needle in low:
            return explanation.format(fix=install_fix(arch or "this GPU's sm_XY"))
    return None


@dataclass
class KernelResult:
    """The outcome of the matmul check on one device."""

    ok: bool
    seconds: float | None = None
    tflops: float | None = None
    error: str | None = None
    explanation: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def kernel_check(torch: Any, device: Any, n: int = MATMUL_N,
                 arch: str | None = None) -> KernelResult:
    """Run a real ``n``x``n`` matmul on ``device``, sum it and synchronise, then check the
    result against a reassociated product (``(A@B)@v`` vs ``A@(B@v)``) so that a GPU
    that computes garbage fails too. Errors are caught and explained, never raised."""
    is_cuda = getattr(device, "type", str(device)) == "cuda"

    def sync() -> None:
        if is_cuda:
            torch.cuda.synchronize(device)

    try:
        a = torch.randn(n, n, device=device)
        b = torch.randn(n, n, device=device)
        v = torch.randn(n, 1, device=device)
        total = (a @ b).sum()  # first run pays for library initialisation
        sync()
        start = time.perf_counter()
        product = a @ b
        total = product.sum()
        sync()
        seconds = time.perf_counter() - start
        value = float(total.item())
        left = (product @ v).double()
        right = (a @ (b @ v)).double()
        rel = float(((left - right).norm() / right.norm().clamp_min(1e-12)).item())
    except RuntimeError as exc:  # torch.AcceleratorError is a RuntimeError
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return KernelResult(False, error=message, explanation=explain_cuda_error(str(exc), arch))
    # TF32 or reduced-precision reductions differ by ~1e-3; a broken GPU by ~1.
    if not math.isfinite(value) or not rel < 1e-2:
        return KernelResult(False, seconds, error=f"wrong result (sum {value}, rel err {rel:.2g})",
                            explanation="The GPU computed a wrong matmul: faulty hardware "
                                        "or driver. Rent another box.")
    return KernelResult(True, seconds, 2 * n**3 / seconds / 1e12 if seconds > 0 else None)


# --------------------------------------------------------------------------- nvidia-smi

SMI_FIELDS = ("index", "name", "driver_version", "memory.total", "memory.used",
              "utilization.gpu")


def _bytes(mib: float | None) -> int | None:
    return None if mib is None else int(mib * 2**20)


def parse_smi_query(text: str) -> list[dict[str, Any]]:
    """Parse a query of :data:`SMI_FIELDS` into preflight's GPU rows. Memory comes in MiB
    and is returned in bytes; unknown values become ``None``."""
    return [{"index": row["index"], "name": row["name"],
             "driver_version": row["driver_version"],
             "memory_total_bytes": _bytes(row["memory.total"]),
             "memory_used_bytes": _bytes(row["memory.used"]),
             "utilization_percent": row["utilization.gpu"]}
            for row in smi.parse(text, SMI_FIELDS)]


def parse_smi_cuda_version(text: str) -> str | None:
    """The highest CUDA version the driver supports, from plain ``nvidia-smi``'s header."""
    match = re.search(r"CUDA Version:\s*([0-9.]+)", text)
    return match.group(1) if match else None


def query_nvidia_smi(timeout: float = 15.0) -> dict[str, Any] | None:
    """Driver version, the driver's CUDA version and per-GPU rows from nvidia-smi, or
    ``None`` when nvidia-smi is not installed. A failing nvidia-smi gives ``error``."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    query = smi.query_command(exe, SMI_FIELDS)
    try:
        rows = subprocess.run(query, capture_output=True, text=True, timeout=timeout)
        plain = subprocess.run([exe], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"driver_version": None, "cuda_version": None, "gpus": [],
                "error": f"nvidia-smi failed: {exc}"}
    gpus = parse_smi_query(rows.stdout) if rows.returncode == 0 else []
    error = None
    if rows.returncode != 0:
        lines = (rows.stdout + rows.stderr).strip().splitlines()
        error = lines[0] if lines else "nvidia-smi failed"
    return {
        "driver_version": gpus[0]["driver_version"] if gpus else None,
        "cuda_version": parse_smi_cuda_version(plain.stdout),
        "gpus": gpus,
        "error": error,
    }
