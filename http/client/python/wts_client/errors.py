"""Errors: the service's error envelope, and operations that did not
succeed."""

__all__ = ["WtsError", "OperationFailed"]


class WtsError(Exception):
    """A request the service refused: ``code`` is the stable code of
    docs/errors.md, ``status`` the HTTP status (0 when no answer came)."""

    def __init__(self, status, code, message, request_id=None, retry_after=None):
        super().__init__("%s %s: %s" % (status, code, message))
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id
        self.retry_after = retry_after


class OperationFailed(Exception):
    """An operation that ended failed or cancelled: ``code`` is its
    error_code (docs/errors.md, "Codes on operations and runs")."""

    def __init__(self, operation):
        self.operation = operation
        self.code = operation.error_code
        self.message = operation.error_message
        super().__init__("operation %s (%s) %s: %s: %s" % (operation.id, operation.kind, operation.status, self.code, self.message))
