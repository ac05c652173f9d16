"""What a merchant looks at: reports read from rollups kept up to date in the transactions of the
writes that change them (`rollups`), the reports themselves (`queries`), and CSV exports streamed
in bounded memory (`exports`)."""

from x402mw.platform.services.reports.exports import KINDS as EXPORT_KINDS
from x402mw.platform.services.reports.exports import export_csv
from x402mw.platform.services.reports.queries import GROUPS, REPORTS, ReportQuery, periods, run_report

__all__ = ["EXPORT_KINDS", "GROUPS", "REPORTS", "ReportQuery", "export_csv", "periods", "run_report"]
