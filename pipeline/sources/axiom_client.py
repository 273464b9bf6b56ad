"""The HTTP client of the Axiom source: APL queries with retries on 429/5xx/timeouts, the tabular answer checked
and parsed, and the token scrubbed from every message. Split from pipeline.sources.axiom (the incremental ingest),
which re-exports these names."""

from __future__ import annotations

import email.utils
import json
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from pipeline.secrets import redact_text
from pipeline.values import may_hold_surrogates, without_surrogates

USER_AGENT = "grpolens-axiom/0.1"


@dataclass
class RetryPolicy:
    """How hard the client tries. Tests make every number small and ``sleep`` a recorder."""

    attempts: int = 6  # tries of one request, the first included
    backoff_s: float = 1.0  # first wait after a 5xx/timeout; doubles each time
    max_backoff_s: float = 30.0
    max_rate_limit_wait_s: float = 60.0  # one 429 wait at most this long
    max_total_wait_s: float = 180.0  # all waits of one request together
    timeout_s: float = 60.0  # connect/read/write timeout of one attempt
    jitter: float = 0.1  # backoff * (1 ± jitter)
    sleep: Callable[[float], None] = time.sleep


class AxiomError(Exception):
    """A request that failed for good; ``kind`` goes to ingest_issues. Messages never hold the token."""

    kind = "error"


class TokenRefused(AxiomError):
    kind = "auth"


class QueryRejected(AxiomError):
    kind = "query_rejected"


class GaveUp(AxiomError):
    kind = "unavailable"


class BadResponse(AxiomError):
    kind = "bad_response"


@dataclass
class Table:
    """One tabular answer: field names and rows as dicts without nulls, plus the response's status."""

    names: list[str]
    columns: list[list]
    status: dict

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def rows(self) -> Iterable[dict]:
        names = self.names
        for values in zip(*self.columns, strict=True):  # checked to be of one length
            yield {name: v for name, v in zip(names, values, strict=True) if v is not None}


class AxiomClient:
    def __init__(
        self,
        url: str,
        token: str,
        org_id: str | None = None,
        policy: RetryPolicy | None = None,
        client: httpx.Client | None = None,
    ):
        self.url = url.rstrip("/")
        self._token = token
        self.org_id = org_id or None
        self.policy = policy or RetryPolicy()
        self._own = client is None
        self._client = client or httpx.Client(timeout=httpx.Timeout(self.policy.timeout_s))
        self.requests = 0
        self.waited_s = 0.0

    def close(self) -> None:
        if self._own:
            self._client.close()

    def __enter__(self) -> AxiomClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def scrub(self, text: str) -> str:
        """Any text that leaves this module: the token, should it ever be echoed, is replaced, and so is any other
        credential in it (pipeline.secrets' value rule)."""
        if self._token and self._token in text:
            text = text.replace(self._token, "***")
        return redact_text(text)

    def _headers(self) -> dict[str, str]:
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        if self.org_id:
            headers["X-Axiom-Org-Id"] = self.org_id
        return headers

    def query(self, apl: str, start_time: str | None = None, end_time: str | None = None) -> Table:
        body: dict[str, Any] = {"apl": apl}
        if start_time:
            body["startTime"] = start_time
        if end_time:
            body["endTime"] = end_time
        response = self._send(body)
        return self._parse(response)

    def _send(self, body: dict) -> httpx.Response:
        p = self.policy
        waited = 0.0
        backoff = p.backoff_s
        last = ""
        for attempt in range(1, p.attempts + 1):
            self.requests += 1
            wait: float | None = None
            try:
                response = self._client.post(
                    f"{self.url}/v1/datasets/_apl",
                    params={"format": "tabular"},
                    json=body,
                    headers=self._headers(),
                    timeout=p.timeout_s,
                )
            except httpx.TimeoutException:
                last = f"no answer within {p.timeout_s:g}s"
            except httpx.TransportError as exc:
                last = f"connection failed ({type(exc).__name__}: {exc})"
            else:
                status = response.status_code
                if status < 300:
                    return response
                message = self._message(response)
                if status in (401, 403):
                    what = (
                        "the token was refused (401 Unauthorized)"
                        if status == 401
                        else "the token was refused (403 Forbidden: no access to this dataset or organisation)"
                    )
                    hint = "" if self.org_id else "; a personal token also needs AXIOM_ORG_ID"
                    raise TokenRefused(self.scrub(f"{what}: {message}; check AXIOM_TOKEN{hint}"))
                if status == 429:
                    wait = self._rate_limit_wait(response)
                    last = f"rate limited (429: {message})"
                elif status >= 500:
                    last = f"server error {status}: {message}"
                else:  # 400 bad query, 404 unknown dataset, 430 query limit, ...
                    raise QueryRejected(self.scrub(f"Axiom answered {status}: {message}"))
            if attempt == p.attempts:
                break
            if wait is None:
                wait = min(backoff, p.max_backoff_s) * (1 + p.jitter * (2 * random.random() - 1))
                backoff *= 2
            if waited + wait > p.max_total_wait_s:
                raise GaveUp(
                    self.scrub(
                        f"{last}; gave up after {attempt} attempts "
                        f"(the next wait of {wait:.1f}s would pass the {p.max_total_wait_s:g}s budget)"
                    )
                )
            p.sleep(wait)
            waited += wait
            self.waited_s += wait
        raise GaveUp(self.scrub(f"{last}; gave up after {p.attempts} attempts and {waited:.1f}s of waiting"))

    def _rate_limit_wait(self, response: httpx.Response) -> float:
        """Seconds to wait after a 429: Retry-After (seconds or an HTTP date), else X-RateLimit-Reset (UTC epoch
        seconds; a value too small to be an epoch is taken as seconds from now), else the cap; then capped."""
        cap = self.policy.max_rate_limit_wait_s
        wait = None
        retry_after = response.headers.get("Retry-After")
        if retry_after:
            try:
                wait = float(retry_after)
            except ValueError:
                try:
                    when = email.utils.parsedate_to_datetime(retry_after)
                    wait = when.timestamp() - time.time()
                except (TypeError, ValueError):
                    wait = None
        reset = response.headers.get("X-RateLimit-Reset")
        if wait is None and reset:
            try:
                value = float(reset)
                wait = value - time.time() if value > 1e9 else value
            except ValueError:
                wait = None
        if wait is None or not math.isfinite(wait):
            wait = cap
        return min(max(wait, 0.0), cap)

    def _message(self, response: httpx.Response) -> str:
        try:
            data = response.json()
            message = data.get("message") if isinstance(data, dict) else None
        except ValueError:
            message = None
        if not message:
            message = response.reason_phrase or "no message"
        trace = response.headers.get("X-Axiom-Trace-Id")
        text = redact_text(str(message))[:300] + (f" (trace {trace})" if trace else "")  # redacted before it is cut
        return self.scrub(text)

    def _parse(self, response: httpx.Response) -> Table:
        def bad(why: str) -> BadResponse:
            ctype = response.headers.get("Content-Type", "?")
            return BadResponse(self.scrub(f"unexpected answer ({len(response.content)} bytes, {ctype}): {why}"))

        try:
            data = json.loads(response.content)
        except ValueError as exc:
            raise bad(f"not JSON ({exc}); cut short?") from None
        except RecursionError:
            raise bad("JSON nested too deeply to decode") from None
        if may_hold_surrogates(response.content):
            data = without_surrogates(data)
        if not isinstance(data, dict) or not isinstance(data.get("tables"), list):
            keys = ", ".join(sorted(data)[:8]) if isinstance(data, dict) else type(data).__name__
            raise bad(f"no tables list (got {keys}); not a tabular-format answer")
        status = got if isinstance(got := data.get("status"), dict) else {}
        if status.get("isPartial"):
            raise bad("Axiom marked the result partial (isPartial); the window would have gaps")
        if not data["tables"]:
            return Table([], [], status)
        table = data["tables"][0]
        if not isinstance(table, dict):
            raise bad("tables[0] is not an object")
        fields, columns = table.get("fields"), table.get("columns")
        if not isinstance(fields, list) or not all(
            isinstance(f, dict) and isinstance(f.get("name"), str) for f in fields
        ):
            raise bad("tables[0].fields is not a list of {name, type}")
        if columns is None or columns == []:
            return Table([f["name"] for f in fields], [], status)
        if not isinstance(columns, list) or len(columns) != len(fields):
            raise bad(f"{len(fields)} fields but {len(columns) if isinstance(columns, list) else 'no'} columns")
        if not all(isinstance(c, list) for c in columns) or len({len(c) for c in columns}) != 1:
            raise bad("columns are not lists of one length")
        names = [f["name"] for f in fields]
        if len(columns[0]) and "_time" not in names:
            raise bad("rows without a _time column")
        return Table(names, columns, status)
