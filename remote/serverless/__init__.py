"""Serverless training on Modal (``modal:APP``): the generated app file (``appfile``),
the ``modal`` client (``client``), a launch from ``key=value`` words (``words``), the
launch (``launch``) and its estimate (``estimate``: a probe app measures a few steps),
what the laptop records of each app (``record``), the app's state, money and Volume
(``watch``), Modal's own bill (``bill``) and its stop (``stop``)."""

from typing import TYPE_CHECKING

from trainer._exports import typed_exports

if TYPE_CHECKING:  # the face, read by type checkers and by typed_exports
    from remote.serverless.appfile import (
        GPUS,
        MAX_TIMEOUT,
        ModalSpec,
        check_app_name,
        check_gpu,
        parse_timeout,
        render,
        stage_words,
    )
    from remote.serverless.bill import BILLS, BillCache, ModalBill, fetch_bill
    from remote.serverless.client import INSTALL_HINT, AppRow, ModalError, list_apps, need_modal
    from remote.serverless.connect import ModalConnector
    from remote.serverless.estimate import (
        ModalEstimate,
        Proposal,
        estimate_bound,
        estimate_on_modal,
        propose_timeout,
    )
    from remote.serverless.launch import ModalLaunch, app_file_path, launch_modal, spawn_app
    from remote.serverless.record import ModalRecord, gpu_price, modal_records, record_for
    from remote.serverless.stop import ModalStopped, saved_weights, stop_modal, volume_safety
    from remote.serverless.watch import (
        AppState,
        AppView,
        UnknownApp,
        app_view,
        fleet_rows,
        need_record,
        volume_transport,
    )
    from remote.serverless.words import spec_from_words, words_from_record

__all__, __getattr__ = typed_exports(__name__, __file__)
