"""What the command line's commands share: settings as options, output as JSON or a table, an
engine for a command's work, configuration errors as one line (`x402mw.cli` and `x402mw.cli_day`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar

import click
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from x402mw.platform.settings import Option, PlatformSettings, SettingsError, SettingsGroup, env_variable, option_of

R = TypeVar("R")
T = TypeVar("T")


def _emit(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(data, default=_json_value))
    else:
        for key, value in data.items():
            click.echo(f"{key}: {_shown(value)}")


def _json_value(value: object) -> str:
    """What JSON cannot hold as it is: an instant as the API writes it."""
    from datetime import datetime

    from x402mw.platform.timestamps import iso

    if isinstance(value, datetime):
        return iso(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _shown(value: object) -> str:
    from datetime import datetime

    from x402mw.platform.timestamps import iso

    if value is None:
        return "-"
    return iso(value) if isinstance(value, datetime) else str(value)


def _table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    """``rows`` as aligned columns under a header (``-`` for nothing)."""
    cells = [[_shown(row[c]) for c in columns] for row in rows]
    widths = [max([len(c), *(len(line[i]) for line in cells)]) for i, c in enumerate(columns)]
    for line in [columns, *cells]:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


def settings_options(*groups: type[SettingsGroup], **fixed: object) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Give a command the options of the settings of ``groups`` that have one (their `Option`), and
    call it with ``settings``: the `PlatformSettings` those options fill over the ``X402MW_*``
    variables, with ``fixed`` settings the command itself decides. The options have no defaults of
    their own and read no environment: both are the model's, and so is every check of a value."""
    fields = [
        (name, info, option)
        for group in groups
        for name, info in group.model_fields.items()
        if (option := option_of(info)) is not None
    ]

    def decorate(command: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(command)
        def run(**params: Any) -> R:
            options = {name: params.pop(name) for name, _, _ in fields}
            return command(settings=_settings(options, **fixed), **params)

        for name, info, option in reversed(fields):
            run = _click_option(name, info, option)(run)
        return run

    return decorate


def _click_option(name: str, info: FieldInfo, option: Option) -> Callable[[Any], Any]:
    default = option.default
    if default is None and info.default not in (None, PydanticUndefined, "", [], {}):
        default = str(info.default)
    described = f"env var: {env_variable(name)}" + (f"; default: {default}" if default else "")
    flag = info.annotation in (bool, bool | None)
    return click.option(
        f"{option.flag}/--no-{option.flag.removeprefix('--')}" if flag else option.flag,
        name,
        default=None,
        multiple=option.multiple,
        metavar=option.metavar,
        help=f"{info.description}  [{described}]",
    )


def _environment_only() -> str:
    """The ``--help`` epilog of the commands that run the platform: the settings without an option."""
    names = [env_variable(name) for name, info in PlatformSettings.model_fields.items() if option_of(info) is None]
    lines = ["  " + ", ".join(names[index : index + 3]) for index in range(0, len(names), 3)]
    return "\b\nSettings read from the environment only (docs/platform.md says what each does):\n" + "\n".join(lines)


def _settings(options: Mapping[str, object], **fixed: object) -> PlatformSettings:
    """The settings that command-line ``options`` (by setting; None or () where not given) and
    ``fixed`` fill over the ``X402MW_*`` variables. Problems end the command as one usage error
    (exit status 2) listing every one."""
    given = {name: value for name, value in options.items() if value not in (None, ())} | fixed
    try:
        return PlatformSettings.from_options(given)
    except SettingsError as exc:
        problems = exc.problems
    if len(problems) > 1:
        problems = [f"{len(problems)} problems with the settings:\n  - " + "\n  - ".join(problems)]
    raise click.UsageError(problems[0], click.get_current_context(silent=True))


@contextlib.contextmanager
def _configuration_errors_exit() -> Iterator[None]:
    """A `ConfigurationError` ends the command with its message (exit status 1), not a traceback."""
    from x402mw.errors import ConfigurationError

    try:
        yield
    except ConfigurationError as exc:
        raise click.ClickException(str(exc)) from None


async def _with_engine(settings: PlatformSettings, action: Callable[[Any], Awaitable[T]]) -> T:
    from x402mw.platform.db.engine import create_engine_for
    from x402mw.platform.db.schema import migrate

    database_url = settings.database_url.get_secret_value()
    await asyncio.to_thread(migrate, database_url)
    engine = create_engine_for(database_url)
    try:
        return await action(engine)
    finally:
        await engine.dispose()
