"""How a resource's operations are written once and typed twice.

A resource class (``PaymentIntents(Resource[Mode])``) writes each operation as a method that
returns a `Call`, decorated with `operation` (or `paginated` for lists). The decorator is a
descriptor whose ``__get__`` is overloaded on the resource's mode: on a ``Resource[Sync]`` the
operation is ``(...) -> PaymentIntent`` and runs at once, on a ``Resource[Async]`` it is
``(...) -> Awaitable[PaymentIntent]``. A list operation answers a `Page` or an `AsyncPager`.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Concatenate, Final, Generic, ParamSpec, Self, TypeVar, overload

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from x402mw.client.merchant.calls import Call, Listing, path
from x402mw.client.merchant.drivers import AsyncRunner, SyncRunner
from x402mw.client.merchant.pages import AsyncPager, Page

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class Sync:
    """Mode marker: the resources of `MerchantClient` answer their results."""


class Async:
    """Mode marker: the resources of `AsyncMerchantClient` answer awaitables."""


Mode = TypeVar("Mode", Sync, Async)


class Resource(Generic[Mode]):
    """A group of operations of the merchant API, bound to a client's runner."""

    def __init__(self, runner: SyncRunner | AsyncRunner) -> None:
        self._runner = runner

    def __repr__(self) -> str:
        return f"<{type(self).__name__} resource>"


class operation(Generic[P, R]):
    """Decorator: the method builds the operation's `Call`; the client runs it."""

    def __init__(self, build: Callable[Concatenate[Any, P], Call[R]]) -> None:
        self._build = build
        self.__doc__ = build.__doc__

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, obj: Resource[Sync], owner: type[Any]) -> Callable[P, R]: ...
    @overload
    def __get__(self, obj: Resource[Async], owner: type[Any]) -> Callable[P, Awaitable[R]]: ...
    def __get__(self, obj: Resource[Any] | None, owner: type[Any]) -> Any:
        if obj is None:
            return self
        build, run = self._build, obj._runner.run

        @functools.wraps(build)
        def bound(*args: P.args, **kwargs: P.kwargs) -> Any:
            return run(build(obj, *args, **kwargs))

        return bound


class paginated(Generic[P, T]):
    """Decorator for list operations: the method builds the first page's `Call`. The sync client
    answers a `Page`, the async client an `AsyncPager`."""

    def __init__(self, build: Callable[Concatenate[Any, P], Call[Listing[T]]]) -> None:
        self._build = build
        self.__doc__ = build.__doc__

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, obj: Resource[Sync], owner: type[Any]) -> Callable[P, Page[T]]: ...
    @overload
    def __get__(self, obj: Resource[Async], owner: type[Any]) -> Callable[P, AsyncPager[T]]: ...
    def __get__(self, obj: Resource[Any] | None, owner: type[Any]) -> Any:
        if obj is None:
            return self
        build, listing = self._build, obj._runner.listing

        @functools.wraps(build)
        def bound(*args: P.args, **kwargs: P.kwargs) -> Any:
            return listing(build(obj, *args, **kwargs))

        return bound


class APIObject(BaseModel):
    """Base of every object the API answers: snake_case attributes read from camelCase JSON; members
    this version does not know are kept (``model_extra``, and as attributes under their JSON name)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)


class NotGiven:
    """The default of an update parameter whose None means "clear it": leave the value unchanged."""

    def __repr__(self) -> str:
        return "NOT_GIVEN"

    def __bool__(self) -> bool:
        return False


NOT_GIVEN: Final = NotGiven()


def present(**fields: Any) -> dict[str, Any]:
    """A request body of the given fields, camelCased, leaving out None and `NOT_GIVEN`."""
    return {to_camel(name): value for name, value in fields.items() if value is not None and value is not NOT_GIVEN}


def money(value: Decimal | str | int, name: str) -> str:
    """A money amount as the API's decimal string; floats are refused (they cannot hold 0.1 exactly)."""
    if isinstance(value, bool) or not isinstance(value, Decimal | str | int):
        raise TypeError(f"{name} must be a Decimal, str or int, not {type(value).__name__}")
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{name} must be a finite amount")
        return format(value, "f")
    return str(value)


def list_params(**params: str | int | None) -> dict[str, str]:
    """Query parameters, leaving out None; ``limit`` and cursors keep their wire names."""
    return {
        to_camel(name) if name not in _CURSORS else name: str(value)
        for name, value in params.items()
        if value is not None
    }


_CURSORS = frozenset({"limit", "starting_after", "ending_before"})


def listing_of(model: type[M]) -> Callable[[Any], Listing[M]]:
    """The parser of a list answer whose ``data`` holds ``model`` objects."""

    def parse(answer: Mapping[str, Any]) -> Listing[M]:
        return Listing([model.model_validate(item) for item in answer["data"]], bool(answer["hasMore"]))

    return parse


@dataclass(frozen=True, slots=True)
class Collection(Generic[M]):
    """One collection of the API (``/payment-intents``): its objects' ``model``, the ``key`` an
    answer holds one under, and the `Call` of each operation resources share, so that a resource's
    method says only what is its own (its parameters and body)."""

    path: str
    model: type[M]
    key: str

    def parse(self, answer: Mapping[str, Any]) -> M:
        """The object of an answer (``{"<key>": {...}}``)."""
        return self.model.model_validate(answer[self.key])

    def create(self, body: Mapping[str, Any], idempotency_key: str | None) -> Call[M]:
        return Call("POST", self.path, self.parse, body=body, idempotency_key=idempotency_key)

    def retrieve(self, object_id: str) -> Call[M]:
        return Call("GET", path(self.path + "/{}", object_id), self.parse)

    def update(self, object_id: str, body: Mapping[str, Any]) -> Call[M]:
        return Call("PATCH", path(self.path + "/{}", object_id), self.parse, body=body)

    def action(
        self, object_id: str, action: str, *, body: Mapping[str, Any] | None = None, idempotency_key: str | None
    ) -> Call[M]:
        """POST ``<path>/<id>/<action>`` (``cancel``, ``advance``...), answering the object."""
        return Call(
            "POST", path(self.path + "/{}/" + action, object_id), self.parse, body=body, idempotency_key=idempotency_key
        )

    def list(self, **params: str | int | None) -> Call[Listing[M]]:
        """The first page of the collection, filtered by ``params`` (see `list_params`)."""
        return Call("GET", self.path, listing_of(self.model), params=list_params(**params))
