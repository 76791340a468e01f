"""``gpuplan serve``: the planner as a local web page (needs the ``web`` extra)."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys

from ..errors import InputError

HELP = "the planner as a web page on this machine (http://127.0.0.1:8000)"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help=HELP, description=HELP + "; needs pip install 'gpuplan[web]'")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only); another "
                        "address exposes the planner to that network")
    p.add_argument("--port", default="8000", help="TCP port (default 8000; 0: any free port)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p.add_argument("--header-timeout", default="10", metavar="S",
                   help="seconds a request's headers may take to arrive (default 10)")
    p.add_argument("--body-timeout", default="10", metavar="S",
                   help="seconds a request's body may take to arrive (default 10; then 408)")
    p.add_argument("--request-budget", default="30", metavar="S",
                   help="seconds of computing per request (default 30; then 503 with "
                        "Retry-After, and the work is stopped)")
    p.add_argument("--max-connections", default="2048", metavar="N",
                   help="open connections (default 2048; past it the oldest one waiting for "
                        "its headers is closed)")
    p.set_defaults(func=run)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_bind(host: str, port: int) -> None:
    """The address bound before anything is announced: a host that does not resolve or a port
    in use is one line (exit 2), not uvicorn's log line and exit 3. The probe socket is closed
    at once (``SO_REUSEADDR``, as uvicorn binds), so the server can take the port."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise InputError(f"--host {host!r}: not an address this machine can bind "
                         f"({getattr(e, 'strerror', None) or e}); e.g. --host 127.0.0.1",
                         field="host", value=host) from None
    family, kind, proto, _, addr = infos[0]
    try:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(addr)
    except OSError as e:
        raise InputError(f"--port {port} on {host}: cannot bind ({e.strerror or e}); give "
                         "another --port (0: any free one)", field="port", value=port) from None


def run(args: argparse.Namespace) -> int:
    from ..units import parse_number, parse_positive_int

    port = parse_positive_int(args.port, what="--port", minimum=0, maximum=65535)
    header_s, body_s, budget_s = (parse_number(v, what=w, bound="seconds") for v, w in (
        (args.header_timeout, "--header-timeout"), (args.body_timeout, "--body-timeout"),
        (args.request_budget, "--request-budget")))
    max_conn = parse_positive_int(args.max_connections, what="--max-connections",
                                  maximum=100_000)
    try:  # the web extra's boundary: Starlette and uvicorn are imported only by this command
        import uvicorn

        from ..web import create_app
        from ..web._protocol import bounded_protocol, file_limit_for
    except ModuleNotFoundError as e:
        if not (e.name or "").split(".")[0] in ("uvicorn", "starlette", "anyio"):
            raise
        raise InputError(f"gpuplan serve needs {e.name}, which is not installed; "
                         "pip install 'gpuplan[web]'") from None
    _check_bind(args.host, port)
    loopback = is_loopback(args.host)
    if not loopback:
        print(f"gpuplan: warning: serving on {args.host}: anyone who can reach this address "
              "can use the planner (there is no login); use --host 127.0.0.1 to keep it on "
              "this machine", file=sys.stderr)
    app = create_app(allowed_hosts=None if loopback else ["*"], body_timeout_s=body_s,
                     budget_s=budget_s, processes=True)
    # No uvicorn limit_concurrency: its refusal is plain text; the app refuses excess work itself
    # with a JSON 503 (gpuplan.web._app.MAX_PENDING), and the protocol bounds the connections
    # and the time their headers take (gpuplan.web._protocol, issue 32).
    held = file_limit_for(max_conn)
    if held < max_conn:
        print(f"gpuplan: warning: --max-connections {max_conn} lowered to {held}: the open-file "
              "limit (ulimit -Hn) holds no more", file=sys.stderr)
    http = bounded_protocol(header_timeout_s=header_s, max_connections=held)
    config = uvicorn.Config(app, host=args.host, port=port, log_level="warning", http=http,
                            timeout_keep_alive=5, server_header=False)
    server = uvicorn.Server(config)
    _announce(server, args.host, args.open)
    server.run()
    return 0


def _announce(server, host: str, open_browser: bool) -> None:
    """Print the URL (and open it) once the socket is listening: uvicorn's startup hook."""
    startup = server.startup

    async def started(sockets=None) -> None:
        await startup(sockets=sockets)
        if not server.started:
            return
        port = server.servers[0].sockets[0].getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}/"
        print(f"gpuplan serve: {url}  (Ctrl-C stops it)", flush=True)
        if open_browser:
            import webbrowser

            webbrowser.open(url)

    server.startup = started
