"""``/agent/challenges``: challenges issued by sellers' middleware, and the status of one payment.

The legacy alias ``{api_host}/merchant/v1/agent/challenges/:challengeId`` serves the same answer.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt
from sqlalchemy import select
from starlette.convertors import StringConvertor, register_url_convertor
from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.db import tables
from x402mw.platform.db.models import AgentPayment
from x402mw.platform.http.bodies import parse_body, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.fields import MINOR_PATTERN, ChallengeId, Uuid
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.agents import AgentChallenge, AgentChallengeEnvelope, ChallengeBatchResult
from x402mw.platform.services.challenges import record_challenges
from x402mw.platform.services.settlement.outcomes import payment_of

MAX_BATCH = 500


class ChallengeIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    challengeId: ChallengeId = Field(description="the id the seller middleware gave the challenge")
    endpointId: Uuid = Field(description="one of the caller's agent endpoints")
    network: str = Field(max_length=40, description="CAIP-2 network, e.g. `eip155:84532`")
    asset: str = Field(max_length=42, description="token address")
    payTo: str = Field(max_length=42, description="payout address snapshotted in the challenge")
    amount: str = Field(pattern=MINOR_PATTERN, description="integer string of minor units")
    resource: str = Field(default="", max_length=2048, description="URL of the paid resource")
    expiresAt: StrictInt = Field(description="Unix time (seconds) after which the challenge can no longer be paid")


class ChallengeBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    challenges: list[ChallengeIn] = Field(
        max_length=MAX_BATCH, description="challenges the seller middleware issued; ones already recorded are ignored"
    )


def challenge_row(merchant_id: str, livemode: bool, c: ChallengeIn) -> dict[str, Any]:
    return {
        "id": c.challengeId,
        "merchant_id": merchant_id,
        "endpoint_id": c.endpointId,
        "livemode": livemode,
        "network": c.network,
        "asset": c.asset,
        "pay_to": c.payTo,
        "amount_minor": int(c.amount),
        "resource": c.resource,
        "expires_at": datetime.fromtimestamp(c.expiresAt, UTC),
        "created_at": datetime.now(UTC),
        "payment_id": None,
    }


async def insert_challenges(conn: Any, merchant_id: str, livemode: bool, items: list[ChallengeIn]) -> int:
    """Record challenges, ignoring ones already known. Endpoints must belong to the merchant."""
    if not items:
        return 0
    table = tables.agent_endpoints
    wanted = {c.endpointId for c in items}
    owned = {
        r[0]
        for r in await conn.execute(
            select(table.c.id).where(
                table.c.id.in_(wanted), table.c.merchant_id == merchant_id, table.c.livemode == livemode
            )
        )
    }
    missing = wanted - owned
    if missing:
        raise HttpError.missing("agent endpoint", sorted(missing)[0], param="challenges.endpointId")
    rows = [challenge_row(merchant_id, livemode, c) for c in items]
    await record_challenges(conn, rows)
    return len(rows)


async def register_batch(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(ChallengeBatch, await read_json(request))
    async with platform_of(request).engine.begin() as conn:
        count = await insert_challenges(conn, caller.merchant_id, caller.livemode, body.challenges)
    return ModelResponse(ChallengeBatchResult(received=count))


def _status(challenge: Any, payment: AgentPayment | None, now: datetime) -> str:
    if payment is not None:
        # paid and not settled yet: held (the work it pays for runs), or on its way to the chain
        return "processing" if payment.status in ("held", "authorized", "claimed", "submitted") else payment.status
    expires = challenge.expires_at if challenge.expires_at.tzinfo else challenge.expires_at.replace(tzinfo=UTC)
    return "expired" if expires <= now else "open"


async def retrieve(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    platform = platform_of(request)
    challenge_id = request.path_params["challenge_id"]
    table = tables.agent_challenges
    payments = tables.agent_payments
    async with platform.engine.connect() as conn:
        challenge = (
            await conn.execute(
                select(table).where(
                    table.c.id == challenge_id,
                    *caller.owns(table),
                )
            )
        ).first()
        if challenge is None:
            raise HttpError.missing("challenge", challenge_id, param="challengeId")
        found = (
            (
                await conn.execute(
                    select(payments)
                    .where(payments.c.challenge_id == challenge_id, *caller.owns(payments))
                    .order_by(payments.c.created_at.desc())
                )
            )
            .mappings()
            .first()
        )
    payment = AgentPayment.model_validate(dict(found)) if found else None
    answer = AgentChallenge(
        challenge_id=challenge.id,
        status=_status(challenge, payment, platform.clock.now()),
        endpoint_id=challenge.endpoint_id,
        network=challenge.network,
        asset=challenge.asset,
        pay_to=challenge.pay_to,
        amount_minor=challenge.amount_minor,
        resource=challenge.resource,
        expires_at=challenge.expires_at,
        created_at=challenge.created_at,
        livemode=bool(challenge.livemode),
        payment=payment_of(payment) if payment else None,
    )
    return ModelResponse(AgentChallengeEnvelope(challenge=answer))


class _ChallengeIdConvertor(StringConvertor):
    """A path segment naming a challenge: any but ``batch``, which names the batch operation, so
    that ``GET /agent/challenges/batch`` is a 405 as the OpenAPI document says (it matches a
    concrete path before a templated one), not a lookup of a challenge called ``batch``."""

    regex = "(?!batch$)[^/]+"


register_url_convertor("challenge_id", _ChallengeIdConvertor())

_TAG = "Challenges"
routes = [
    ApiRoute(
        "POST",
        "/agent/challenges/batch",
        register_batch,
        Operation(
            id="recordChallenges",
            tag=_TAG,
            summary="Record issued challenges",
            description="The seller middleware issues challenges locally and sends them here in background batches.",
            answer=ChallengeBatchResult,
            body=ChallengeBatch,
            errors=(404,),
        ),
    ),
    ApiRoute(
        "GET",
        "/agent/challenges/{challenge_id:challenge_id}",
        retrieve,
        Operation(
            id="retrieveChallenge",
            tag=_TAG,
            summary="Retrieve a challenge and its payment",
            answer=AgentChallengeEnvelope,
            errors=(404,),
        ),
    ),
]
legacy_routes = [
    ApiRoute(
        "GET",
        "/agent/challenges/{challenge_id:challenge_id}",
        retrieve,
        Operation(
            id="retrieveChallengeLegacy",
            tag=_TAG,
            summary="Retrieve a challenge (legacy path)",
            description="Legacy alias `{api_host}/merchant/v1/agent/challenges/{challenge_id}` of "
            "`GET /v1/agent/challenges/{challenge_id}`, with the same answer.",
            answer=AgentChallengeEnvelope,
            errors=(404,),
        ),
    )
]
