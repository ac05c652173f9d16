"""The Jinja environment every HTML the platform writes is rendered in (hosted checkout, the
dashboard, emails): a package's ``templates/`` folder, HTML autoescaped, an undefined name an error
rather than an empty string, and the lines of block tags trimmed."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

__all__ = ["template_environment"]


def template_environment(package: str, **options: Any) -> Environment:
    """The environment of ``package``'s templates; ``options`` are Jinja's own (``keep_trailing_newline``)."""
    return Environment(
        loader=PackageLoader(package, "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        **options,
    )
