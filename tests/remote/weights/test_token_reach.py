"""A Hub token for the box, narrowly (issue 29): ``gpurent push`` and ``gpurent launch ...
hub=`` hand the token to a stranger's box, so they say in one line when the Hub tells
that it can write more than the target repository (a classic write token: every
repository of the user and their organizations; a fine-grained one: each scope with
``repo.write`` beyond that repository), and stay quiet when it writes that repository
alone. When the Hub does not answer (an error, a mirror without ``whoami-v2``, no
connection, an answer of another shape) they say that the reach was not checked and why,
naming the host (issue 37); a token the Hub refuses stops them before the box is asked.
The Hub is the stand-in's ``whoami-v2``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from remote.weights.reach import reach_warning, wider_than
from tests.fixtures.hub_standin import (
    VALID_TOKEN,
    HubStandin,
    classic_token,
    fine_grained_token,
    hub_env,
    write_run,
)
from tests.fixtures.paths import ROOT
from tests.fixtures.sshd import free_port

WRITE = ["repo.content.read", "repo.write"]


def push(hub: HubStandin, tmp_path: Path, repo: str,
         token: str = VALID_TOKEN) -> subprocess.CompletedProcess[str]:
    """``gpurent push local:RUN --repo REPO`` of a fresh run, with ``token`` (by default
    the stand-in's)."""
    run = tmp_path / f"run-{repo.replace('/', '-')}"
    write_run(run)
    env = hub_env(hub, tmp_path / "hf", HF_TOKEN=token)
    return subprocess.run([sys.executable, "-m", "remote.cli", "push", f"local:{run}",
                           "--repo", repo, "--files", "best.pt", "--json"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_push_says_when_a_classic_write_token_can_write_every_repository(
        hub_standin: HubStandin, tmp_path: Path) -> None:
    done = push(hub_standin, tmp_path, "me/detector")
    assert done.returncode == 0, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("gpurent push: warning: the Hugging Face token can write more "
                           "than me/detector: every repository of me, every repository of "
                           "org; it goes to the box, whose host can read it"), line
    assert "fine-grained token that writes me/detector alone" in line
    assert VALID_TOKEN not in done.stderr
    assert hub_standin.routes("whoami")[0].has_auth


@pytest.mark.parametrize(("scopes", "wider"), [
    ([("model", "me/detector", WRITE)], None),  # the one repository: quiet
    ([("model", "me/detector", WRITE), ("user", "me", ["repo.content.read"])], None),
    ([("user", "me", WRITE)], "every repository of me"),
    ([("model", "me/detector", WRITE), ("model", "me/other", WRITE),
      ("dataset", "org/data", WRITE)], "model me/other, dataset org/data"),
    ([("org", "org", WRITE)], "every repository of org"),
])
def test_push_reads_a_fine_grained_token_s_scopes(hub_standin: HubStandin, tmp_path: Path,
                                                  scopes, wider) -> None:
    hub_standin.whoami_answers[VALID_TOKEN] = fine_grained_token(*scopes)
    done = push(hub_standin, tmp_path, "me/detector")
    assert done.returncode == 0, done.stderr
    if wider is None:
        assert done.stderr == ""
    else:
        assert f"can write more than me/detector: {wider};" in done.stderr
        assert done.stderr.count("\n") == 1


def test_a_token_that_writes_nothing_gets_no_claim(hub_standin: HubStandin,
                                                  tmp_path: Path) -> None:
    """A read token: no warning, and the push goes on as before."""
    hub_standin.whoami_answers[VALID_TOKEN] = classic_token("read")
    done = push(hub_standin, tmp_path, "me/a")
    assert done.returncode == 0 and done.stderr == ""
    assert wider_than({"auth": "odd"}, "me/c") == []
    assert wider_than({"auth": {"accessToken": {"role": "fineGrained",
                                                "fineGrained": {"scoped": "x"}}}}, "me/c") == []


@pytest.mark.parametrize(("trouble", "why"), [
    ("500", "{host} answered whoami-v2 with HTTP 500: Internal Error"),
    ("404", "{host} answered whoami-v2 with HTTP 404: Sorry, we can't find the page"),
    ("no role", "{host}'s whoami-v2 answer names no token role"),
])
def test_a_hub_that_does_not_tell_says_the_reach_was_not_checked_and_why(
        hub_standin: HubStandin, tmp_path: Path, trouble: str, why: str) -> None:
    """An error, a mirror without ``whoami-v2``, an answer of another shape: one line says
    that the reach was not checked, why and where; the push goes on."""
    if trouble == "500":
        hub_standin.fail("whoami", times=1)
    elif trouble == "404":
        hub_standin.lack("whoami")
    else:
        hub_standin.whoami_answers[VALID_TOKEN] = {"name": "me"}
    done = push(hub_standin, tmp_path, "me/b")
    assert done.returncode == 0, done.stderr
    [line] = done.stderr.splitlines()
    why = why.format(host=f"127.0.0.1:{hub_standin.port}")
    assert line.startswith("gpurent push: warning: could not check the Hugging Face "
                           f"token's reach ({why}"), line
    assert "writes me/b alone is safer" in line and VALID_TOKEN not in line
    assert hub_standin.repo("me/b").commits  # pushed all the same


def test_a_hub_out_of_reach_is_named() -> None:
    port = free_port()
    line = reach_warning(VALID_TOKEN, "me/c", base=f"http://127.0.0.1:{port}")
    assert line is not None and line.startswith(
        f"could not check the Hugging Face token's reach (127.0.0.1:{port}: cannot "
        "connect: Connection refused)"), line


def test_a_token_the_hub_refuses_stops_the_push_before_the_box(hub_standin: HubStandin,
                                                               tmp_path: Path) -> None:
    """HTTP 401 stays a refusal: said as one, and the box is never asked (it would be
    refused too)."""
    wrong = "hf_wrongwrongwrongwrong"
    done = push(hub_standin, tmp_path, "me/d", token=wrong)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith(f"gpurent push: 127.0.0.1:{hub_standin.port} refused the Hugging "
                           "Face token (HTTP 401: Invalid credentials in Authorization "
                           "header)"), line
    assert "could not check" not in line and wrong not in done.stderr + done.stdout
    assert [r.route for r in hub_standin.requests] == ["whoami"]
    assert not (tmp_path / "run-me-d" / "hub.json").exists()
    # A launch with hub= too: every push of the run would be refused.
    env = hub_env(hub_standin, tmp_path / "hf", HF_TOKEN=wrong)
    done = subprocess.run([sys.executable, "-m", "remote.cli", "launch",
                           f"local:{tmp_path / 'runs'}", "name=exp", "epochs=1",
                           "hub=me/detector"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.startswith(f"gpurent launch: 127.0.0.1:{hub_standin.port} refused "
                                  "the Hugging Face token (HTTP 401"), done.stderr
    assert not (tmp_path / "runs").exists()


def test_launch_with_hub_says_it_too(hub_standin: HubStandin, tmp_path: Path) -> None:
    """``gpurent launch ... hub=ORG/NAME``: the warning comes before the launch (here one
    that cannot start: no such data file)."""
    env = hub_env(hub_standin, tmp_path / "hf", HF_TOKEN=VALID_TOKEN)
    done = subprocess.run([sys.executable, "-m", "remote.cli", "launch",
                           f"local:{tmp_path / 'runs'}", "name=exp", "data=/no/such/data.yaml",
                           "epochs=1", "hub=me/detector", "--wait", "30"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    lines = done.stderr.splitlines()
    assert lines[0].startswith("gpurent launch: warning: the Hugging Face token can write "
                               "more than me/detector: every repository of me"), done.stderr
    assert VALID_TOKEN not in done.stderr + done.stdout
