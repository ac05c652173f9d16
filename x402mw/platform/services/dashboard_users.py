"""The dashboard's people: users (argon2 password hashes, roles, optional TOTP), server-side sessions,
invitations and the audit log. Used by the dashboard's routes and by ``x402mw platform users``.

Sessions and invitations are random tokens handed to the browser; the database keeps only their
SHA-256, so a read of the tables gives nobody a way in. A session ends when revoked, after
`IDLE` without a request, or `ABSOLUTE` after sign-in, whichever comes first.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import Row, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id, utcnow
from x402mw.protocol.constant_time import same_secret

Role = Literal["owner", "developer", "support", "viewer"]
ROLES: tuple[Role, ...] = ("owner", "developer", "support", "viewer")
IDLE = timedelta(minutes=30)
ABSOLUTE = timedelta(hours=12)
SEEN_PRECISION = timedelta(seconds=60)  # how stale a session's idle clock may be
INVITATION_LIFETIME = timedelta(days=3)
MIN_PASSWORD = 10
_EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]{1,255}\.[^@\s]{1,63}$")
# Moderate argon2id parameters: about 50 ms a hash here, which throttling multiplies.
_hasher = PasswordHasher(time_cost=2, memory_cost=19_456, parallelism=1)
# Compared against when the email is unknown, so a miss costs as much as a wrong password.
_DUMMY = _hasher.hash("not a password of anyone")


class AccountError(ValueError):
    """A refused account operation, with a message fit to show."""


@dataclass(frozen=True, slots=True)
class User:
    id: str
    merchant_id: str
    email: str
    role: Role
    totp_enabled: bool
    totp_secret: str | None  # sealed


@dataclass(frozen=True, slots=True)
class Session:
    id: str  # the SHA-256 of the cookie's token
    user: User
    csrf_token: str
    livemode: bool
    two_factor_passed: bool


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def normal_email(email: str) -> str:
    email = email.strip().lower()
    if not _EMAIL.match(email):
        raise AccountError("enter a valid email address")
    return email


def hash_password(password: str) -> str:
    if len(password) < MIN_PASSWORD:
        raise AccountError(f"a password has at least {MIN_PASSWORD} characters")
    if len(password) > 1024:
        raise AccountError("a password has at most 1024 characters")
    return _hasher.hash(password)


def verify_password(stored: str | None, password: str) -> bool:
    try:
        return _hasher.verify(stored or _DUMMY, password[:1024]) and stored is not None
    except (VerificationError, InvalidHashError):
        return False


def _user_of(row: Any) -> User:
    return User(row.id, row.merchant_id, row.email, row.role, bool(row.totp_enabled), row.totp_secret)


async def create_user(engine: AsyncEngine, merchant_id: str, email: str, password: str, role: str) -> User:
    """A new user of ``merchant_id``'s dashboard. ServiceError: an unknown merchant or role, a malformed
    email, a short password, an email already taken (by this or any merchant)."""
    if role not in ROLES:
        raise AccountError(f"role is one of {', '.join(ROLES)}")
    email = normal_email(email)
    password_hash = hash_password(password)
    row = {"id": new_id(), "merchant_id": merchant_id, "email": email, "password_hash": password_hash, "role": role}
    async with engine.begin() as conn:
        merchant = await conn.execute(select(tables.merchants.c.id).where(tables.merchants.c.id == merchant_id))
        if merchant.first() is None:
            raise AccountError(f"no merchant {merchant_id}")
        try:
            await conn.execute(insert(tables.dashboard_users).values(totp_enabled=False, created_at=utcnow(), **row))
        except IntegrityError:
            raise AccountError("a user with this email exists") from None
    return User(row["id"], merchant_id, email, role, False, None)  # type: ignore[arg-type]


async def find_user_by_email(engine: AsyncEngine, email: str) -> tuple[User, str] | None:
    users = tables.dashboard_users
    async with engine.connect() as conn:
        query = select(users).where(users.c.email == email.strip().lower(), users.c.disabled_at.is_(None))
        row = (await conn.execute(query)).first()
    return None if row is None else (_user_of(row), row.password_hash)


async def list_users(engine: AsyncEngine, merchant_id: str) -> list[User]:
    users = tables.dashboard_users
    async with engine.connect() as conn:
        query = select(users).where(users.c.merchant_id == merchant_id, users.c.disabled_at.is_(None))
        return [_user_of(r) for r in await conn.execute(query.order_by(users.c.created_at))]


async def open_session(engine: AsyncEngine, user: User, now: datetime, *, two_factor_passed: bool) -> tuple[str, str]:
    """A new session for ``user``: the cookie's token and the session's CSRF token."""
    token, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    async with engine.begin() as conn:
        await conn.execute(
            insert(tables.dashboard_sessions).values(
                id=_digest(token),
                user_id=user.id,
                merchant_id=user.merchant_id,
                csrf_token=csrf,
                livemode=False,
                two_factor_passed=two_factor_passed,
                created_at=now,
                last_seen_at=now,
                expires_at=now + ABSOLUTE,
            )
        )
    return token, csrf


async def read_session(engine: AsyncEngine, token: str, now: datetime) -> Session | None:
    """The live session of a cookie's token (and its idle clock restarted), or None: unknown,
    revoked, idle too long, past its absolute expiry, or its user disabled."""
    if not token or len(token) > 100:
        return None
    sessions, users = tables.dashboard_sessions, tables.dashboard_users
    digest = _digest(token)
    query = (
        select(sessions, users.c.email, users.c.role, users.c.totp_enabled, users.c.totp_secret, users.c.disabled_at)
        .join(users, users.c.id == sessions.c.user_id)
        .where(sessions.c.id == digest)
    )
    async with engine.connect() as conn:
        row = (await conn.execute(query)).first()
        if row is None or row.revoked_at is not None or row.disabled_at is not None:
            return None
        if now >= _aware(row.expires_at) or now - _aware(row.last_seen_at) >= IDLE:
            return None
        if now - _aware(row.last_seen_at) >= SEEN_PRECISION:  # not a write on every page view
            await conn.execute(update(sessions).where(sessions.c.id == digest).values(last_seen_at=now))
            await conn.commit()
    user = User(row.user_id, row.merchant_id, row.email, row.role, bool(row.totp_enabled), row.totp_secret)
    return Session(digest, user, row.csrf_token, bool(row.livemode), bool(row.two_factor_passed))


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


async def update_session(engine: AsyncEngine, session_id: str, **values: Any) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            update(tables.dashboard_sessions).where(tables.dashboard_sessions.c.id == session_id).values(**values)
        )


async def revoke_session(engine: AsyncEngine, session_id: str, now: datetime) -> None:
    await update_session(engine, session_id, revoked_at=now)


async def revoke_user_sessions(engine: AsyncEngine, user_id: str, now: datetime) -> None:
    sessions = tables.dashboard_sessions
    async with engine.begin() as conn:
        await conn.execute(
            update(sessions)
            .where(sessions.c.user_id == user_id, sessions.c.revoked_at.is_(None))
            .values(revoked_at=now)
        )


async def set_totp(engine: AsyncEngine, user_id: str, sealed_secret: str | None, enabled: bool) -> None:
    users = tables.dashboard_users
    async with engine.begin() as conn:
        await conn.execute(
            update(users).where(users.c.id == user_id).values(totp_secret=sealed_secret, totp_enabled=enabled)
        )


# --- invitations -------------------------------------------------------------------------------------


async def invite(engine: AsyncEngine, inviter: User, email: str, role: str, now: datetime) -> str:
    """An invitation to ``inviter``'s merchant; returns the token for its link (shown once)."""
    return await invite_to(engine, inviter.merchant_id, inviter.id, email, role, now)


async def invite_to(
    engine: AsyncEngine, merchant_id: str, invited_by: str, email: str, role: str, now: datetime
) -> str:
    """An invitation to ``merchant_id``'s dashboard from ``invited_by`` (a user's id, or ``cli``);
    returns the token for its link (shown once). AccountError: an unknown merchant or role, a
    malformed email."""
    if role not in ROLES:
        raise AccountError(f"role is one of {', '.join(ROLES)}")
    email = normal_email(email)
    token = secrets.token_urlsafe(32)
    async with engine.begin() as conn:
        merchant = await conn.execute(select(tables.merchants.c.id).where(tables.merchants.c.id == merchant_id))
        if merchant.first() is None:
            raise AccountError(f"no merchant {merchant_id}")
        await conn.execute(
            insert(tables.dashboard_invitations).values(
                id=_digest(token),
                merchant_id=merchant_id,
                email=email,
                role=role,
                invited_by=invited_by,
                expires_at=now + INVITATION_LIFETIME,
                created_at=now,
            )
        )
    return token


async def find_invitation(engine: AsyncEngine, token: str, now: datetime) -> Any | None:
    """The open invitation of ``token``: None when unknown, used or expired."""
    invitations = tables.dashboard_invitations
    async with engine.connect() as conn:
        row = (await conn.execute(select(invitations).where(invitations.c.id == _digest(token[:100])))).first()
    if row is None or row.used_at is not None or now >= _aware(row.expires_at):
        return None
    return row


async def accept_invitation(engine: AsyncEngine, token: str, password: str, now: datetime) -> User:
    """The invited user, created; the invitation is used once (a replay is refused)."""
    invitations = tables.dashboard_invitations
    row = await find_invitation(engine, token, now)
    if row is None:
        raise AccountError("this invitation is not valid: used, expired or unknown")
    async with engine.begin() as conn:
        used = await conn.execute(
            update(invitations).where(invitations.c.id == row.id, invitations.c.used_at.is_(None)).values(used_at=now)
        )
        if used.rowcount != 1:
            raise AccountError("this invitation is not valid: used, expired or unknown")
    try:
        return await create_user(engine, row.merchant_id, row.email, password, row.role)
    except AccountError:
        async with engine.begin() as conn:  # give the invitation back: nothing was made
            await conn.execute(update(invitations).where(invitations.c.id == row.id).values(used_at=None))
        raise


async def remove_user(engine: AsyncEngine, merchant_id: str, user_id: str, now: datetime) -> bool:
    users = tables.dashboard_users
    async with engine.begin() as conn:
        result = await conn.execute(
            update(users)
            .where(users.c.id == user_id, users.c.merchant_id == merchant_id, users.c.disabled_at.is_(None))
            .values(disabled_at=now)
        )
    if result.rowcount:
        await revoke_user_sessions(engine, user_id, now)
    return bool(result.rowcount)


# --- audit -------------------------------------------------------------------------------------------


async def audit(
    engine: AsyncEngine,
    now: datetime,
    action: str,
    *,
    outcome: Literal["ok", "refused"] = "ok",
    user: User | None = None,
    merchant_id: str | None = None,
    email: str | None = None,
    target: str | None = None,
    address: str | None = None,
    detail: str | None = None,
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            insert(tables.dashboard_audit).values(
                id=new_id(),
                merchant_id=user.merchant_id if user else merchant_id,
                user_id=user.id if user else None,
                email=((user.email if user else email) or "")[:320] or None,
                action=action[:64],
                target=target[:200] if target else None,
                outcome=outcome,
                address=address[:64] if address else None,
                detail=detail[:500] if detail else None,
                created_at=now,
            )
        )


# --- TOTP (RFC 6238: HMAC-SHA1, 30 s steps, 6 digits) --------------------------------------------------


def new_totp_secret() -> str:
    return base64.b32encode(secrets.token_bytes(20)).decode("ascii")


def totp_code(secret: str, step: int) -> str:
    key = base64.b32decode(secret + "=" * (-len(secret) % 8), casefold=True)
    digest = hmac.new(key, struct.pack(">Q", step), hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    number = struct.unpack(">I", digest[offset : offset + 4])[0] & 0x7FFFFFFF
    return f"{number % 1_000_000:06d}"


def verify_totp(secret: str, code: str, unix_time: float, last_step: int | None = None) -> int | None:
    """The time step ``code`` matches (the current one or either neighbour), or None; a step at or
    before ``last_step`` (already used) does not match again."""
    code = code.strip().replace(" ", "")
    if not (len(code) == 6 and code.isascii() and code.isdigit()):
        return None
    now_step = int(unix_time // 30)
    for step in (now_step - 1, now_step, now_step + 1):
        if last_step is not None and step <= last_step:
            continue
        if same_secret(code, totp_code(secret, step)):
            return step
    return None


async def use_totp_step(engine: AsyncEngine, user_id: str, step: int) -> bool:
    """Record ``step`` as used; False when it (or a later one) already was (a replayed code)."""
    users = tables.dashboard_users
    async with engine.begin() as conn:
        result = await conn.execute(
            update(users)
            .where(users.c.id == user_id, (users.c.totp_last_step.is_(None)) | (users.c.totp_last_step < step))
            .values(totp_last_step=step)
        )
    return bool(result.rowcount)


RECOVERY_CODES = 10


def _recovery_digest(code: str) -> str:
    return _digest(code.strip().lower().replace("-", "").replace(" ", "")[:40])


async def new_recovery_codes(engine: AsyncEngine, user_id: str, now: datetime) -> list[str]:
    """`RECOVERY_CODES` fresh recovery codes for ``user_id`` (shown once: only their SHA-256 is
    kept), in place of any the user had."""
    codes = [secrets.token_hex(5) for _ in range(RECOVERY_CODES)]
    codes = [f"{code[:5]}-{code[5:]}" for code in codes]
    table = tables.dashboard_recovery_codes
    async with engine.begin() as conn:
        await conn.execute(delete(table).where(table.c.user_id == user_id))
        rows = [{"id": _recovery_digest(c), "user_id": user_id, "created_at": now} for c in codes]
        await conn.execute(insert(table), rows)
    return codes


async def drop_recovery_codes(engine: AsyncEngine, user_id: str) -> None:
    table = tables.dashboard_recovery_codes
    async with engine.begin() as conn:
        await conn.execute(delete(table).where(table.c.user_id == user_id))


async def use_recovery_code(engine: AsyncEngine, user_id: str, code: str, now: datetime) -> bool:
    """Whether ``code`` is one of the user's recovery codes not used yet; it is used up."""
    table = tables.dashboard_recovery_codes
    async with engine.begin() as conn:
        used = await conn.execute(
            update(table)
            .where(table.c.id == _recovery_digest(code), table.c.user_id == user_id, table.c.used_at.is_(None))
            .values(used_at=now)
        )
    return bool(used.rowcount)


async def totp_last_step(engine: AsyncEngine, user_id: str) -> int | None:
    users = tables.dashboard_users
    async with engine.connect() as conn:
        return (await conn.execute(select(users.c.totp_last_step).where(users.c.id == user_id))).scalar()


async def audit_entries(engine: AsyncEngine, merchant_id: str, limit: int = 200) -> list[Row[Any]]:
    """The merchant's audit log, newest first."""
    table = tables.dashboard_audit
    query = select(table).where(table.c.merchant_id == merchant_id).order_by(table.c.created_at.desc())
    async with engine.connect() as conn:
        return list(await conn.execute(query.limit(limit)))
