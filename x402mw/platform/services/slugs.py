"""Slugs: the readable names of plans and payment links in their public addresses, one set per merchant.

Two merchants may each have a plan (or a link) called ``pro``: a slug is unique per merchant only, so
creating one never tells a merchant what another uses. The address a slug is handed out in therefore
carries its merchant, as ``<slug>.<merchant id>`` (a slug has no dot):
``{checkout_url_base}/su_pro.<merchant id>``, ``{checkout_url_base}/paylink/summer.<merchant id>``.

Addresses handed out while slugs were one namespace across merchants carry the bare slug
(``su_pro``, ``/paylink/summer``). They stay valid forever, and name what they named then: the
oldest plan (or link) with that slug, which was its only holder at the time.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Table, select
from sqlalchemy.ext.asyncio import AsyncConnection

_SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")


def slug_ref(slug: str, merchant_id: str) -> str:
    """How an address names the merchant's ``slug``: ``<slug>.<merchant id>``."""
    return f"{slug}.{merchant_id}"


def parse_slug_ref(ref: str) -> tuple[str, str | None] | None:
    """``(slug, merchant id)`` from ``<slug>.<merchant id>``, ``(slug, None)`` from an old bare
    ``<slug>`` (any case), or None for anything that is neither."""
    slug, dot, merchant = ref.lower().partition(".")
    if not _SLUG.fullmatch(slug):
        return None
    if not dot:
        return slug, None
    try:
        canonical = str(uuid.UUID(merchant))
    except ValueError:
        return None
    return (slug, canonical) if canonical == merchant else None


async def find_by_slug(conn: AsyncConnection, table: Table, ref: str) -> Mapping[Any, Any] | None:
    """The row of ``table`` (plans or payment links) that the address part ``ref`` names, of any
    merchant (public pages); None when none does."""
    parsed = parse_slug_ref(ref)
    if parsed is None:
        return None
    slug, merchant_id = parsed
    query = select(table).where(table.c.slug == slug)
    if merchant_id is not None:
        query = query.where(table.c.merchant_id == merchant_id)
    else:
        query = query.order_by(table.c.created_at, table.c.id).limit(1)  # the holder of an old address
    return (await conn.execute(query)).mappings().first()
