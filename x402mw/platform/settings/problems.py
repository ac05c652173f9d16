"""How a validation error of the settings reads: one problem per error, naming the setting as it was
given (``--port``, ``X402MW_PORT``, ``port``) and showing the value given only where no secret can
be in it::

    --port must be a whole number, not 'abc'
    X402MW_WEBHOOKS_ALLOW_PRIVATE must be true or false, not 'maybe'
    X402MW_RELAYER_KEY must be 32 bytes of hex (64 hex digits, 0x optional)
    --workers above 1 needs --rpc-url: the in-process dev chain lives in one process
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from x402mw.errors import ConfigurationError

_SHOWN_LENGTH = 80


class SettingsError(ConfigurationError, ValueError):
    """The settings are wrong; ``problems`` lists every problem, each naming its setting."""


def relation(template: str, **settings: str) -> PydanticCustomError:
    """The error a rule between settings raises: ``template`` names the other settings as
    ``{field}`` placeholders, which the problem fills with how each was given, as in
    ``raise relation("above 1 needs {rpc_url}", rpc_url="rpc_url")``."""
    return PydanticCustomError("setting_relation", template, {"template": template, **settings})


def holds_secret(annotation: Any) -> bool:
    """Whether a value of this type can hold a secret: a `SecretStr`, or a model or container with one."""
    if annotation is SecretStr:
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return any(holds_secret(field.annotation) for field in annotation.model_fields.values())
    return any(holds_secret(argument) for argument in get_args(annotation))


def describe(error: ValidationError, model: type[BaseModel], name_of: Callable[[str], str]) -> list[str]:
    """Every problem of ``error``, raised validating ``model``; ``name_of`` names a field as it was given."""
    problems = []
    for detail in error.errors(include_url=False):
        field = str(detail["loc"][0]) if detail["loc"] else ""
        info = model.model_fields.get(field)
        shown = info is not None and not holds_secret(info.annotation)
        where = name_of(field) if field else "the settings"
        within = [f"item {part + 1}" if isinstance(part, int) else str(part) for part in detail["loc"][1:]]
        if within:
            where += f" ({', '.join(within)})"
        problems.append(f"{where} {_message(detail, field, shown, name_of)}")
    return problems


def _message(detail: ErrorDetails, field: str, shown: bool, name_of: Callable[[str], str]) -> str:
    kind, context, value = detail["type"], detail.get("ctx", {}), detail["input"]
    given = f", not {_short(value)}" if shown and isinstance(value, str | int | float) else ""
    if kind == "setting_relation":
        names = {placeholder: name_of(str(name)) for placeholder, name in context.items() if placeholder != "template"}
        return str(context["template"]).format_map(names)
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false{given}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number{given}"
    if kind in ("float_parsing", "float_type", "finite_number"):
        return f"must be a number{given}"
    bounds = {
        "greater_than_equal": ("at least", "ge"),
        "greater_than": ("more than", "gt"),
        "less_than_equal": ("at most", "le"),
        "less_than": ("less than", "lt"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        bound = context[key]
        return f"must be {words} {int(bound) if bound == int(bound) else bound}{given}"
    if kind == "literal_error":
        choices = str(context["expected"]).replace("'", "")
        return f"is {_short(value)}; the {field.replace('_', ' ')} must be one of {choices}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "extra_forbidden":
        return "is not a setting"
    if kind == "value_error":
        return detail["msg"].removeprefix("Value error, ")
    message = detail["msg"]
    return message[:1].lower() + message[1:]


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_LENGTH else text[: _SHOWN_LENGTH - 4] + "...'"
