"""A fake OpenAI-compatible chat-completions server with a fixed latency, for `guardpolicy bench-llm`.

    python -m guardpolicy.devtools.fake_llm_server --latency-ms 50 [--port 0]

It prints one JSON line, {"base_url": "http://127.0.0.1:<port>/v1"}, once it listens; then serves until
killed:
- POST /v1/chat/completions: after `latency_ms` (asyncio.sleep, so every request waits concurrently, as on an
  engine that batches them), `n` choices answering the committee's yes/no questions ("yes" when the prompt
  mentions a bomb) - any model name;
- GET /v1/models: one model, `fake-judge` (readiness checks);
- GET /stats: {"requests": <chat completions received>} (the kill-and-resume count).

It runs in its own process so that the client being measured has the other core to itself: on a 2-core
machine the server and the client each get one. aiohttp (asyncio), because the standard library's threaded
server spends a thread per connection and would be the bottleneck well before 256 requests in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from aiohttp import web

ANSWERED_YES = "bomb"


def make_app(latency_s: float) -> web.Application:
    counter = {"requests": 0}

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        counter["requests"] += 1
        await asyncio.sleep(latency_s)
        question = body["messages"][-1]["content"]
        text = "yes" if ANSWERED_YES in question.lower() else "no"
        choices = [
            {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            for i in range(int(body.get("n") or 1))
        ]
        return web.json_response({"id": "fake", "object": "chat.completion", "choices": choices})

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake-judge", "object": "model"}]})

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(counter)

    app = web.Application()
    app.add_routes(
        [web.post("/v1/chat/completions", chat), web.get("/v1/models", models), web.get("/stats", stats)]
    )
    return app


async def serve(latency_s: float, port: int) -> None:
    runner = web.AppRunner(make_app(latency_s), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    bound = runner.addresses[0][1]
    print(json.dumps({"base_url": f"http://127.0.0.1:{bound}/v1"}), flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.latency_ms / 1000, args.port))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
