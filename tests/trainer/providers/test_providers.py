"""The provider clients against their local stand-ins: shapes, auth, injected errors,
retries, and actions confirmed by polling."""

from __future__ import annotations

import time

import pytest

from trainer.providers import NotFoundError, ProviderError, get_provider
from trainer.providers.confirm import (
    StillBilling,
    destroy_and_confirm,
    start_and_confirm,
    stop_and_confirm,
)
from trainer.providers.detect import (
    box_api_key,
    detect_instance,
    instance_from_env,
    parse_probe,
    read_environ_file,
)
from trainer.providers.pace import Pacer

PROVIDERS = ("vast", "runpod", "lambda")


class Sleeps(list):
    """Records requested sleeps instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


class SimPacer(Pacer):
    """A pacer on a simulated clock: its waits are recorded and pass at once (the
    stand-in's faults, not its rate limits, answer in the tests that use it)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []
        super().__init__(clock=lambda: self.now, sleep=self._sleep)

    def _sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def client(standin, *, key=None, timeout=30.0, retries=3, sleep=None):
    return get_provider(standin.provider, standin.key if key is None else key,
                        base_url=standin.base_url, timeout=timeout, retries=retries,
                        backoff=0.01, sleep=Sleeps() if sleep is None else sleep)


FAST = {"interval": 0.0, "timeout": 30.0, "sleep": lambda _s: None}


def assert_one_line(exc: BaseException, *, secret: str = "") -> str:
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text
    if secret:
        assert secret not in text
    return text


def test_vast_instance_fields(vast_standin):
    iid = vast_standin.add_instance()
    inst = client(vast_standin).get_instance(iid)
    assert inst.state == "running" and inst.provider == "vast" and inst.id == iid
    assert inst.price_per_hour == pytest.approx(0.452)
    assert inst.storage_per_hour == pytest.approx(250 * 0.20 / 720)
    assert inst.disk_gb == 250 and inst.gpu == "1x RTX 4090"
    # the direct address (public IP + the port mapped to 22/tcp) before Vast's SSH proxy
    assert (inst.ssh_host, inst.ssh_port) == ("203.0.113.9", 41022)
    assert inst.billing_per_hour == pytest.approx(0.452)
    seen = vast_standin.calls("GET")[-1]
    assert seen.authorized and seen.path == f"/api/v0/instances/{iid}/"
    # the container label form is accepted as the same id
    assert client(vast_standin).get_instance(f"C.{iid}").id == iid


def test_runpod_instance_fields(runpod_standin):
    pid = runpod_standin.add_instance()
    inst = client(runpod_standin).get_instance(pid)
    assert inst.state == "running" and inst.price_per_hour == pytest.approx(0.69)
    assert inst.disk_gb == 250 and inst.gpu == "1x NVIDIA GeForce RTX 4090"
    assert inst.storage_per_hour == pytest.approx(250 * 0.20 / 720)
    assert (inst.ssh_host, inst.ssh_port) == ("203.0.113.7", 41022)


def test_lambda_instance_fields(lambda_standin):
    iid = lambda_standin.add_instance()
    provider = client(lambda_standin)
    inst = provider.get_instance(iid)
    assert inst.state == "running" and inst.price_per_hour == pytest.approx(0.75)
    assert inst.gpu == "1x A10 (24 GB PCIe)" and inst.disk_gb == 1400
    assert (inst.ssh_host, inst.ssh_port) == ("198.51.100.2", 22)
    assert provider.can_stop is False


@pytest.mark.parametrize("name", PROVIDERS)
def test_bad_key_is_a_one_line_auth_error(provider_standin, name):
    standin = provider_standin(name)
    iid = standin.add_instance()
    with pytest.raises(ProviderError) as err:
        client(standin, key="wrong-key-123").get_instance(iid)
    assert err.value.kind == "auth" and err.value.status == 401
    text = assert_one_line(err.value, secret="wrong-key-123")
    assert "check the API key" in text
    assert len(standin.calls("GET")) == 1  # auth errors are not retried
    assert not standin.requests[0].authorized


def test_auth_error_bodies_are_shown(provider_standin):
    vast, lam = provider_standin("vast"), provider_standin("lambda")
    for standin, words in ((vast, ("auth_error", "Invalid user key")),
                           (lam, ("global/invalid-api-key", "Check your API key"))):
        iid = standin.add_instance()
        with pytest.raises(ProviderError) as err:
            client(standin, key="nope").get_instance(iid)
        for word in words:
            assert word in str(err.value)


@pytest.mark.parametrize("name", PROVIDERS)
def test_unknown_instance_is_not_found(provider_standin, name):
    standin = provider_standin(name)
    standin.add_instance()
    unknown = {"vast": "999", "runpod": "nosuchpod", "lambda": "deadbeef"}[name]
    with pytest.raises(NotFoundError) as err:
        client(standin).get_instance(unknown)
    assert_one_line(err.value)
    assert unknown in str(err.value) or "not found" in str(err.value)


def test_vast_unknown_id_answers_200_null(vast_standin):
    with pytest.raises(NotFoundError) as err:
        client(vast_standin).get_instance("12345")
    assert err.value.status == 200 and "no instance 12345" in str(err.value)


@pytest.mark.parametrize("name", PROVIDERS)
def test_injected_404(provider_standin, name):
    standin = provider_standin(name)
    iid = standin.add_instance()
    standin.fail(404)
    with pytest.raises(NotFoundError):
        client(standin).get_instance(iid)
    assert client(standin).get_instance(iid).state == "running"


@pytest.mark.parametrize("name", PROVIDERS)
@pytest.mark.parametrize("status", [500, 502, 503])
def test_retries_then_succeeds(provider_standin, name, status):
    standin = provider_standin(name)
    iid = standin.add_instance()
    standin.fail(status, times=2)
    sleeps = Sleeps()
    inst = client(standin, sleep=sleeps).get_instance(iid)
    assert inst.state == "running"
    assert [r.fault for r in standin.requests] == [status, status, None]
    assert len(sleeps) == 2


@pytest.mark.parametrize("name,wait", [("vast", 2.0), ("runpod", 1.0), ("lambda", 1.0)])
def test_a_429_is_waited_out_as_the_provider_says_not_counted_as_a_retry(
        provider_standin, name, wait):
    standin = provider_standin(name, pace=1.0)  # the providers' own thresholds
    iid = standin.add_instance()
    standin.fail(429, times=3, retry_after="1" if name == "runpod" else None)
    sleeps, pacer = Sleeps(), SimPacer()
    provider = get_provider(name, standin.key, standin.base_url, retries=0,
                            sleep=sleeps, pacer=pacer)
    assert provider.get_instance(iid).state == "running"  # retries=0: 429s are not retries
    assert [r.fault for r in standin.requests] == [429, 429, 429, None]
    assert sleeps == []  # no backoff: the provider's own waits, through the pacer
    # Vast's plain text names its interval (threshold=2.0), RunPod says Retry-After,
    # Lambda says nothing: about a second.
    assert pacer.slept == [pytest.approx(wait)] * 3
    assert provider.rate_limited == 3


def test_rate_waits_end_at_the_callers_bound_with_one_line(provider_standin):
    vast_standin = provider_standin("vast", pace=1.0)  # Vast's own threshold: 2 s
    iid = vast_standin.add_instance()
    vast_standin.fail(429, times=50)
    pacer = SimPacer()
    provider = get_provider("vast", vast_standin.key, vast_standin.base_url,
                            max_rate_wait=10.0, pacer=pacer)
    with pytest.raises(ProviderError) as err:
        provider.get_instance(iid)
    assert err.value.kind == "rate_limited"
    assert "still limited after 6 answers and 10 s of waiting" in assert_one_line(err.value)
    assert sum(pacer.slept) <= 10.0 and len(vast_standin.requests) == 6


def test_calls_are_spaced_by_vasts_interval_per_endpoint_and_never_meet_its_429(
        provider_standin):
    """Vast's intervals, real time: show 2 s, list 1 s; two endpoints do not wait on
    each other, and a second client of the same key (another thread) shares the turns."""
    vast_standin = provider_standin("vast", pace=1.0)
    iid = vast_standin.add_instance()
    one, two = client(vast_standin), client(vast_standin)
    started = time.monotonic()
    one.get_instance(iid)
    two.list_instances()
    two.get_instance(iid)  # show again: 2 s after the first
    one.list_instances()
    took = time.monotonic() - started
    assert [r.fault for r in vast_standin.requests] == [None] * 4
    shows = [r for r in vast_standin.requests if r.path.endswith(f"/{iid}/")]
    assert len(shows) == 2 and 1.9 <= took < 6.0
    assert one.waited + two.waited >= 1.9


def test_the_pace_scales_every_interval_and_a_bad_one_is_said(provider_standin,
                                                              monkeypatch, capsys):
    vast_standin = provider_standin("vast", rate_limits=False)  # the pacer's clock is fake
    iid = vast_standin.add_instance()
    for text, pace, said in (("2", 2.0, False), ("fast", 1.0, True), ("0", 1.0, True),
                             ("nan", 1.0, True), ("", 1.0, False)):
        monkeypatch.setenv("GPURENT_API_PACE", text)
        pacer = SimPacer()
        provider = get_provider("vast", vast_standin.key, base_url=vast_standin.base_url,
                                pacer=pacer)
        assert provider.pace == pace
        err = capsys.readouterr().err
        assert ("GPURENT_API_PACE" in err and "intervals are kept" in err) is said, err
        provider.get_instance(iid)
        provider.get_instance(iid)
        assert pacer.slept == [2.0 * pace]  # Vast's show interval, scaled


def test_the_next_turn_counts_from_a_late_send(provider_standin):
    # The first wait overshoots by 0.5 s (a busy machine wakes the thread late): the call
    # after it still keeps Vast's 2 s from when that request really left.
    vast_standin = provider_standin("vast", rate_limits=False)  # the pacer's clock is fake
    iid = vast_standin.add_instance()

    class LatePacer(SimPacer):
        def _sleep(self, seconds: float) -> None:
            super()._sleep(seconds)
            self.now += 0.5 if len(self.slept) == 1 else 0.0

    pacer = LatePacer()
    provider = get_provider("vast", vast_standin.key, base_url=vast_standin.base_url,
                            pacer=pacer, pace=1.0)
    for _ in range(3):
        provider.get_instance(iid)
    assert pacer.slept == [2.0, 2.0]  # not 1.5: the late send moved the next turn too


@pytest.mark.parametrize("name", ["vast", "lambda"])
def test_a_request_that_reached_the_provider_late_does_not_bring_the_next_closer(
        provider_standin, name):
    """The provider counts its interval from each request's arrival: the first reached
    it 0.6 s after it was sent (a slow connection), so the next, due an interval after
    that send, would reach it too soon; the client counts from the answer instead."""
    standin = provider_standin(name, pace=1.0)  # the providers' own intervals: 1-2 s
    iid = standin.add_instance()
    provider = client(standin)
    standin.arrive_late(0.6)
    provider.get_instance(iid)
    provider.get_instance(iid)
    assert [r.fault for r in standin.requests] == [None, None]
    assert provider.rate_limited == 0


def test_lambda_429_in_its_envelope_is_waited_out_and_spaced(provider_standin):
    lambda_standin = provider_standin("lambda", pace=1.0)  # real time
    iid = lambda_standin.add_instance()
    provider = client(lambda_standin)
    started = time.monotonic()
    for _ in range(3):
        provider.get_instance(iid)
    assert time.monotonic() - started >= 1.9  # about one a second
    assert all(r.fault is None for r in lambda_standin.requests)


@pytest.mark.parametrize("name", PROVIDERS)
def test_gives_up_after_retries_with_one_line(provider_standin, name):
    standin = provider_standin(name)
    iid = standin.add_instance()
    standin.fail(503, times=10)
    with pytest.raises(ProviderError) as err:
        client(standin, retries=2).get_instance(iid)
    assert err.value.kind == "server" and err.value.status == 503
    assert "after 3 attempts" in assert_one_line(err.value)
    assert len(standin.requests) == 3


def test_vast_429_plain_text_without_retry_after(provider_standin):
    vast_standin = provider_standin("vast", pace=1.0)  # Vast's own threshold: 2 s
    iid = vast_standin.add_instance()
    vast_standin.fail(429, times=5)
    pacer = SimPacer()
    with pytest.raises(ProviderError) as err:
        get_provider("vast", vast_standin.key, vast_standin.base_url, pacer=pacer,
                     max_rate_wait=5.0).get_instance(iid)
    text = assert_one_line(err.value)
    assert err.value.kind == "rate_limited" and "API requests too frequent" in text
    assert pacer.slept == [2.0, 2.0]  # the threshold its text names, up to the bound


def test_retry_after_is_honoured(runpod_standin):
    pid = runpod_standin.add_instance()
    runpod_standin.fail(429, retry_after="3")
    pacer = SimPacer()
    provider = get_provider("runpod", runpod_standin.key, runpod_standin.base_url,
                            pacer=pacer)
    assert provider.get_instance(pid).state == "running"
    assert pacer.slept == [3.0]


@pytest.mark.parametrize("name", PROVIDERS)
def test_timeout_then_success_and_timeout_exhausted(provider_standin, name):
    standin = provider_standin(name, slow_seconds=1.0)
    iid = standin.add_instance()
    standin.fail("timeout")
    assert client(standin, timeout=0.3).get_instance(iid).state == "running"
    standin.fail("timeout", times=2)
    with pytest.raises(ProviderError) as err:
        client(standin, timeout=0.3, retries=1).get_instance(iid)
    assert err.value.kind == "timeout"
    assert "timed out after 0.3 s" in assert_one_line(err.value)


@pytest.mark.parametrize("name", ["vast", "runpod"])
def test_stop_then_start_confirmed_by_polling(provider_standin, name):
    standin = provider_standin(name, settle_polls=2)
    iid = standin.add_instance()
    provider = client(standin)
    stopped = stop_and_confirm(provider, iid, **FAST)
    assert stopped.confirmed and stopped.state == "stopped" and not stopped.alarm
    assert stopped.polls >= 2  # the state changed only after a few polls
    assert stopped.billing_per_hour == pytest.approx(250 * 0.20 / 720)
    assert "keeps billing" in stopped.message and "GPUs are released" in stopped.message
    again = stop_and_confirm(provider, iid, **FAST)
    assert again.confirmed and "already stopped" in again.message
    started = start_and_confirm(provider, iid, **FAST)
    assert started.confirmed and started.state == "running"


def test_runpod_disallowed_action_is_409(runpod_standin):
    pid = runpod_standin.add_instance(status="EXITED", cost=0)
    provider = client(runpod_standin)
    with pytest.raises(ProviderError) as err:
        provider.stop(pid)
    assert err.value.kind == "conflict" and err.value.status == 409
    assert "cannot stop a pod that is EXITED" in assert_one_line(err.value)
    assert provider.get_instance(pid).price_per_hour is None  # EXITED reports cost 0


@pytest.mark.parametrize("name", PROVIDERS)
def test_destroy_is_confirmed_only_when_gone(provider_standin, name):
    standin = provider_standin(name, settle_polls=3)
    iid = standin.add_instance()
    provider = client(standin)
    outcome = destroy_and_confirm(provider, iid, **FAST)
    assert outcome.confirmed and outcome.state == "destroyed" and outcome.polls >= 3
    assert outcome.billing_per_hour == 0.0
    deletes = standin.calls("DELETE") or standin.calls("POST", "terminate")
    assert len(deletes) == 1
    if name == "lambda":
        assert deletes[0].body == {"instance_ids": [iid]}
    # afterwards the API says it is gone (not found, or a destroyed state)
    try:
        gone = provider.get_instance(iid).gone
    except NotFoundError:
        gone = True
    assert gone


@pytest.mark.parametrize("name", PROVIDERS)
def test_destroy_still_billing_is_an_alarm(provider_standin, name):
    standin = provider_standin(name)
    iid = standin.add_instance()
    standin.never_gone(iid)
    with pytest.raises(StillBilling) as err:
        destroy_and_confirm(client(standin), iid, interval=0.05, timeout=6.0)
    outcome = err.value.outcome
    assert outcome.alarm and not outcome.confirmed and outcome.polls >= 2
    assert outcome.billing_per_hour and outcome.billing_per_hour > 0
    assert assert_one_line(err.value).startswith("ALARM:")


def test_destroy_of_a_wrong_id_sends_nothing(vast_standin):
    vast_standin.add_instance()
    with pytest.raises(NotFoundError):
        destroy_and_confirm(client(vast_standin), "777", **FAST)
    assert not vast_standin.calls("DELETE")


def test_destroy_retried_after_a_lost_answer_still_confirms(runpod_standin):
    pid = runpod_standin.add_instance()
    runpod_standin.fail(502)  # the first GET fails once and is retried
    outcome = destroy_and_confirm(client(runpod_standin), pid, **FAST)
    assert outcome.confirmed


def test_lambda_has_no_stop(lambda_standin):
    iid = lambda_standin.add_instance()
    with pytest.raises(ProviderError) as err:
        stop_and_confirm(client(lambda_standin), iid, **FAST)
    assert err.value.kind == "unsupported" and "only destroy" in str(err.value)
    assert not lambda_standin.calls("POST")


def test_manual_provider_gives_instructions():
    provider = get_provider("manual", None)
    assert provider.get_instance("abc").state == "unknown"
    with pytest.raises(ProviderError) as err:
        provider.destroy("abc")
    assert err.value.kind == "manual"
    text = assert_one_line(err.value)
    assert "instance abc" in text and "deleted" in text


def test_unknown_provider_and_missing_key():
    with pytest.raises(ProviderError, match="unknown provider 'aws'"):
        get_provider("aws", "k")
    with pytest.raises(ProviderError, match="no API key"):
        get_provider("vast", "")


def test_bad_instance_ids_are_refused_before_any_request(vast_standin, runpod_standin):
    for standin, bad in ((vast_standin, "12a"), (runpod_standin, "../pods")):
        with pytest.raises(ProviderError) as err:
            client(standin).get_instance(bad)
        assert err.value.kind == "bad_input"
        assert not standin.requests


def test_unreachable_provider_is_a_network_error():
    provider = get_provider("vast", "k", base_url="http://127.0.0.1:9/api", timeout=1.0,
                            retries=1, sleep=lambda _s: None)
    with pytest.raises(ProviderError) as err:
        provider.get_instance("1")
    assert err.value.kind == "network" and "cannot reach" in assert_one_line(err.value)


def test_instance_detection_from_environment(tmp_path):
    assert instance_from_env({"CONTAINER_ID": "12345"}) == ("vast", "12345")
    assert instance_from_env({"VAST_CONTAINERLABEL": "C.678"}) == ("vast", "678")
    assert instance_from_env({"RUNPOD_POD_ID": "abc123xyz"}) == ("runpod", "abc123xyz")
    assert instance_from_env({"CONTAINER_ID": "docker-abcdef"}) is None
    environ = tmp_path / "environ"
    environ.write_bytes(b"PATH=/bin\0CONTAINER_API_KEY=sekrit\0VAST_CONTAINERLABEL=C.42\0")
    assert read_environ_file(str(environ), ("VAST_CONTAINERLABEL",)) == {
        "VAST_CONTAINERLABEL": "C.42"}
    assert detect_instance(environ={}, proc_environ=str(environ)) == ("vast", "42")
    # the session environment wins over PID 1's
    assert detect_instance(environ={"RUNPOD_POD_ID": "p1"},
                           proc_environ=str(environ)) == ("runpod", "p1")
    assert box_api_key("vast", environ={}, proc_environ=str(environ)) == "sekrit"
    assert box_api_key("vast", environ={}, proc_environ=str(tmp_path / "none")) is None
    assert parse_probe("RUNPOD_POD_ID=p9\nHOME=/root\nRUNPOD_POD_ID=other\n") == {
        "RUNPOD_POD_ID": "p9"}
