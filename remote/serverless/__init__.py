"""Serverless training on Modal (``modal:APP``): the generated app file (``appfile``),
the ``modal`` client (``client``), a launch from ``key=value`` words (``words``), the
launch (``launch``) and its estimate (``probe``), what the laptop records of each app
(``record``), the app's state, money and Volume (``watch``) and its stop (``stop``)."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "appfile": ["GPUS", "MAX_TIMEOUT", "ModalSpec", "check_app_name", "check_gpu", "parse_timeout",
                "render", "stage_words"],
    "client": ["INSTALL_HINT", "AppRow", "ModalError", "list_apps", "need_modal"],
    "launch": ["ModalLaunch", "app_file_path", "launch_modal", "spawn_app"],
    "probe": ["Probed", "ProbeCancelled", "Proposal", "probe_bound", "probe_modal",
              "propose_timeout"],
    "words": ["spec_from_words", "words_from_record"],
    "record": ["ModalRecord", "gpu_price", "modal_records", "record_for"],
    "watch": ["AppState", "AppView", "UnknownApp", "app_view", "fleet_rows", "need_record",
              "volume_transport"],
    "connect": ["ModalConnector"],
    "stop": ["ModalStopped", "stop_modal", "saved_weights", "volume_safety"],
})
