"""Errors: the server's answer with its stable code, or a transport failure."""

from __future__ import annotations


class DelayqError(Exception):
    """Base of every error this client raises."""


class ApiError(DelayqError):
    """The server answered with an error document ``{"error", "message"}``.

    ``code`` is the stable code to branch on (``not_found``,
    ``stale_delivery``, ``invalid_delay``, ...); ``status`` the HTTP status.
    """

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later (an outage, not bad input)."""
        return self.status in (502, 503, 504)


class TransportError(DelayqError):
    """No node answered (connection refused, timeout, TLS refusal).

    For a push without a bizKey the message may or may not have been
    accepted: the client does not send it again on its own.
    """
