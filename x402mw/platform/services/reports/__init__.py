"""What a merchant looks at: reports read from rollups kept up to date in the transactions of the
writes that change them (`rollups`), the reports themselves (`queries`), and CSV exports streamed
in bounded memory (`exports`)."""

from x402mw.platform.services.reports.exports import EXPORT_KINDS as EXPORT_KINDS
from x402mw.platform.services.reports.exports import export_csv as export_csv
from x402mw.platform.services.reports.queries import GROUPS as GROUPS
from x402mw.platform.services.reports.queries import REPORTS as REPORTS
from x402mw.platform.services.reports.queries import ReportQuery as ReportQuery
from x402mw.platform.services.reports.queries import periods as periods
from x402mw.platform.services.reports.queries import run_report as run_report
