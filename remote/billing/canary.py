"""A read-only canary for each provider account (``gpurent providers check``): does the
real API still answer as the code reads it?

Per account it lists the instances (which API version answered, how many pages, how
long), reads one instance twice (the second read waits its turn: how the rate limit
behaved, 429s met and seconds waited), and compares every field the client reads
(``Provider.fields``) with the type it expects. Nothing is changed on the account. The
report names fields, types, counts and instance ids only: no key, no field's value, so a
user can paste it into a bug report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from remote.billing.accounts import Account
from trainer.providers import ProviderError
from trainer.text import clean_text, one_line


def json_type(value: Any) -> str:
    """The JSON type of a decoded value (``number`` for ints and floats)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object" if isinstance(value, dict) \
        else type(value).__name__


def field_at(raw: Any, path: str) -> tuple[bool, Any]:
    """``(found, value)`` of the dotted ``path`` in ``raw``."""
    for key in path.split("."):
        if not isinstance(raw, dict) or key not in raw:
            return False, None
        raw = raw[key]
    return True, raw


def compare(fields: dict[str, tuple[str, ...]], raw: dict[str, Any]) -> list[str]:
    """What differs from ``fields`` in ``raw``: ``uptime_mins: missing``, ``start_date:
    string, expected number``. A path under a parent that is null or missing is not
    asked (the parent's own line says it)."""
    said: list[str] = []
    for path, types in fields.items():
        parent = path.rpartition(".")[0]
        if parent and not isinstance(field_at(raw, parent)[1], dict):
            continue
        found, value = field_at(raw, path)
        if not found:
            said.append(f"{path}: missing")
        elif json_type(value) not in types:
            said.append(f"{path}: {json_type(value)}, expected {' or '.join(types)}")
    return said


@dataclass(frozen=True)
class AccountCheck:
    """What the canary saw of one account."""

    account: str
    provider: str
    error: str = ""
    api: str = ""
    instances: int = 0
    list_seconds: float = 0.0
    instance: str = ""
    fields_checked: int = 0
    differs: list[str] = field(default_factory=list)
    rate_limited: int = 0
    waited: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether everything answered as the code reads it."""
        return not self.error and not self.differs

    def lines(self) -> list[str]:
        """The report's lines for this account."""
        head = f"{self.account}: " + ("OK" if self.ok else "DIFFERS" if not self.error
                                      else "FAILED")
        if self.error:
            return [head, f"  {self.error}"]
        out = [head, f"  list: API {self.api or '?'}, {self.instances} instance(s) in "
               f"{self.list_seconds:.2f} s"]
        if self.instance:
            out.append(f"  instance {self.instance}: {self.fields_checked} fields read, "
                       + (f"{len(self.differs)} differ" if self.differs else "all as expected"))
            out.extend(f"    {line}" for line in self.differs)
        else:
            out.append("  no instance to read (the fields were not checked)")
        out.append(f"  rate limit: {self.rate_limited} answer(s) 429, {self.waited:.1f} s "
                   "waited for turns")
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {**self.__dict__, "ok": self.ok}


def check_account(account: Account, timeout: float = 20.0) -> AccountCheck:
    """List, read one instance twice, compare its fields (see the module doc)."""
    if account.problem:
        return AccountCheck(account.name, account.provider, error=account.problem)
    client = account.client(timeout=timeout, retries=1, max_rate_wait=timeout)
    started = time.monotonic()
    try:
        found = client.list_instances()
        took = time.monotonic() - started
        raw: dict[str, Any] = {}
        if found:
            client.get_instance(found[0].id)
            raw = client.get_instance(found[0].id).raw  # its turn: the pacing seen
    except ProviderError as exc:
        return AccountCheck(account.name, account.provider,
                            error=one_line(clean_text(str(exc)), 300),
                            rate_limited=client.rate_limited, waited=client.waited)
    fields = dict(client.fields)
    return AccountCheck(account.name, account.provider, api=client.list_api,
                        instances=len(found), list_seconds=took,
                        instance=found[0].id if found else "",
                        fields_checked=len(fields) if found else 0,
                        differs=compare(fields, raw) if found else [],
                        rate_limited=client.rate_limited, waited=client.waited)
