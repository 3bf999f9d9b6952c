"""The Hugging Face Hub from the box: the client and token, the ``hub.json`` ledger, the
safety check, pushes (on a key and at milestones) and dataset staging."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "client": ["HubError", "read_token", "check_repo_id", "import_hub"],
    "ledger": ["read_ledger", "append_entries", "file_identity", "sha256_file"],
    "safe": ["inventory", "verified_safety"],
    "push": ["push_run"],
    "stage": ["stage", "extract_archive", "UnsafeArchive"],
    "uploader": ["MilestoneUploader"],
    "restore": ["restore_run"],
})
