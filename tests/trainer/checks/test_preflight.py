"""preflight: the real command on this CPU box, and its CUDA paths through their seams
(capability tuples and arch lists, real CUDA error texts, sample nvidia-smi output,
sample mount tables)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from tests.fixtures.paths import ROOT
from trainer.checks import cuda as cuda_check
from trainer.checks import host as host_check
from trainer.checks import preflight

# Real messages, as PyTorch prints them.
NO_KERNEL = ("CUDA error: no kernel image is available for execution on the device\n"
             "CUDA kernel errors might be asynchronously reported at some other API call, so "
             "the stacktrace below might be incorrect.\n"
             "For debugging consider passing CUDA_LAUNCH_BLOCKING=1")
OLD_DRIVER = ("The NVIDIA driver on your system is too old (found version 11040). Please "
              "update your GPU driver by downloading and installing a new version from the "
              "URL: http://www.nvidia.com/Download/index.aspx")

SMI_QUERY = """0, NVIDIA H100 80GB HBM3, 550.54.15, 81559, 4, 0
1, NVIDIA GeForce RTX 4090, 550.54.15, 24564, [N/A], [Not Supported]
2, NVIDIA A10G, Rev 2, 550.54.15, 23028, 0, 97
"""
SMI_PLAIN = """+-----------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |
|-------------------------------+----------------------+----------------------+
"""

# A RunPod-like container: overlay root, the volume on /workspace, RAM on /dev/shm.
CONTAINER_MOUNTS = """\
1020 900 0:110 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/a,upperdir=/b
1021 1020 0:114 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
1030 1020 0:120 / /dev/shm rw,nosuid,nodev - tmpfs shm rw,size=65536k
1040 1020 253:3 /vol/abc /workspace rw,relatime - ext4 /dev/mapper/vg-vol rw
1041 1020 253:4 / /mnt/my\\040data rw,relatime - xfs /dev/sdb1 rw
"""
VM_MOUNTS = "27 1 254:0 / / rw,relatime - ext4 /dev/vda1 rw\n"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m trainer preflight ARGS`` in a fresh interpreter, as remote/ runs it."""
    return subprocess.run([sys.executable, "-m", "trainer", "preflight", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_json_report_on_this_cpu_box_is_valid_and_says_no_gpu() -> None:
    result = run_cli("--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schema"] == "gpurent.preflight/1"
    assert report["ok"] is True and report["failed"] == []
    assert report["gpu_available"] is False and report["gpus"] == []
    assert report["torch"]["version"] == torch.__version__
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["gpu"]["status"] == "warn" and "no GPU" in checks["gpu"]["message"]
    assert {"torch", "disk", "memory", "cpu", "hf_home"} <= set(checks)
    assert all(c["status"] in preflight.STATUSES for c in report["checks"])
    disk = report["disk"]
    assert disk["need_bytes"] == int((disk["data_bytes"] + disk["checkpoint_bytes"]) * 1.3)
    assert report["memory"]["total_bytes"] > 0 and report["cpu"]["usable"] >= 1
    assert isinstance(report["hf_home"]["persistent"], bool)


def test_require_gpu_fails_without_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert preflight.main(["--json", "--require-gpu"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["failed"] == ["gpu"]


def test_readable_output_and_disk_need(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "blob.bin").write_bytes(b"x" * 5000)
    code = preflight.main(["--project", str(tmp_path), "--data", str(tmp_path / "data"),
                           "--checkpoint-gb", "0"])
    out = capsys.readouterr().out
    assert code == 0
    assert "need 6.5 KB (data 5.0 KB" in out and "result: ok" in out
    # Far more than any disk here: the disk check fails and so does the command.
    code = preflight.main(["--project", str(tmp_path), "--data-gb", "1e9", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["failed"] == ["disk"] and report["disk"]["enough"] is False


def test_data_yaml_is_sized_by_its_root(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    (root / "images").mkdir(parents=True)
    (root / "images" / "a.png").write_bytes(b"y" * 3000)
    (tmp_path / "data.yaml").write_text("path: ds\ntrain: images\nval: images\nnames: [a]\n")
    assert preflight.data_bytes_of(str(tmp_path / "data.yaml")) == 3000


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert preflight.main(["--data", "/nonexistent/data.yaml"]) == 2
    assert "no such file" in capsys.readouterr().err


# --------------------------------------------------------------------------- CUDA seams

H100_WHEEL = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


@pytest.mark.parametrize(("capability", "arch_list", "how", "ok"), [
    ((9, 0), H100_WHEEL, "native", True),
    ((8, 9), H100_WHEEL, "compatible", True),       # Ada runs the sm_86 cubins
    ((12, 0), H100_WHEEL, "missing", False),        # Blackwell on a cu12.4 wheel
    ((12, 0), [*H100_WHEEL, "compute_90"], "ptx", True),
    ((10, 0), ["sm_90a"], "missing", False),         # arch-specific cubins never carry over
    ((9, 0), ["sm_80", "sm_90a"], "native", True),
    ((7, 5), ["sm_80", "sm_90"], "missing", False),  # newer cubins never run on older GPUs
    ((8, 6), [], "unknown", True),
])
def test_arch_support(capability: tuple[int, int], arch_list: list[str], how: str,
                      ok: bool) -> None:
    verdict = cuda_check.arch_support(capability, arch_list)
    assert (verdict.how, verdict.ok) == (how, ok)
    if not ok:
        assert f"sm_{capability[0]}{capability[1]}" in verdict.message
        assert "Install a PyTorch built for this card first" in verdict.message


def test_explain_no_kernel_image_names_the_fix() -> None:
    text = cuda_check.explain_cuda_error(NO_KERNEL, "sm_120")
    assert text is not None and "sm_120" in text
    assert "Install a PyTorch built for this card first" in text and "then install" in text
    old = cuda_check.explain_cuda_error(OLD_DRIVER)
    assert old is not None and "driver" in old
    assert cuda_check.explain_cuda_error("CUDA error: something new and strange") is None


def test_kernel_check_runs_a_real_matmul_on_cpu() -> None:
    result = cuda_check.kernel_check(torch, torch.device("cpu"), n=256)
    assert result.ok and result.seconds is not None and result.tflops and result.tflops > 0


def test_kernel_check_catches_a_failing_device() -> None:
    result = cuda_check.kernel_check(torch, torch.device("meta"), n=8)
    assert not result.ok and "meta" in (result.error or "")


def test_kernel_check_explains_a_missing_kernel_image() -> None:
    # A CUDA device whose first kernel fails as a wheel built for another arch does.
    def fail(*_args: object, **_kwargs: object) -> None:
        raise torch.AcceleratorError(NO_KERNEL)

    fake_torch = types.SimpleNamespace(randn=fail, cuda=types.SimpleNamespace(synchronize=fail))
    result = cuda_check.kernel_check(fake_torch, types.SimpleNamespace(type="cuda"),
                                     arch="sm_120")
    assert not result.ok
    assert result.error == "CUDA error: no kernel image is available for execution on the device"
    assert result.explanation and "sm_120" in result.explanation


def test_parse_nvidia_smi() -> None:
    gpus = cuda_check.parse_smi_query(SMI_QUERY)
    assert [g["index"] for g in gpus] == [0, 1, 2]
    assert gpus[0]["name"] == "NVIDIA H100 80GB HBM3"
    assert gpus[0]["memory_total_bytes"] == 81559 * 2**20
    assert gpus[1]["memory_used_bytes"] is None and gpus[1]["utilization_percent"] is None
    assert gpus[2]["name"] == "NVIDIA A10G, Rev 2" and gpus[2]["utilization_percent"] == 97
    assert {g["driver_version"] for g in gpus} == {"550.54.15"}
    assert cuda_check.parse_smi_cuda_version(SMI_PLAIN) == "12.4"
    assert cuda_check.parse_smi_cuda_version("garbage") is None


def test_no_gpu_reason_names_a_cpu_build_next_to_visible_gpus() -> None:
    cpu_torch = types.SimpleNamespace(version=types.SimpleNamespace(cuda=None))
    text = preflight.no_gpu_reason(cpu_torch, cuda_check.parse_smi_query(SMI_QUERY)[:1])
    assert "CPU-only build" in text and "NVIDIA H100" in text


# --------------------------------------------------------------------------- host seams


@pytest.mark.parametrize(("hf_home", "persistent", "mount"), [
    ("/workspace/hf", True, "/workspace"),
    ("/workspace", True, "/workspace"),
    ("/root/.cache/huggingface", False, "/"),   # the container's overlay layer
    ("/workspacex/hf", False, "/"),             # a prefix of a mount point is not inside it
    ("/dev/shm/hf", False, "/dev/shm"),
    ("/mnt/my data/hf", True, "/mnt/my data"),
])
def test_hf_home_persistence_in_a_container(hf_home: str, persistent: bool, mount: str) -> None:
    report = host_check.hf_home_report({"HF_HOME": hf_home}, CONTAINER_MOUNTS)
    assert report["set"] is True
    assert (report["persistent"], report["mount"]) == (persistent, mount)


def test_hf_home_unset_uses_the_default_cache_on_a_vm() -> None:
    report = host_check.hf_home_report({"XDG_CACHE_HOME": "/home/u/.cache"}, VM_MOUNTS)
    assert report["set"] is False and report["path"] == "/home/u/.cache/huggingface"
    assert report["persistent"] is True and "root filesystem" in report["reason"]
    assert host_check.hf_home_report({}, "")["persistent"] is None


def test_memory_without_psutil_reads_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    expected = psutil.virtual_memory().total
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil now raises ImportError
    report = host_check.memory_report()
    assert report["total_bytes"] == pytest.approx(expected, rel=0.01)
    assert report["available_bytes"] is not None


def test_proc_and_cgroup_parsers() -> None:
    info = host_check.parse_meminfo("MemTotal:       16384 kB\nMemAvailable:    8192 kB\n"
                                    "HugePages_Total:       0\n")
    assert info == {"MemTotal": 16384 * 1024, "MemAvailable": 8192 * 1024,
                    "HugePages_Total": 0}
    assert host_check.parse_cpu_max("200000 100000\n") == 2.0
    assert host_check.parse_cpu_max("max 100000\n") is None
