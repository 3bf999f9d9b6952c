"""Checks of the box before anything is spent: torch and a real CUDA kernel, the driver,
disk, memory and HF_HOME (preflight), and a YOLO dataset's layout and labels (doctor)."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "preflight": ["run_preflight"],
    "cuda": ["kernel_check", "arch_support", "explain_cuda_error", "query_nvidia_smi"],
    "host": ["disk_report", "memory_report", "cpu_report", "hf_home_report"],
    "doctor": ["run_doctor", "load_spec", "SpecError", "MissingDependency"],
    "labels": ["check_label_text"],
})
