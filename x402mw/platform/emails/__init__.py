"""Emails to subscribers: renewal invoices, reminders and past-due notices.

An email is queued in the database (``subscription_emails``) in the transaction of the change it
reports, then rendered and sent by the worker (`x402mw.platform.emails.outbox.EmailOutbox`), at
least once: a worker that stops mid-send leaves it to be sent again. Sending goes over SMTP when the
platform has an SMTP host (`x402mw.platform.emails.mailers.SmtpTransport`); without one, each email
is written as an ``.eml`` file into the data dir (`FileTransport`) and a line is logged.
"""
