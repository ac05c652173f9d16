"""The discovery catalogue: the resources the platform settled for, of endpoints marked
``discoverable``, as the Bazaar extension lists them.

A settlement of a discoverable endpoint records (or refreshes) its resource, as the seller declared
it and nothing the payer sent: the endpoint's own ``resourceUrl`` (not the URL requested, whose
path parameters and query a payer chooses), the offered terms without their one-time challenge
fields, the seller's description, and the route's ``bazaar`` declaration as the seller sent it,
when it has the extension's shape (`x402mw.platform.services.declarations`). One row per endpoint,
and per MCP tool the seller declared. Listing joins the endpoints, so an endpoint that stops being
discoverable leaves the catalogue at once.

A search ranks what it finds: first by where the words matched (a word found in the URL, the MCP
tool's name or the endpoint's name counts twice what a word found only in the description counts),
then by how much the resource is settled for lately (`popularity`), then newest first; the
resource's id settles ties, so the order is total and pages do not overlap.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import ColumnElement, Select, and_, case, false, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.services.declarations import declared_tool, seller_declaration

logger = logging.getLogger("x402mw.platform.catalogue")
_REFRESH_SECONDS = 60.0  # a resource settled again within this is not written again
_EXTRA_KEPT = ("name", "version")
_HALF_LIFE_SECONDS = 7 * 86_400.0
_MAX_WORDS = 8


@dataclass(frozen=True, slots=True)
class CatalogueQuery:
    """Filters of a catalogue listing (all optional; ``query`` is a search's words)."""

    type: str | None = None
    pay_to: str | None = None
    scheme: str | None = None
    network: str | None = None
    extensions: str | None = None
    query: str | None = None
    limit: int = 20
    offset: int = 0


class Catalogue:
    """Writes and reads of the catalogue. One per platform; safe to share between tasks."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._written: dict[tuple[str, str, str], float] = {}
        self._unwritten: dict[tuple[str, str, str], int] = {}  # settlements not yet in `popularity`

    async def record(
        self,
        endpoint: Any,
        *,
        accepted: dict[str, Any],
        description: str | None,
        mime_type: str | None,
        seller_extensions: dict[str, Any] | None,
        settled_at: datetime,
    ) -> None:
        """Record a settled resource of ``endpoint`` (its row) if the endpoint is discoverable.
        Everything given is the seller's: ``accepted`` the terms it offered, ``description`` and
        ``mime_type`` its route's, ``seller_extensions`` the extensions its route declares (never
        a payment payload's ``extensions``, which the payer writes)."""
        if not getattr(endpoint, "discoverable", False):
            return
        url = endpoint.resource_url
        bazaar = seller_declaration(seller_extensions)
        tool = declared_tool(bazaar) or ""
        kind = "mcp" if tool else "http"
        key = (endpoint.id, url, tool)
        now = time.monotonic()
        self._unwritten[key] = self._unwritten.get(key, 0) + 1  # counted for popularity when next written
        if now - self._written.get(key, -_REFRESH_SECONDS) < _REFRESH_SECONDS:
            return
        self._written[key] = now
        settled = self._unwritten.pop(key)
        if len(self._written) > 10_000:
            self._written.clear()
            self._unwritten.clear()
        offer = {k: v for k, v in accepted.items() if k != "extra"}
        offer["extra"] = {k: v for k, v in (accepted.get("extra") or {}).items() if k in _EXTRA_KEPT}
        values = {
            "type": kind,
            "description": (description or endpoint.name or "")[:1000],
            "mime_type": (mime_type or "")[:200],
            "accepts": [offer],
            "extensions": {"bazaar": bazaar} if bazaar is not None else {},
            "updated_at": settled_at,
        }
        table = tables.discovery_resources
        where = and_(table.c.endpoint_id == endpoint.id, table.c.resource == url, table.c.tool_name == tool)
        try:
            async with self.engine.begin() as conn:
                known = (await conn.execute(select(table.c.popularity).where(where).with_for_update())).first()
                values["popularity"] = popularity(None if known is None else known.popularity, settled, settled_at)
                if known is not None:
                    await conn.execute(table.update().where(where).values(**values))
                else:
                    await conn.execute(
                        table.insert().values(
                            id=new_id(),
                            merchant_id=endpoint.merchant_id,
                            endpoint_id=endpoint.id,
                            livemode=bool(endpoint.livemode),
                            resource=url,
                            tool_name=tool,
                            **values,
                        )
                    )
        except IntegrityError:  # another process recorded it at the same moment
            pass
        except Exception:  # the catalogue must never fail a settlement
            logger.warning("could not record %s in the discovery catalogue", url, exc_info=True)

    async def endpoint_for(
        self, *, merchant_id: str, livemode: bool, challenge_id: str | None, resource: str, pay_to: str, chain_id: int
    ) -> Any | None:
        """The discoverable endpoint a settlement through the facilitator API (``POST /x402/settle``)
        is catalogued under: its challenge's endpoint when it carries an x402mw challenge; otherwise the
        merchant's endpoint on ``resource``'s origin and chain that pays ``pay_to`` (of several, the one
        whose URL shares the longest path with ``resource``). None when there is none: an SDK seller's
        resources are listed only once the merchant has such an endpoint and made it discoverable.
        ``resource`` (the payload's, which the payer echoes) only chooses among the caller's own
        endpoints; what is listed is the chosen endpoint's."""
        endpoints, challenges = tables.agent_endpoints, tables.agent_challenges
        owned = [
            endpoints.c.merchant_id == merchant_id,
            endpoints.c.livemode == livemode,
            endpoints.c.discoverable.is_(True),
        ]
        async with self.engine.connect() as conn:
            if challenge_id is not None:
                statement = (
                    select(endpoints)
                    .join(challenges, challenges.c.endpoint_id == endpoints.c.id)
                    .where(challenges.c.id == challenge_id[:64], *owned)
                )
                return (await conn.execute(statement)).first()
            statement = select(endpoints).where(
                *owned, endpoints.c.chain_id == chain_id, func.lower(endpoints.c.payout_address) == pay_to.lower()
            )
            rows = (await conn.execute(statement.limit(100))).all()
        given = urlsplit(resource)
        best, best_length = None, -1
        for row in rows:
            own = urlsplit(row.resource_url)
            if (own.scheme, own.netloc.lower()) != (given.scheme, given.netloc.lower()):
                continue
            length = _shared_segments(own.path, given.path)
            if length > best_length:
                best, best_length = row, length
        return best

    async def page(self, query: CatalogueQuery) -> tuple[list[dict[str, Any]], int]:
        """One page of listed resources and how many match in all: a listing newest first, a search
        (``query.query``) ranked as the module says."""
        table = tables.discovery_resources
        listed = self._filtered(select(table), query)
        counted = self._filtered(select(func.count()).select_from(table), query)
        order: list[Any] = [table.c.updated_at.desc(), table.c.id]
        relevance = _relevance(query.query or "")
        if relevance is not None:
            order = [relevance.desc(), table.c.popularity.desc(), *order]
        ordered = listed.order_by(*order).limit(query.limit).offset(query.offset)
        async with self.engine.connect() as conn:
            total = int((await conn.execute(counted)).scalar_one())
            rows = (await conn.execute(ordered)).all()
        return [catalogue_item(row) for row in rows], total

    def _filtered(self, statement: Select[Any], query: CatalogueQuery) -> Select[Any]:
        table, endpoints = tables.discovery_resources, tables.agent_endpoints
        statement = statement.join(endpoints, endpoints.c.id == table.c.endpoint_id).where(
            endpoints.c.discoverable.is_(True)
        )
        if query.type is not None:
            statement = statement.where(table.c.type == query.type)
        if query.pay_to is not None:
            statement = statement.where(func.lower(endpoints.c.payout_address) == query.pay_to.lower())
        if query.scheme is not None and query.scheme != "exact":
            statement = statement.where(false())  # the platform settles the exact scheme only
        if query.network is not None:
            chain = query.network.removeprefix("eip155:")
            statement = statement.where(endpoints.c.chain_id == int(chain) if chain.isdigit() else false())
        if query.extensions is not None:
            if query.extensions == "bazaar":
                statement = statement.where(table.c.extensions.isnot(None), func.length(table.c.extensions) > 2)
            else:
                statement = statement.where(false())
        if query.query:
            for word in _patterns(query.query):
                in_description = func.lower(table.c.description).like(word, escape="\\")
                statement = statement.where(or_(_in_names(word), in_description))
        return statement


def popularity(previous: float | None, settled: int, at: datetime) -> float:
    """A resource's popularity once ``settled`` more payments are settled for it at ``at``: its
    settlements counted with a weight that halves every week, stored as ``log2(count) + t / week``
    (``t`` the time of the last update). Comparing the stored values compares the counts as they
    stand at any one moment, without updating the rows that were not settled for since."""
    now = at.timestamp() / _HALF_LIFE_SECONDS
    kept = 0.0 if previous is None else 2.0 ** min(previous - now, 64.0)
    return math.log2(kept + settled) + now


def _patterns(words: str) -> list[str]:
    """LIKE patterns (lower case, wildcards escaped) for the first words of a search."""
    escaped = (w.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") for w in words.split())
    return ["%" + word + "%" for word in list(escaped)[:_MAX_WORDS]]


def _in_names(pattern: str) -> ColumnElement[bool]:
    """Whether a search word is in the resource's URL, its MCP tool's name or its endpoint's name."""
    table, endpoints = tables.discovery_resources, tables.agent_endpoints
    return or_(
        func.lower(table.c.resource).like(pattern, escape="\\"),
        func.lower(endpoints.c.name).like(pattern, escape="\\"),
        func.lower(table.c.tool_name).like(pattern, escape="\\"),
    )


def _relevance(words: str) -> ColumnElement[int] | None:
    """A found resource's score: 2 for each word in its names, 1 for each found in its description
    only (every word is in one or the other: the search's filter requires it). None without words."""
    terms = [case((_in_names(pattern), 2), else_=1) for pattern in _patterns(words)]
    if not terms:
        return None
    score: ColumnElement[int] = terms[0]
    for term in terms[1:]:
        score = score + term
    return score


def catalogue_item(row: Any) -> dict[str, Any]:
    """A catalogue row in the Bazaar's wire shape."""
    item: dict[str, Any] = {
        "resource": row.resource,
        "type": row.type,
        "x402Version": 2,
        "accepts": row.accepts,
        "lastUpdated": row.updated_at.isoformat().replace("+00:00", "Z"),
    }
    if row.description:
        item["description"] = row.description
    if row.mime_type:
        item["mimeType"] = row.mime_type
    if row.extensions:
        item["extensions"] = row.extensions
    return item


def _shared_segments(one: str, other: str) -> int:
    """How many leading path segments two URL paths have in common."""
    shared = 0
    for mine, theirs in zip(one.split("/"), other.split("/"), strict=False):
        if mine != theirs:
            break
        shared += 1
    return shared
