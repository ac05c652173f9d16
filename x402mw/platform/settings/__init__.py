"""Platform settings: one model, read from ``X402MW_*`` environment variables and filled by the
command line's options.

`PlatformSettings` holds every setting of a platform process. Each setting is a field that says, in
one place, its name, default, help and validation:

- its environment variable is ``X402MW_`` and the field's name in capitals (``port``:
  ``X402MW_PORT``); lists are comma-separated (``X402MW_RPC_URL``), token addresses separated by
  spaces (``X402MW_TOKENS``), true/false settings take ``true``/``false``, ``1``/``0``, ``on``/``off``;
- its command-line option, where it has one, is the `Option` in the field's ``Annotated`` metadata
  (``x402mw/cli.py`` builds the click options from them; ``--help`` shows the variable too);
- secrets (the platform's keys, the deposit seed, the sealing key, minter keys, and the database
  and RPC URLs, which may carry credentials) are `SecretStr`: ``repr``, ``str``, ``model_dump``, logs
  and error messages show ``**********``; ``get_secret_value()`` is for the code that uses them.

``PlatformSettings(...)`` in code takes what the code gives and the defaults, so the environment
does not change a test or the demo; `PlatformSettings.from_env` puts the ``X402MW_*`` variables
under what the code gives, and `PlatformSettings.from_options` the command line's options over the
variables. Every problem is reported at once, as one `SettingsError` (a
`~x402mw.errors.ConfigurationError`, and a ``ValueError``) whose ``problems`` name each setting as it
was given (``--port``, ``X402MW_PORT`` or ``port``) and never show a secret.

Settings come in groups, one `SettingsGroup` class each (``groups.py``), which `PlatformSettings`
(``model.py``) combines; ``fields.py`` holds the checked types (`PrivateKey`, `RpcUrl`, ``Address``,
...) and ``problems.py`` how problems read. Fields are validated group by group from the last base
of `PlatformSettings` to the first, so a rule between settings (``--workers`` above 1 needs
``--rpc-url``) is a ``field_validator`` on the later setting that reads the earlier ones from
``info.data`` and raises `relation`; it is reported together with every other problem.

Adding a group is one small change. For mail, in ``groups.py``::

    class MailSettings(SettingsGroup):
        \"\"\"How reminder emails are sent.\"\"\"

        smtp_host: Annotated[str | None, Option("--smtp-host", metavar="HOST")] = Field(
            None, description="SMTP server; without one, emails are written to the data dir."
        )
        smtp_port: Port = Field(587, description="The SMTP server's port.")
        smtp_password: SecretStr | None = Field(None, description="The SMTP password.")

then put ``MailSettings`` first among the bases of `PlatformSettings`, add it to the groups of the
commands that take its options (``PROCESS_GROUPS`` in ``x402mw/cli.py``), export it here, and add
its rows to the table in ``docs/platform.md``. ``X402MW_SMTP_HOST`` and the others work from then
on, ``--smtp-host`` appears in ``serve --help``, and ``settings.smtp_host`` is there to read.
"""

from x402mw.platform.settings.fields import (
    ENV_PREFIX,
    Option,
    default_checkout_url_base,
    env_variable,
    option_of,
    shown_url,
)
from x402mw.platform.settings.groups import (
    MIN_POOL_SIZE,
    ChainAccessSettings,
    ChainSettings,
    KeySettings,
    LogSettings,
    MetricsSettings,
    ServerSettings,
    SettingsGroup,
    StorageSettings,
    SubscriptionSettings,
    WorkSettings,
)
from x402mw.platform.settings.model import PlatformSettings
from x402mw.platform.settings.problems import SettingsError, relation

__all__ = [
    "ENV_PREFIX",
    "MIN_POOL_SIZE",
    "ChainAccessSettings",
    "ChainSettings",
    "KeySettings",
    "LogSettings",
    "MetricsSettings",
    "Option",
    "PlatformSettings",
    "ServerSettings",
    "SettingsError",
    "SettingsGroup",
    "StorageSettings",
    "SubscriptionSettings",
    "WorkSettings",
    "default_checkout_url_base",
    "env_variable",
    "option_of",
    "relation",
    "shown_url",
]
