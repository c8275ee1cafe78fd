"""The suite is offline by construction: hub variables set, connections beyond localhost refused."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from conftest import OFFLINE_VARIABLES, NetworkRefused

from mascot.llm.base import ChatRequest, LLMError
from mascot.llm.http import HTTPClient


def test_hub_libraries_are_told_they_are_offline():
    assert all(os.environ.get(variable) == "1" for variable in OFFLINE_VARIABLES)
    from huggingface_hub import constants

    assert constants.HF_HUB_OFFLINE  # read when first imported: set before any test imports it


@pytest.mark.parametrize("address", [("203.0.113.9", 443), ("huggingface.co", 443), ("2001:db8::1", 80, 0, 0)])
def test_connections_beyond_localhost_are_refused_naming_the_host(address):
    with pytest.raises(NetworkRefused, match=f"connection to {address[0]}:{address[1]} refused"):
        socket.create_connection(address[:2], timeout=1)
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    with socket.socket(family) as sock, pytest.raises(NetworkRefused, match=address[0]):
        sock.connect(address)


def test_localhost_stays_reachable():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=5):
            accepted, _ = server.accept()
            accepted.close()


async def test_the_http_client_fails_like_on_an_unreachable_server():
    client = HTTPClient("http://192.0.2.10:8000/v1", "m", max_retries=0)
    try:
        with pytest.raises(LLMError) as info:
            await client.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}]))
    finally:
        await client.aclose()
    assert info.value.cause.startswith("connection") and "192.0.2.10" in str(info.value)
    assert not asyncio.all_tasks() - {asyncio.current_task()}
