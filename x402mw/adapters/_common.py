"""What the ASGI and WSGI payment middlewares share: their constructor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Generic, TypeVar

from x402mw.seller.config import PaidRoute
from x402mw.seller.gate import DEFAULT_PLATFORM_URL
from x402mw.seller.paywall import Paywall
from x402mw.seller.setup import build_gate

AppT = TypeVar("AppT")
TransportT = TypeVar("TransportT")


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
