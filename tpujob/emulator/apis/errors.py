"""The errors the emulated APIs answer: ApiError (the server turns it into Google's JSON error
body) and the google.rpc.Code numbers a failed long-running operation carries."""

from __future__ import annotations

RESOURCE_EXHAUSTED = 8  # google.rpc.Code, used in failed operations
ABORTED = 10
INTERNAL = 13
HTTP_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS",
               429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}


class ApiError(Exception):
    """An error the server answers as `{"error": {"code", "message", "status"}}`."""

    def __init__(self, code: int, message: str, status: str | None = None,
                 payload: dict | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or HTTP_STATUS.get(code, "UNKNOWN")
        self.payload = payload  # the whole body, when a replayed answer gives it (fail-next)

    def body(self) -> dict:
        return self.payload or {"error": {"code": self.code, "message": self.message,
                                          "status": self.status}}
