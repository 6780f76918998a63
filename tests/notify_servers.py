"""Local endpoints for the notification tests: a webhook receiver (http.server in a thread), an
SMTP server (aiosmtpd), a port nothing listens on, one that accepts and never answers, and one
that answers a byte at a time for ever."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Webhook:
    """Records every POST body (JSON) it is sent; `delay` s before answering each. With `gate`,
    each POST is answered only once the gate is set (`arrived` is set when one comes in). With
    `location`, the answer carries that Location header (a redirect, with status 302 say).
    `requests`: (method, path) of every request, POST or not."""

    def __init__(self, port: int = 0, delay: float = 0.0, status: int = 200, gate: threading.Event | None = None,
                 location: str = ""):
        self.posts: list[dict] = []
        self.paths: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.delay, self.status, self.gate, self.location = delay, status, gate, location
        self.arrived = threading.Event()
        lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with lock:
                    hook.requests.append(("POST", self.path))
                hook.arrived.set()
                if hook.gate is not None:
                    hook.gate.wait()
                if hook.delay:
                    time.sleep(hook.delay)
                with lock:
                    hook.posts.append(json.loads(body))
                    hook.paths.append(self.path)
                self.send_response(hook.status)
                if hook.location:
                    self.send_header("Location", hook.location)
                self.end_headers()
                self.wfile.write(b"ok")

            def do_GET(self):
                with lock:
                    hook.requests.append(("GET", self.path))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/services/T000/B000/s3cr3tPath") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def texts(self) -> list[str]:
        return [p["text"] for p in self.posts]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Silent:
    """Accepts connections and never answers a byte."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self._stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.held.append(conn)

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def close(self) -> None:
        self._stop = True
        self.thread.join()
        for conn in self.held:
            conn.close()
        self.sock.close()


class Drip:
    """Answers every connection with an HTTP status line a byte at a time, each byte well within
    a per-read timeout, for as long as the client stays; `ended` is set once a client has gone
    (its connection shut or closed)."""

    def __init__(self, every: float = 0.05):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.every = every
        self.connected = threading.Event()
        self.ended = threading.Event()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        self.connected.set()
        line = b"HTTP/1.1 200 OK\r\nX-Drip: " + b"x" * 10_000_000
        with conn:
            for i in range(len(line)):
                if self._stop.wait(self.every):
                    return
                try:
                    conn.sendall(line[i:i + 1])
                except OSError:  # the client shut its end down or closed it
                    self.ended.set()
                    return

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def close(self) -> None:
        self._stop.set()
        self.thread.join()
        self.sock.close()


def own_ca(directory):
    """A certificate authority of this test's own and a certificate it signed for 127.0.0.1:
    (the CA's PEM file, a server-side SSLContext holding the certificate). Trusted only by a
    process told so (SSL_CERT_FILE), as a lab's private CA would be."""
    import datetime
    import ipaddress
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tpujob test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                             critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA256()))
    ca_file, cert_file, key_file = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return ca_file, context


class Mailbox:
    """An SMTP server on 127.0.0.1 keeping every message it is given; with `tls_context`, it
    offers STARTTLS with that certificate and takes no mail before it."""

    def __init__(self, *, username: str = "", password: str = "", tls_context=None):
        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult

        self.messages: list[dict] = []
        self.logins: list[str] = []
        box = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                box.messages.append({"from": envelope.mail_from, "to": list(envelope.rcpt_tos),
                                     "data": envelope.content.decode("utf8", "replace")})
                return "250 OK"

        def authenticate(server, session, envelope, mechanism, auth_data):
            ok = auth_data.login.decode() == username and auth_data.password.decode() == password
            if ok:
                box.logins.append(username)
            return AuthResult(success=ok)

        kwargs: dict = {}
        if username:
            kwargs = dict(authenticator=authenticate, auth_require_tls=False, auth_required=True)
        if tls_context is not None:
            kwargs.update(tls_context=tls_context, require_starttls=True)
        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port, **kwargs)
        self.controller.start()

    def settings(self, **extra: str) -> dict[str, str]:
        """The TPUJOB_SMTP_* settings that point tpujob at this server (no STARTTLS)."""
        values = {"host": "127.0.0.1", "port": str(self.port), "from": "tpujob@example.org",
                  "starttls": "false", **extra}
        return {f"TPUJOB_SMTP_{key.upper()}": value for key, value in values.items()}

    def parsed(self) -> list:
        import email
        import email.policy

        return [email.message_from_string(m["data"], policy=email.policy.default) for m in self.messages]

    def subjects(self) -> list[str]:
        return [str(m["Subject"]) for m in self.parsed()]

    def bodies(self) -> list[str]:
        return [m.get_content().strip() for m in self.parsed()]

    def close(self) -> None:
        self.controller.stop()
