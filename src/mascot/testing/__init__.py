"""Test support: deterministic stand-ins for models and servers, never a network.

- `scripted`: `ScriptedClient`, a chat client that answers from a list, a function or patterns.
- `players`: deterministic role players (Director, Speaker, simulated user, judge) that answer by
  the request's role tag, as scripted clients (`group_client`, `judge_client`) or as stub-server
  responders (`stub_responder`, `stub_judge_responder`).
- `stub_server`: a small OpenAI-compatible server with scripted latency and failures
  (`start_stub_server`, `start_stub_server_process`, `python -m mascot.testing.stub_server`);
  `stub_app` is the server itself and `stub_shapes` what it sends back.

The provider registry builds the role players for endpoints of kind "scripted".
"""
