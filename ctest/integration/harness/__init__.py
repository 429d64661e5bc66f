"""harness — shared machinery for sluice's black-box integration tests.

Python 3.11 standard library only. Every test_*.py in this folder imports it (this file
re-exports every name of the modules below, so `import harness as h` is all a test needs):

    import harness as h
    t = h.Suite("proxy_stream")
    def test_something(t): ...
    t.run(test_something, ...)        # prints checks, "N passed, M failed", exits

What it provides:
  * Suite: check(name, cond, expected, actual), a watchdog that kills everything
    the file started when it overruns its budget, a temp dir per test file, and
    the final summary line (exit 0 only when every check passed).
  * start_sluice(config_text, workers=N): runs `sluice run -c FILE --ready-file P`,
    waits for the ready file, returns a Sluice with port(listener), admin,
    admin_port, pid, proc, stop(), kill(), rss_kb(), hwm_kb(), log(), metrics(),
    status(), and metrics_until(pred) / status_until(pred) for what sluice counts
    after the client already has its answer (poll; never read such a count once).
  * MockUpstream: a real TCP server on 127.0.0.1:0 serving HTTP/1.1 keep-alive
    through a handler function, recording every connection and every byte it
    received; handlers may misbehave on demand (HANG, RESET, CLOSE, raw bytes,
    slow answers, truncated bodies, streamed bodies, wrong framing).
  * TCPServer: a raw TCP peer on 127.0.0.1:0 whose handle(conn) a subclass writes
    (greeters, TLS backends, recorders of first bytes).
  * Client: a raw TCP client (send exact bytes, read until close) with a small
    HTTP/1.1 response parser that reads N pipelined responses (CL, chunked,
    HEAD/1xx/204/304, read-until-close) and can stream a body into a sink.

Processes are stopped by PID only; threads poll a stop flag and are joined.

The modules, one section each (lower ones never import higher ones):
  lifecycle       paths (SRC, BIN), temp dirs, the registry cleanup_all stops at exit,
                  wait_until (poll a predicate to a deadline), poll (a value, until a
                  predicate of it holds),
                  debian_module (a module of a Debian package, e.g. python3-yaml)
  wire            raw sockets and bytes: Reader, HTTP/1.1 parsing, ports, TCPServer
  client          Client, build_request, request
  metrics         parse_prometheus, metric_values
  process         Suite, start_sluice / Sluice, run_cli, start_nginx (a real nginx peer)
  mock_upstream   MockUpstream and its Response / Request
  fault_upstream  start_fault_upstream (the C fault_upstream)
  certs           make_ca, make_leaf (the openssl CLI)
  data            pattern_blocks, pattern_sha256
  jwt             b64u, hs256, ed25519_key, eddsa (JWTs signed by hmac and the openssl CLI)
  latency         keepalive_load, percentile
  relay           HoldingRelay (a TCP relay that holds back a chosen HTTP request)
"""

from .certs import make_ca, make_leaf, openssl, s_client_request
from .client import Client, build_request, finish_head, request
from .data import pattern_blocks, pattern_sha256
from .latency import keepalive_load, percentile
from .jwt import b64u, ed25519_key, eddsa, hs256
from .fault_upstream import FAULT_BIN, FaultUpstream, start_fault_upstream
from .lifecycle import (BIN, HERE, SRC, _die_with_parent, _register, _unregister, cleanup_all,
                        debian_module, new_tmpdir, poll, stop_process, tmp_root,
                        wait_until)
from .metrics import metric_values, parse_prometheus
from .mock_upstream import (CLOSE, HANG, REASONS, RESET, ConnRecord, MockUpstream, Request,
                            Response, Stop, default_handler, json_response)
from .relay import HoldingRelay
from .process import (Sluice, SluiceStartError, Suite, read_alloc_count, run_cli, set_workers,
                      start_nginx, start_sluice)
from .wire import (HTTPResponse, Incomplete, ParseError, ReadTimeout, Reader, TCPServer,
                   bytes_reader, free_port, hall, hget, parse_headers, parse_responses, port_free,
                   read_chunked, read_response, recv_all, refused_port, short, tls_client_hello,
                   wait_port)
