"""What the HTTP client asks a server before a run: the models it serves (with vLLM's `root`,
`parent` and `max_model_len`) and whether it honours structured outputs. These questions are the
client's own: the endpoint table counts them as `preflight`, apart from the roles' requests."""

from __future__ import annotations

import asyncio
import json
import logging

from mascot.llm.base import split_reasoning
from mascot.llm.endpoints import EndpointState
from mascot.llm.http_errors import RequestFailure

log = logging.getLogger("mascot.llm.http")

PROBE_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes"]}},
    "required": ["answer"],
    "additionalProperties": False,
}


class ServerQuestions:
    """Preflight questions, mixed into `HTTPClient` (whose attempts and errors they use)."""

    async def list_models(self, max_retries: int | None = None, endpoint: EndpointState | None = None) -> list[str]:
        return [m.get("id", "") for m in await self.list_model_entries(max_retries, endpoint)]

    async def list_model_entries(self, max_retries: int | None = None, endpoint: EndpointState | None = None) -> list[dict]:
        """The server's /models entries (vLLM adds `root`, `parent` and `max_model_len`)."""
        if endpoint is not None:  # one server, asked twice at most: preflight needs a quick answer
            try:
                data = await self._attempt(endpoint, b"", self.timeout_s, "/models", counted=False)
            except RequestFailure as failure:
                if not failure.retryable:
                    raise self._error(f"{endpoint.label}: {failure}", failure.cause) from None
                await asyncio.sleep(0.5)
                try:
                    data = await self._attempt(endpoint, b"", self.timeout_s, "/models", counted=False)
                except RequestFailure as again:
                    raise self._error(f"{endpoint.label}: {again}", again.cause) from None
        else:
            data = await self._send(b"", path="/models", max_retries=max_retries)
        return [m for m in data.get("data") or [] if isinstance(m, dict)]

    async def probe_structured_outputs(self) -> bool:
        """Asks each server once whether it honours `response_format` json_schema for this model
        (the answer is cached per server and model); structured requests are sent only when all do."""
        results = []
        for endpoint in self._endpoints:
            if self.model not in endpoint.structured_outputs:
                endpoint.structured_outputs[self.model] = await self._probe(endpoint)
            results.append(endpoint.structured_outputs[self.model])
        self.structured_outputs = all(results)
        return self.structured_outputs

    async def _probe(self, endpoint: EndpointState) -> bool:
        body = {
            "model": self.model, "max_tokens": 32, "temperature": 0.0,
            "messages": [{"role": "user", "content": 'Reply with the JSON object {"answer": "yes"}.'}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "probe", "schema": PROBE_SCHEMA}},
            **self.extra_body,
        }
        if self.template_kwargs:
            body["chat_template_kwargs"] = {**(self.extra_body.get("chat_template_kwargs") or {}), "enable_thinking": False}
        try:
            completion = await self._attempt(endpoint, json.dumps(body).encode(), self.timeout_s, counted=False)
            content = ((completion.get("choices") or [{}])[0].get("message") or {}).get("content") or ""
            reply = json.loads(split_reasoning(content)[0])
        except (RequestFailure, ValueError, IndexError, AttributeError) as exc:
            log.info("%s: no structured outputs for %s (%s)", endpoint.label, self.model, exc)
            return False
        return isinstance(reply, dict) and reply.get("answer") == "yes"
