"""The distribution's version, for the modules that announce it (User-Agent headers, the OpenAPI
document, pages): they import it from here, not from the package root, which imports them."""

__version__ = "0.1.0"
