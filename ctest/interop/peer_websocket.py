"""python3-websockets on both ends through sluice: a websockets client, sluice's HTTP/1.1
Upgrade path (a route with `upgrade: [websocket]`), a websockets echo server. Text and
binary messages echoed exact, pings both ways, the close handshake seen on both sides;
over ws:// and wss:// (TLS listener); and a route that does not allow the upgrade."""

import asyncio
import os
import ssl
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402

try:
    import websockets
except ImportError:  # need_modules fails the case
    websockets = None

SIZES = (1, 64 << 10, 1 << 20)


class Echo:
    """A websockets echo server: echoes every message; "server-ping" makes it ping the
    client and answer "pong-ok" once the pong came. Records each connection's close."""

    def __init__(self):
        self.closes = []    # (code, reason) the server saw, one per connection
        self.requests = []  # the handshake request's headers, one per connection

    async def handler(self, ws, path=None):
        self.requests.append(dict(ws.request_headers))
        try:
            async for msg in ws:
                if msg == "server-ping":
                    await asyncio.wait_for(await ws.ping(b"from-server"), 10)
                    await ws.send("pong-ok")
                else:
                    await ws.send(msg)
        finally:
            await ws.wait_closed()
            self.closes.append((ws.close_code, ws.close_reason))


def gateway(t, port, upgrade="[websocket]", tls=False):
    c = io.certs(t) if tls else None
    ups = io.upstream("127.0.0.1:%d" % port)
    routes = "  - { name: all, match: { paths: [/] }, upstream: o%s }\n" % (
        ", upgrade: %s" % upgrade if upgrade else "")
    return io.l7(t, ups, routes=routes, tls=c["localhost"] if c else None), c


async def exchange(t, label, uri, echo, ssl_ctx=None):
    rnd = os.urandom(max(SIZES))
    async with websockets.connect(uri, max_size=None, ssl=ssl_ctx, open_timeout=20,
                                  close_timeout=20) as ws:
        t.check("%s: the upgrade through sluice completed (101, a websocket open)" % label,
                ws.open, "open", ws.state)
        bad = []
        for size in SIZES:
            text = "".join(chr(0x61 + b % 26) for b in rnd[:size])
            for msg in (text, rnd[:size]):
                await ws.send(msg)
                got = await asyncio.wait_for(ws.recv(), 30)
                if got != msg or type(got) is not type(msg):
                    bad.append((type(msg).__name__, size, type(got).__name__, len(got)))
        t.check("%s: text and binary messages of 1 B, 64 KiB, 1 MiB echoed exact (6 of 6)" % label,
                not bad, [], bad)
        pong = await ws.ping(b"from-client")
        await asyncio.wait_for(pong, 10)
        t.check("%s: the client's ping got its pong" % label, pong.done() and not pong.exception(),
                "pong", pong)
        await ws.send("server-ping")
        got = await asyncio.wait_for(ws.recv(), 10)
        t.check("%s: the server's ping got the client's pong" % label, got == "pong-ok", "pong-ok", got)
        await ws.close(code=1000, reason="bye")
        client_close = (ws.close_code, ws.close_reason)
    for _ in range(100):
        if echo.closes:
            break
        await asyncio.sleep(0.05)
    t.check("%s: close handshake: code 1000 'bye' seen by the client (the server's echo) and by "
            "the server" % label, client_close == (1000, "bye") and echo.closes == [(1000, "bye")],
            "(1000, 'bye') both", (client_close, echo.closes))


def run(t, label, tls):
    io.need_modules(t, "websockets")
    echo = Echo()

    async def main():
        async with websockets.serve(echo.handler, "127.0.0.1", 0, max_size=None) as server:
            port = server.sockets[0].getsockname()[1]
            s, c = gateway(t, port, tls=tls)
            ctx = None
            if tls:
                ctx = ssl.create_default_context(cafile=c["ca"])
                uri = "wss://localhost:%d/chat" % s.port("tls")
            else:
                uri = "ws://127.0.0.1:%d/chat" % s.port()
            await exchange(t, label, uri, echo, ctx)
            _, samples = s.metrics()
            n = sum(io.h.metric_values(samples, "sluice_requests_total", route="all", code="101"))
            t.check("%s: the gateway counted one 101 (an upgrade that became a tunnel)" % label, n == 1, 1, n)
    asyncio.run(main())


@io.case("h1.echo", "a websockets client through an HTTP/1.1 route with upgrade: [websocket] to "
         "a websockets echo server: text and binary of 1 B, 64 KiB, 1 MiB echoed exact, pings both "
         "ways, close 1000 seen on both sides", budget=60)
def h1_echo(t):
    run(t, "ws://", tls=False)


@io.case("tls.echo", "the same WebSocket exchange as wss:// through sluice's TLS listener "
         "(certificate verified against the test CA) to a plain ws:// origin", budget=60)
def tls_echo(t):
    run(t, "wss://", tls=True)


@io.case("h1.upgrade_not_allowed", "a route without upgrade: proxies the handshake as plain HTTP "
         "(Upgrade dropped): the websockets server answers 426, the client's connect fails with "
         "that status and no tunnel opens", budget=60)
def not_allowed(t):
    io.need_modules(t, "websockets")
    echo = Echo()

    async def main():
        async with websockets.serve(echo.handler, "127.0.0.1", 0) as server:
            s, _ = gateway(t, server.sockets[0].getsockname()[1], upgrade=None)
            try:
                async with websockets.connect("ws://127.0.0.1:%d/chat" % s.port(), open_timeout=20):
                    got = "opened"
            except websockets.exceptions.InvalidStatusCode as e:
                got = e.status_code
            t.check("the client's handshake fails with the origin's 426 Upgrade Required", got == 426, 426, got)
            t.check("no WebSocket opened at the server", echo.requests == [], [], echo.requests)
            _, samples = s.metrics()
            codes = {l["code"]: v for n, l, v in samples if n == "sluice_requests_total"}
            t.check("the gateway counted one 426 and no 101", codes == {"426": 1}, {"426": 1}, codes)
    asyncio.run(main())


if __name__ == "__main__":
    io.main()
