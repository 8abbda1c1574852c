"""Model access for the agent: `POST /v1/messages` and `POST /v1/messages/count_tokens`,
compatible with the Anthropic Messages API (incl. `stream: true`), so the stock `anthropic`
SDK works with its HTTP client bound to the gateway's unix socket; and, beside them, the
OpenAI API's `POST /v1/chat/completions`, `POST /v1/responses` and `GET /v1/models` for the
stock `openai` SDK and the agents built on it. Both go through the same parse, gate, budget,
journal and blobs; only the edges differ (the allowlist's names, the usage fields, the error
shape, the scripted answer's wire format: modelopenai.py).

Where answers come from (config `model.mode`):
- `anthropic`: the real API at `model.upstream`, reached only through the egress proxy (the
  same checks and connection code as `http.request`, http.py). The gateway reads the API
  key from `model.key_file` and sends it as `x-api-key`; credentials the agent sends are
  dropped (only `anthropic-version` and `anthropic-beta` are forwarded). The key is scrubbed
  from everything that comes back (body, headers, error text) before it is recorded or sent.
  Upstream errors (429, 500, 529, ...) come back with their status, body and the headers the
  SDK's retry logic reads (`retry-after`, `retry-after-ms`, `x-should-retry`, `request-id`).
- `replay`: the responses recorded in earlier gateway journals (+ their blob dir), matched by
  request digest and order: the n-th call with digest D gets the n-th recorded response for
  D, byte for byte. Nothing leaves the gateway. A request the recording does not have is a
  409 `replay_mismatch` naming the digest and position, never a fallback.
- `openai`: any OpenAI-compatible API at `model.upstream` (OpenAI, vLLM, Ollama, a LiteLLM
  proxy), the same way, the key sent as a bearer token. One upstream speaks one API: the
  other API's routes answer 404 `other_api`.
- `scripted`: the responses listed in a JSON fixture, in order (demos and tests), served on
  either API's routes.

Recording: every call is gated (tool `model.messages`, non-mutating, so the budget rules
apply) and journaled as one `model_call` line: the request's digest (SHA-256 of its
canonical JSON, the request itself stored as the blob of that name), the decision, the
status, the headers passed back, usage, cost and the SHA-256 of the response bytes, which are
stored content-addressed as `<model.blob_dir>/<sha256>`. The blob is fsynced and the line
written BEFORE the answer is sent; a stream is read from upstream to its end first, recorded,
and then sent whole (its bytes unchanged: the SDK parses an SSE body that arrives at once
like any other). A response that cannot be recorded is not sent: the agent gets a 500.

What may be sent: features.py's allowlist of request keys, tool types, content and betas
(plus what the spec allows by name); anything else is refused before the gate, journaled
(`request_rejected`, code `feature_refused`) with what it was and how to allow it, because
the provider would act on it by itself (MCP servers, server tools, URL sources, ...). The
request blob is stored only once the gate allowed the call: a refused or denied request
leaves its digest in the journal and nothing in the blob store.

Accounting: input, output, cache-write and cache-read tokens from `usage` (streams:
`message_start`'s usage, updated by each `message_delta`'s cumulative usage; OpenAI answers:
prompt tokens less cached ones as input, cached ones as cache reads; a chat stream carries
usage only with `stream_options.include_usage`, else it counts at its reservation) feed the
budget counter `tokens`; priced by `model.prices` (currency per million tokens), plus the
server-tool fees of `usage.server_tool_use` (`model.server_tool_fees`), they feed `cost`.
With a cost limit, a call to a model without a price is denied (the budget could not be
kept). Before the call, its most (its output cap plus an input estimate of one token per
INPUT_BYTES_PER_TOKEN canonical bytes plus IMAGE_TOKENS per image, and their price) is
reserved against both budgets, so calls in flight together cannot pass a limit; an output cap
larger than what the budgets leave is clamped to it (and forwarded so: `max_tokens`,
`max_completion_tokens`, `max_output_tokens`), so a large cap does not lock an agent out; after it,
the reservation is settled to the
usage the answer reports (an answer whose usage cannot be read counts at its
reservation). Gateway-made errors use Anthropic's error shape
`{"type": "error", "error": {"type": ..., "message": ...}}`, or OpenAI's on its routes.

The pieces: modelwire.py (calls, responses, errors), modelsources.py (where answers come
from), blobs.py (the content-addressed store), modelusage.py (usage and price); this module
is the proxy that parses, gates, answers, records and sends. Standard library only (this
runs inside the gateway image).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any

from assure.core import gate
from assure.core.chain import canonical
from assure.core.record import dataclass, replace
from assure.gateway import features
from assure.gateway.blobs import Blobs, read_file
from assure.gateway.config import Config
from assure.gateway.dispatch import MODEL_ROUTES, MODEL_TOOL, Answer, Dispatcher
from assure.gateway.modelsources import Replay, Script, Upstream
from assure.gateway.modelusage import FEE_TOOLS, USAGE_FIELDS, cost_of, fees_of, price_for, usage_of
from assure.gateway.modelwire import (
    OPENAI,
    OUTPUT_CAPS,
    PATHS,
    SPENDING,
    Call,
    Failure,
    ModelError,
    Response,
    failure_response,
)

DEFAULT_VERSION = "2023-06-01"
MAX_TOKENS = (
    2**31 - 1
)  # a larger max_tokens is refused: priced, it overflows to inf (no journal line holds it)
INPUT_BYTES_PER_TOKEN = 4  # the input estimate a reservation uses (the answer's usage settles it)
# Under a budget, a call reserves its input estimate and at most what the budget has left for
# its output, and is forwarded with its output cap clamped to that: a large `max_tokens` (Claude
# Code sends 128000) shrinks to fit instead of being denied. A call left less than MIN_OUTPUT
# is denied by the budget rule. An OpenAI call that sets no cap gets DEFAULT_OUTPUT at most.
MIN_OUTPUT = 1
DEFAULT_OUTPUT = 32768
# An image costs by its pixels, not its bytes (a blank 1092 x 1092 PNG is 304 base64 bytes
# and ~1,600 tokens): each image block reserves this on top of its bytes. ~1,600 is the most
# after the provider's resize on Claude 4.x; later models go to ~4,000 for a 12 MP photo.
IMAGE_TOKENS = 4096
REDACTED = "[redacted]"
MIN_KEY_CHARS = 16
MAX_KEY_BYTES = 4096
_VERSION = re.compile(r"^[0-9A-Za-z._-]{1,64}$")
_BETA = re.compile(r"^[0-9A-Za-z._-]+( *, *[0-9A-Za-z._-]+)*$")
_QUERY = re.compile(r"^[0-9A-Za-z._=&-]{0,256}$")


def unavailable(dispatcher: Dispatcher, endpoint: str) -> Answer:
    """The answer when the config has no `model` section (journaled as a rejected request)."""
    message = "this run has no model access: the gateway config has no `model` section"
    dispatcher.reject(404, "no_model", message, target=PATHS[endpoint])
    return _answer(
        failure_response(
            Failure(404, "not_found_error", message, code="no_model", retry=False),
            endpoint in OPENAI,
        ),
        None,
    )


def _answer(response: Response, action_id: str | None) -> Answer:
    headers = response.headers + ((("x-assure-action-id", action_id),) if action_id else ())
    return Answer(response.status, {}, raw=response.body, headers=headers)


def read_key(path: str) -> str:
    """The API key: one line of printable ASCII. Errors never quote the file's content."""
    try:
        data = read_file(path, MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise ModelError(
            f"model.key_file: cannot read {path}: {exc.strerror or type(exc).__name__}"
        ) from None
    if len(data) > MAX_KEY_BYTES:
        raise ModelError(
            f"model.key_file: {path} is over {MAX_KEY_BYTES} bytes; it must hold only the API key"
        )
    key = data.strip()
    if len(key) < MIN_KEY_CHARS or any(not 0x21 <= b <= 0x7E for b in key):
        raise ModelError(
            f"model.key_file: {path} must hold one API key: at least {MIN_KEY_CHARS} printable"
            " ASCII characters, no spaces"
        )
    return key.decode("ascii")


class ModelProxy:
    """Serves the model routes for one gateway: parse, gate, answer, record, then send."""

    def __init__(self, config: Config, dispatcher: Dispatcher):
        if config.model is None:
            raise ModelError("the gateway config has no `model` section")
        self._model = config.model
        self._allow = features.Allow(**config.model.allow)
        self._cost_limited = config.policy.cost_limit is not None
        self._dispatcher = dispatcher
        self._blobs = Blobs(self._model.blob_dir, create=True)
        self._key: str | None = None
        self._source: Upstream | Replay | Script
        if self._model.mode in ("anthropic", "openai"):
            self._key = read_key(self._model.key_file or "")
            self._source = Upstream(self._model, config.egress, self._key)
        elif self._model.mode == "replay":
            self._source = Replay(self._model)
        else:
            self._source = Script(self._model.script or "")

    def describe(self) -> dict[str, Any]:
        """For `GET /v1/health`."""
        return {
            "mode": self._model.mode,
            "routes": sorted(MODEL_ROUTES),
            "models_priced": sorted(self._model.prices),
        }

    def handle(self, endpoint: str, headers: Mapping[str, str], query: str, body: bytes) -> Answer:
        """Answer one request to a model route (`endpoint` is a value of MODEL_ROUTES)."""
        started = time.monotonic()
        openai = endpoint in OPENAI
        try:
            call = self._parse(endpoint, headers, query, body)
            features.check(call.parsed, call.beta, self._allow, endpoint)
        except (
            features.Refused
        ) as exc:  # something the provider would act on by itself: every part named at once
            allow = {"allow": exc.allow()} if exc.problems else {}
            failure = Failure(
                403,
                "permission_error",
                f"refused by the gateway{',' if exc.problems else ':'} {exc}",
                code="feature_refused",
                retry=False,
                detail=allow,
            )
            self._dispatcher.reject(
                failure.status, failure.code, failure.message, target=PATHS[endpoint], **allow
            )
            return _answer(failure_response(failure, openai), None)
        except Failure as exc:  # refused before the gate, like any malformed request
            self._dispatcher.reject(exc.status, exc.code, exc.message, target=PATHS[endpoint])
            return _answer(failure_response(exc, openai), None)
        record: dict[str, Any] = {
            "action_id": uuid.uuid4().hex,
            "tool": MODEL_TOOL,
            "endpoint": endpoint,
            "mode": self._model.mode,
            "request_sha256": call.digest,
            "request_bytes": len(call.body),
            "model": self._dispatcher.field(call.model),  # the agent's string: long ones by digest
            "stream": call.stream,
            "anthropic_version": None if call.openai else call.version,
            "anthropic_beta": call.beta,
            "query": call.query or None,
        }
        action = gate.Action(
            MODEL_TOOL,
            False,
            scope=f"model:{endpoint}",
            resource_mode="external" if self._key else gate.SANDBOX,
            spends=True,
        )
        fit, uncountable = self._reservation(call)
        decision = self._dispatcher.decide_model_call(
            record, action, self._unpriced(call) or uncountable, fit
        )
        if decision is None:
            message = "the gateway journal is unavailable; no model calls are served"
            return _answer(
                failure_response(
                    Failure(503, "api_error", message, code="unavailable", retry=False), openai
                ),
                None,
            )
        if decision.allowed:
            try:
                self._blobs.put(call.canonical)  # the request, under its digest: only once allowed
            except OSError as exc:
                return self._unrecorded(
                    record, f"the request could not be stored: {type(exc).__name__}", 0, 0.0
                )
            call = _clamped(call, fit.output, record)
            response = self._scrub(self._respond(call))
        else:
            message = f"model call denied by the gateway ({decision.rule}): {decision.reason}"
            response = failure_response(
                Failure(403, "permission_error", message, code="denied", retry=False), openai
            )
        try:
            tokens, cost = self._account(call, response, record)
        except Exception as exc:  # fail closed: journaled, and what it reserved counts as spent
            reserved = record.get("reserved") or {"tokens": 0, "cost": 0.0}
            record.update(tokens=reserved["tokens"], cost=reserved["cost"])
            return self._unrecorded(
                record,
                f"its usage could not be counted: {type(exc).__name__}",
                reserved["tokens"],
                reserved["cost"],
            )
        record.update(
            served=response.served,
            status=response.status,
            error=response.error,
            response_headers=dict(response.headers),
            response_bytes=len(response.body),
            ms=round((time.monotonic() - started) * 1000, 1),
            **response.extra,
        )
        # a denied call's answer is the gateway's own error: its digest is journaled, nothing stored
        try:
            record["response_sha256"] = (
                self._blobs.put(response.body)
                if decision.allowed
                else hashlib.sha256(response.body).hexdigest()
            )
        except OSError as exc:
            return self._unrecorded(
                record, f"the response could not be stored: {type(exc).__name__}", tokens, cost
            )
        if not self._dispatcher.record_model_call(record, tokens, cost):
            message = "the journal could not be written; the response is withheld"
            return _answer(
                failure_response(
                    Failure(500, "api_error", message, code="journal_error", retry=False), openai
                ),
                record["action_id"],
            )
        return _answer(response, record["action_id"])

    def _parse(self, endpoint: str, headers: Mapping[str, str], query: str, body: bytes) -> Call:
        def bad(code: str, message: str) -> Failure:
            return Failure(400, "invalid_request_error", message, code=code, retry=False)

        upstream = self._model.mode if self._key else None
        if upstream is not None and (endpoint in OPENAI) != (upstream == "openai"):
            api = "an OpenAI-compatible API" if upstream == "openai" else "the Anthropic API"
            raise Failure(
                404,
                "not_found_error",
                f"this run's model upstream is {api} (model.mode {upstream!r}): {PATHS[endpoint]}"
                " is not served",
                code="other_api",
                retry=False,
            )
        try:
            parsed = (
                {}
                if endpoint == "models"
                else json.loads(body.decode("utf-8"), object_pairs_hook=_unique_keys)
            )
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise bad("bad_json", f"body is not valid JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise bad("bad_json", "body must be a JSON object")
        try:
            canon = canonical(parsed)
        except ValueError as exc:
            raise bad("bad_json", f"body is not plain JSON (NaN or Infinity): {exc}") from None
        version = headers.get("anthropic-version", DEFAULT_VERSION)
        if not _VERSION.match(version):
            raise bad("bad_header", "anthropic-version must be a version like 2023-06-01")
        beta = headers.get("anthropic-beta")
        if beta is not None and (len(beta) > 1024 or not _BETA.match(beta)):
            raise bad("bad_header", "anthropic-beta must be a comma-separated list of beta names")
        if not _QUERY.match(query):
            raise bad("bad_query", "the query string may hold only letters, digits and ._=&-")
        for key in OUTPUT_CAPS.get(endpoint, ()):
            value = parsed.get(key)
            if (value is not None or endpoint == "messages") and (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value <= MAX_TOKENS
            ):
                required = " is required:" if endpoint == "messages" else " must be"
                raise bad(
                    "bad_max_tokens",
                    f"{key}{required} a whole number 0..{MAX_TOKENS} (it is reserved against the"
                    " token budget before the call)",
                )
        return Call(
            endpoint,
            body,
            canon,
            hashlib.sha256(canon).hexdigest(),
            parsed,
            query,
            version,
            beta or None,
        )

    def _unpriced(self, call: Call) -> str | None:
        """Why this call's cost could not be counted against the run's cost limit (None: it can)."""
        if (
            not self._cost_limited
            or call.endpoint not in SPENDING
            or price_for(self._model.prices, call.model)
        ):
            return None
        return (
            f"no price for model {call.model!r} in model.prices, and this run has a cost limit: its"
            " cost could not be counted"
        )

    def _reservation(self, call: Call) -> tuple[_Fit, str | None]:
        """(the most this call may spend, why its cost cannot be reserved): its output cap (or
        what the budget leaves), an input estimate (priced as a cache write if that costs
        more), and `max_uses` of each fee-charging server tool. count_tokens and models spend
        nothing.
        """
        if call.endpoint not in SPENDING:
            return _Fit(0, 0, 0.0, 0.0, 0.0), None
        estimate = -(-len(call.canonical) // INPUT_BYTES_PER_TOKEN) + IMAGE_TOKENS * _images(
            call.parsed
        )
        found = price_for(self._model.prices, call.model)
        price_in, price_out = (
            (0.0, 0.0)
            if found is None
            else (
                max(found[1].input, found[1].cache_write) / 1_000_000,
                found[1].output / 1_000_000,
            )
        )
        fees, why = 0.0, None
        tools = call.parsed.get("tools")
        for tool in tools if isinstance(tools, list) else ():
            kind = tool.get("type") if isinstance(tool, dict) else None
            field_name = next(
                (
                    f
                    for prefix, f in FEE_TOOLS.items()
                    if isinstance(kind, str) and kind.startswith(prefix)
                ),
                None,
            )
            fee = self._model.server_tool_fees.get(field_name, 0.0) if field_name else 0.0
            if not fee:
                continue
            uses = tool.get("max_uses")
            if isinstance(uses, bool) or not isinstance(uses, int) or uses < 0:
                if self._cost_limited:
                    why = (
                        why
                        or f"tool {kind!r} has no max_uses, so its fees cannot be reserved"
                        " against this run's cost limit"
                    )
                continue
            fees += uses * fee
        if not math.isfinite(
            fees
        ):  # e.g. max_uses of 10**308: no journal line holds inf, and no limit can be kept
            fees, why = 0.0, "its cost cannot be reserved: it is larger than a float can hold"
        return _Fit(estimate, call.output_cap, price_in, price_out, fees), why

    def _respond(self, call: Call) -> Response:
        try:
            return self._source.respond(call)
        except Failure as exc:  # a replay mismatch's differing paths go to the journal line too
            response = failure_response(exc, call.openai)
            return (
                replace(response, extra={"differs": exc.detail["differs"]})
                if "differs" in exc.detail
                else response
            )
        except Exception as exc:  # fail closed: an answer, never a crash
            return failure_response(
                Failure(
                    500, "api_error", f"gateway error: {type(exc).__name__}", code="internal_error"
                ),
                call.openai,
            )

    def _scrub(self, response: Response) -> Response:
        """The API key must never reach the agent, the journal or a blob."""
        if self._key is None:
            return response
        key = self._key
        if key.encode("ascii") not in response.body and not any(
            key in v for _, v in response.headers
        ):
            return response
        headers = tuple((n, v.replace(key, REDACTED)) for n, v in response.headers)
        body = response.body.replace(key.encode("ascii"), REDACTED.encode("ascii"))
        return Response(
            response.status, headers, body, response.served, response.extra, response.error
        )

    def _account(self, call: Call, response: Response, record: dict[str, Any]) -> tuple[int, float]:
        """Tokens and cost of a successful Messages response (else none); usage into `record`."""
        if call.endpoint not in SPENDING or response.status != 200 or response.served == "gateway":
            record.update(usage=None, tokens=0, cost=0.0, priced=None)
            return 0, 0.0
        reported, answered_model = usage_of(response, call.openai)
        if not reported and record.get(
            "reserved"
        ):  # an answer whose usage cannot be read costs the most it could
            tokens, cost = record["reserved"]["tokens"], record["reserved"]["cost"]
            record.update(usage=None, tokens=tokens, cost=cost, priced=None, usage_unread=True)
            return tokens, cost
        usage = {name: reported.get(name, 0) for name in USAGE_FIELDS}
        server = {name: reported.get(name, 0) for name in FEE_TOOLS.values()}
        tokens = sum(usage.values())
        found = price_for(self._model.prices, answered_model, call.model)
        cost = (cost_of(usage, found[1]) if found else 0.0) + fees_of(
            server, self._model.server_tool_fees
        )
        record.update(
            usage=usage,
            server_tool_use=server,
            tokens=tokens,
            cost=round(cost, 9),
            priced=found[0] if found else None,
            response_model=self._dispatcher.field(answered_model),
        )
        return tokens, cost

    def _unrecorded(self, record: dict[str, Any], why: str, tokens: int, cost: float) -> Answer:
        """A call whose request or response could not be stored: journaled (tokens counted),
        and the agent gets a 500 instead of an unrecorded answer."""
        record.setdefault("decision", gate.DENY)
        record.update(
            served="gateway", status=500, error="record_failed", reason=why, response_sha256=None
        )
        self._dispatcher.record_model_call(record, tokens, cost)
        message = f"the gateway could not record this call ({why}); nothing is returned"
        failure = Failure(500, "api_error", message, code="record_failed", retry=False)
        return _answer(
            failure_response(failure, record.get("endpoint") in OPENAI), record["action_id"]
        )


@dataclass
class _Fit:
    """The most one call may spend: called by the dispatcher, under its lock, with what the
    budgets have left (None: no limit), it shrinks the output to fit and keeps it in `output`
    (None: the call is forwarded as it is)."""

    estimate: int  # input tokens, estimated
    cap: int | None  # the output cap the agent asked for (None: none)
    price_in: float  # currency per token
    price_out: float
    fees: float  # server-tool fees, reserved whole
    output: int | None = None

    def __call__(self, tokens_left: int | None, cost_left: float | None) -> tuple[int, float]:
        limited = tokens_left is not None or cost_left is not None
        want = self.cap if self.cap is not None or not limited else DEFAULT_OUTPUT
        room = [] if want is None else [want]
        if tokens_left is not None:
            room.append(tokens_left - self.estimate)
        if cost_left is not None and self.price_out > 0:
            room.append(
                math.floor((cost_left - self.fees - self.estimate * self.price_in) / self.price_out)
            )
        output = min(room) if room else None
        if output is not None and output < min(
            MIN_OUTPUT, want or 0
        ):  # no room: reserve what it asked, and the gate denies it
            output = want
        self.output = output
        return (
            self.estimate + (output or 0),
            self.estimate * self.price_in + (output or 0) * self.price_out + self.fees,
        )


def _clamped(call: Call, output: int | None, record: dict[str, Any]) -> Call:
    """`call` with its output cap set to `output` (what the budget let it reserve), if that
    differs from what the agent asked; the journal keeps both."""
    keys = OUTPUT_CAPS.get(call.endpoint, ())
    if output is None or output == call.output_cap or not keys:
        return call
    record["output_cap"] = {"asked": call.output_cap, "forwarded": output}
    parsed = {**call.parsed, **{key: output for key in keys if key in call.parsed}}
    parsed.setdefault(keys[0], output)
    return replace(
        call, body=json.dumps(parsed, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    )


def _images(value: Any) -> int:
    """The objects of `"type": "image"` anywhere in a request (depth bounded by the pre-scan)."""
    if isinstance(value, dict):
        return (value.get("type") == "image") + sum(_images(v) for v in value.values())
    if isinstance(value, list):
        return sum(_images(v) for v in value)
    return 0


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key in object")
    return out
