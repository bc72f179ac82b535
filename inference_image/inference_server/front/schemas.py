"""Request and response models. Requests are strict: no extra fields, no type coercion, limits from settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, create_model

from ..settings import Settings

STRICT = ConfigDict(extra="forbid", strict=True)


def _encodable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (no lone surrogates)") from None
    return text


class ErrorDetail(BaseModel):
    loc: list[str]
    type: str
    msg: str


class ErrorBody(BaseModel):
    code: str = Field(examples=["invalid_request"])
    message: str
    details: list[ErrorDetail] | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class HealthResponse(BaseModel):
    status: Literal["ok"]


class ReadyResponse(BaseModel):
    status: Literal["ready"]


@dataclass(frozen=True)
class Schemas:
    predict_request: type[BaseModel]
    batch_request: type[BaseModel]
    predict_response: type[BaseModel]
    batch_response: type[BaseModel]


def build_schemas(settings: Settings, prediction_model: type[BaseModel] | None) -> Schemas:
    text = Annotated[
        str, StringConstraints(min_length=1, max_length=settings.max_text_chars), AfterValidator(_encodable)
    ]
    prediction: Any = prediction_model or Any
    return Schemas(
        predict_request=create_model(
            "PredictRequest",
            __config__=STRICT,
            text=(
                text,
                Field(
                    description=f"1 to {settings.max_text_chars} characters",
                    examples=["The service was quick and friendly."],
                ),
            ),
        ),
        batch_request=create_model(
            "PredictBatchRequest",
            __config__=STRICT,
            # list[text], list[prediction]: types built at run time, which a type checker sees as variables.
            texts=(
                list[text],  # pyright: ignore[reportInvalidTypeForm]
                Field(
                    min_length=1,
                    max_length=settings.max_client_batch,
                    description=f"1 to {settings.max_client_batch} texts",
                    examples=[["First text.", "Second text."]],
                ),
            ),
        ),
        predict_response=create_model(
            "PredictResponse", model=(str, ...), version=(str, ...), prediction=(prediction, ...)
        ),
        batch_response=create_model(
            "PredictBatchResponse",
            model=(str, ...),
            version=(str, ...),
            predictions=(list[prediction], ...),  # pyright: ignore[reportInvalidTypeForm]
        ),
    )
