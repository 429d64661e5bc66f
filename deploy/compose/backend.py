#!/usr/bin/env python3
"""The demo's backends: one small HTTP/1.1 server per Compose service (backend-1..3), and
the same file when run-native starts them on loopback.

    python3 backend.py --listen 0.0.0.0:8091 --name backend-1

Every request is answered 200 with JSON naming the backend, the method, the path and the
X-Request-ID the gateway sent; GET /health answers {"status":"ok"} for the gateway's
active health checks. Python's standard library only.
"""

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", required=True, help="HOST:PORT")
    ap.add_argument("--name", required=True)
    args = ap.parse_args()
    host, port = args.listen.rsplit(":", 1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = args.name

        def answer(self):
            size = int(self.headers.get("Content-Length") or 0)
            if size:
                self.rfile.read(size)
            if self.path == "/health":
                doc = {"status": "ok"}
            else:
                doc = {"backend": args.name, "method": self.command, "path": self.path,
                       "request_id": self.headers.get("X-Request-ID")}
            body = (json.dumps(doc) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = answer

        def log_message(self, fmt, *a):  # the gateway's access log is the one to read
            pass

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer((host.strip("[]"), int(port)), Handler).serve_forever()


if __name__ == "__main__":
    main()
