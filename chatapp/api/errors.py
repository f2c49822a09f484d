"""OpenAI-shaped errors: one exception type the views turn into the JSON body clients already parse."""

from __future__ import annotations

from django.http import JsonResponse


class ApiError(Exception):
    """A request the API refuses; carries the HTTP status and OpenAI's error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.retry_after = retry_after

    def body(self) -> dict:
        """The JSON object OpenAI's clients expect: {"error": {message, type, param, code}}."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_param(param: str, message: str) -> ApiError:
    """400 naming the parameter at fault and why."""
    return ApiError(400, message, param=param, code="invalid_value")


def error_response(err: ApiError) -> JsonResponse:
    """Render an ApiError, with Retry-After on 429/503 when the error gives one."""
    response = JsonResponse(err.body(), status=err.status)
    if err.retry_after is not None:
        response["Retry-After"] = str(err.retry_after)
    return response
