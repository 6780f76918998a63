"""Each emulated host's metadata server: the one key a program polls for a preemption notice.

On a VM, http://metadata.google.internal/computeMetadata/v1/ answers only requests that carry
`Metadata-Flavor: Google` (cloud.google.com/compute/docs/metadata/querying-metadata; without it:
403, cloud.google.com/compute/docs/troubleshooting/troubleshoot-metadata-server), and
`instance/preempted` reads `TRUE` once a Spot/preemptible VM is being preempted, `FALSE` before
(stanford-crfm/levanter src/levanter/infra/tpus.py polls it). Here it listens on the host's own
loopback address, on a port of its own, and every SSH session on the host gets
`GCE_METADATA_HOST=IP:PORT` in its environment: the variable Google's auth libraries read to
find the server, and the one the bundled runtime reads too. Any other key: 404, as for a key the
VM does not have. Responses carry `Metadata-Flavor: Google`, as the real server's do.
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PREEMPTED = "/computeMetadata/v1/instance/preempted"


class MetadataServer:
    def __init__(self, ip: str):
        self.preempted = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.headers.get("Metadata-Flavor") != "Google":
                    return self._answer(403, "Missing Metadata-Flavor:Google header.\n")
                if self.path.split("?")[0] != PREEMPTED:
                    return self._answer(404, "Not Found\n")
                return self._answer(200, "TRUE" if server.preempted else "FALSE")

            def _answer(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Type", "application/text")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # polled every few seconds: not worth a log line
                pass

        self._http = ThreadingHTTPServer((ip, 0), Handler)
        self._http.daemon_threads = True
        self.address = f"{ip}:{self._http.server_port}"
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=f"metadata {ip}", daemon=True)

    def start(self) -> MetadataServer:
        self._thread.start()
        return self

    def _serve(self) -> None:
        # Not serve_forever: its shutdown() waits for a poll of up to half a second, which a
        # few hundred hosts closed one after another turned into minutes (a closing emulator
        # was killed by `tpujob emulator stop` before it had ended its hosts). A request waits
        # in select() with no timeout; close() wakes it by shutting the socket down.
        while not self._closed:
            self._http.handle_request()

    def close(self) -> None:
        self._closed = True
        try:
            self._http.socket.shutdown(socket.SHUT_RDWR)  # wakes the select() on Linux
        except OSError:
            pass
        self._thread.join(timeout=5)
        self._http.server_close()
