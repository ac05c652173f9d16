"""What the adapters share: the ASGI and WSGI middlewares' constructor, the guard of marked views."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, TypeVar, cast

from x402mw.seller.config import PaidRoute
from x402mw.seller.gate import DEFAULT_PLATFORM_URL
from x402mw.seller.paywall import Paywall
from x402mw.seller.setup import build_gate

AppT = TypeVar("AppT")
TransportT = TypeVar("TransportT")
F = TypeVar("F", bound=Callable[..., Any])
_CONVERTER = re.compile(r"<(?:[^:<>]+:)?([A-Za-z_][A-Za-z0-9_]*)>")


class GatedApp(Generic[AppT, TransportT]):
    """An app behind a payment gate. Subclasses say whether amount callbacks may be async
    (``refuse_async``) and make their seller in `connect`."""

    refuse_async: ClassVar[bool]

    def __init__(
        self,
        app: AppT,
        *,
        api_key: str,
        platform_url: str = DEFAULT_PLATFORM_URL,
        routes: Mapping[str, PaidRoute | str] | None = None,
        settle_timeout: float = 30.0,
        transport: TransportT | None = None,
        paywall: Paywall | None = None,
        well_known: bool = True,
        origin: str | None = None,
    ) -> None:
        self.app = app
        self.gate, self.routes = build_gate(
            api_key=api_key,
            platform_url=platform_url,
            routes=routes,
            settle_timeout=settle_timeout,
            refuse_async=self.refuse_async,
            paywall=paywall,
            origin=origin,
        )
        self.well_known = bool(well_known)
        self.connect(transport)

    def connect(self, transport: TransportT | None) -> None:
        """Make the seller that talks to the platform through ``transport``."""
        raise NotImplementedError


def guard_view(view: F, route: PaidRoute, mark: str, *, is_async: bool, ensure: Callable[[tuple[Any, ...]], None]) -> F:
    """``view``, sync or async as ``is_async`` says, calling ``ensure`` with its positional
    arguments before it runs (to refuse to serve a paid view whose payment was not checked), with
    ``route`` set as its attribute ``mark``."""
    if is_async:

        @functools.wraps(view)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            ensure(args)
            return await view(*args, **kwargs)

        guarded: Callable[..., Any] = guarded_async
    else:

        @functools.wraps(view)
        def guarded_sync(*args: Any, **kwargs: Any) -> Any:
            ensure(args)
            return view(*args, **kwargs)

        guarded = guarded_sync
    setattr(guarded, mark, route)
    return cast(F, guarded)


def route_template(rule: str) -> str:
    """A Django or Flask route rule as a path template: ``/items/<int:item_id>`` is ``/items/{item_id}``."""
    return _CONVERTER.sub(r"{\1}", rule)
