"""The dashboard as a test's browser meets it: the token `tpujob ui --token` is started with, and
just enough of a browser (a cookie, the path the pages live under), for the tests of `tpujob ui`
and of what it shows when the store fails."""

from __future__ import annotations

import http.client
from urllib.parse import urlencode, urlsplit

TOKEN = "test-token-0123456789abcdef"


class Browser:
    """Just enough of one: requests to the dashboard, keeping the cookie it sets, and the path
    the pages live under (`root`, learnt from the login's redirect) put before every path."""

    def __init__(self, port: int):
        self.port, self.cookie, self.root = port, None, ""

    def request(self, method: str, path: str, body: dict | None = None, *, cookie: bool = True,
                headers: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        path = self.root + path if path.startswith("/") else path
        headers = {**({"Cookie": self.cookie} if cookie and self.cookie else {}), **(headers or {})}
        data = None
        if body is not None:
            data = urlencode(body)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        text = response.read().decode()
        if response.getheader("Set-Cookie"):
            self.cookie = response.getheader("Set-Cookie").split(";", 1)[0]
        return response.status, response, text

    def get(self, path: str, **kw):
        return self.request("GET", path, **kw)

    def post(self, path: str, body: dict, **kw):
        return self.request("POST", path, body, **kw)


def logged_in(ui) -> Browser:
    """`ui`: (the URL `tpujob ui` printed, a Browser); follows the URL's login and returns the
    Browser, its cookie set and its `root` learnt."""
    url, browser = ui
    parts = urlsplit(url)
    status, response, _ = browser.get(f"{parts.path}?{parts.query}")
    assert status == 303
    browser.root = response.getheader("Location").rstrip("/")
    return browser
