"""A real OpenAI-compatible HTTP server on 127.0.0.1 answering canned completions (test helper)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class CannedServer:
    """``reply(prompt) -> str`` decides every completion; ``requests`` counts POSTs."""

    def __init__(self, reply: Callable[[str], str]):
        self.reply = reply
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests += 1
                chat = self.path.endswith("/chat/completions")
                prompt = body["messages"][-1]["content"] if chat else body["prompt"]
                texts = [outer.reply(prompt) for _ in range(body.get("n", 1))]
                choices = [{"index": i, "message": {"role": "assistant", "content": t}} if chat
                           else {"index": i, "text": t} for i, t in enumerate(texts)]
                data = json.dumps({"object": "text_completion", "choices": choices}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep test output quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
